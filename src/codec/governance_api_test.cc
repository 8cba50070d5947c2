#include "kvgov/codec/governance_api.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kvgov {
namespace {

Result<InvalidationRequest> Decode(const std::string& body) {
  return DecodeInvalidationRequestJson(body, JsonLimits{});
}

// The error an invalidation body is refused with, or "ok".
std::string ErrorOf(const std::string& body) {
  Result<InvalidationRequest> decoded = Decode(body);
  if (decoded.ok()) return "ok";
  EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument) << body;
  return decoded.status().message();
}

TEST(InvalidationRequestTest, ASpanAWorkerBlockAndTheScopesStillDecode) {
  Result<InvalidationRequest> span =
      Decode(R"({"model":"llama","tenant":"acme","token_ids":[1,2,3],"reason":"r"})");
  ASSERT_TRUE(span.ok()) << span.status().ToString();
  EXPECT_EQ(span->token_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(span->scope, "");
  EXPECT_FALSE(span->flush);

  Result<InvalidationRequest> block =
      Decode(R"({"model":"llama","worker":"w1","block_hash":7,"group_idx":1,"reason":"r"})");
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  EXPECT_EQ(block->block_hash, 7u);

  for (const char* body : {R"({"model":"llama","scope":"model","reason":"r"})",
                           R"({"model":"llama","scope":"worker","worker":"w1","reason":"r"})"}) {
    EXPECT_EQ(ErrorOf(body), "ok") << body;
  }
}

TEST(InvalidationRequestTest, ATenantRevocationDecodesWithAndWithoutAModel) {
  Result<InvalidationRequest> one_model =
      Decode(R"({"scope":"tenant","tenant":"acme","model":"llama","reason":"offboarded"})");
  ASSERT_TRUE(one_model.ok()) << one_model.status().ToString();
  EXPECT_EQ(one_model->scope, "tenant");
  EXPECT_EQ(one_model->tenant, "acme");
  EXPECT_EQ(one_model->model, "llama");
  EXPECT_EQ(one_model->reason, "offboarded");
  EXPECT_FALSE(one_model->flush);

  // No model, or "": every model.
  Result<InvalidationRequest> every_model =
      Decode(R"({"scope":"tenant","tenant":"acme","reason":"offboarded"})");
  ASSERT_TRUE(every_model.ok()) << every_model.status().ToString();
  EXPECT_EQ(every_model->model, "");
  EXPECT_EQ(ErrorOf(R"({"scope":"tenant","tenant":"acme","model":"","reason":"r"})"), "ok");

  Result<InvalidationRequest> flushed =
      Decode(R"({"scope":"tenant","tenant":"acme","flush":true,"reason":"breach"})");
  ASSERT_TRUE(flushed.ok()) << flushed.status().ToString();
  EXPECT_TRUE(flushed->flush);
  EXPECT_EQ(ErrorOf(R"({"scope":"tenant","tenant":"acme","flush":false,"reason":"r"})"), "ok");

  // The other fields at their defaults are no span and no worker: a client
  // (or the fuzzer's rewrite) that writes every field still gets through.
  EXPECT_EQ(ErrorOf(R"({"scope":"tenant","tenant":"acme","model":"llama","token_ids":[],)"
                    R"("worker":"","lora_name":"","group_idx":0,"reason":"r"})"),
            "ok");
}

TEST(InvalidationRequestTest, EachTenantRevocationRuleIsRefusedByName) {
  const std::string kNotWithTenant =
      ": not with scope tenant (a revocation takes every block of the tenant)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"scope":"tenant","reason":"r"})", "$.tenant: required with scope tenant"},
      {R"({"scope":"tenant","tenant":"","model":"llama","reason":"r"})",
       "$.tenant: required with scope tenant"},
      {R"({"scope":"tenant","tenant":"acme","token_ids":[1,2],"reason":"r"})",
       "$.token_ids" + kNotWithTenant},
      {R"({"scope":"tenant","tenant":"acme","worker":"w1","reason":"r"})",
       "$.worker" + kNotWithTenant},
      {R"({"scope":"tenant","tenant":"acme","block_hash":7,"reason":"r"})",
       "$.block_hash" + kNotWithTenant},
      {R"({"scope":"tenant","tenant":"acme","lora_name":"sql","reason":"r"})",
       "$.lora_name" + kNotWithTenant},
      {R"({"scope":"tenant","tenant":"acme","group_idx":1,"reason":"r"})",
       "$.group_idx" + kNotWithTenant},
      {R"({"scope":"tenant","tenant":"acme","reason":""})", "$.reason: required, got empty"},
      {R"({"scope":"tenant","tenant":"acme"})", "$.reason: missing required field"},
      {R"({"scope":"tenant","tenant":"acme","flush":1,"reason":"r"})",
       "$.flush: want a boolean, got number"},
      {R"({"scope":"tenant","tenant":"acme","model":null,"reason":"r"})",
       "$.model: want a string, got null"},
  };
  for (const auto& [body, error] : cases) EXPECT_EQ(ErrorOf(body), error) << body;
}

TEST(InvalidationRequestTest, FlushIsOnlyForATenantRevocation) {
  for (const char* body :
       {R"({"model":"llama","token_ids":[1],"flush":true,"reason":"r"})",
        R"({"model":"llama","worker":"w1","block_hash":7,"flush":true,"reason":"r"})",
        R"({"model":"llama","scope":"model","flush":true,"reason":"r"})",
        R"({"model":"llama","scope":"worker","worker":"w1","flush":true,"reason":"r"})"}) {
    EXPECT_EQ(ErrorOf(body), "$.flush: only with scope tenant") << body;
  }
  // false is the default, and says nothing.
  EXPECT_EQ(ErrorOf(R"({"model":"llama","scope":"model","flush":false,"reason":"r"})"), "ok");
}

TEST(InvalidationRequestTest, ModelStaysRequiredOutsideARevocation) {
  for (const char* body :
       {R"({"token_ids":[1],"reason":"r"})", R"({"worker":"w1","block_hash":7,"reason":"r"})",
        R"({"scope":"model","reason":"r"})", R"({"scope":"worker","worker":"w1","reason":"r"})"}) {
    EXPECT_EQ(ErrorOf(body), "$.model: missing required field") << body;
  }
}

TEST(InvalidationRequestTest, TheScopeAndSpanMessagesListTenant) {
  EXPECT_EQ(ErrorOf(R"({"model":"llama","scope":"fleet","reason":"r"})"),
            R"($.scope: want "worker", "model" or "tenant", got 'fleet')");
  EXPECT_EQ(ErrorOf(R"({"model":"llama","scope":"Tenant","tenant":"acme","reason":"r"})"),
            R"($.scope: want "worker", "model" or "tenant", got 'Tenant')");
  const std::string kExactlyOne =
      "$.token_ids: give exactly one of token_ids, prompt, messages, worker + block_hash, or "
      "scope (worker, model or tenant)";
  EXPECT_EQ(ErrorOf(R"({"model":"llama","reason":"r"})"), kExactlyOne);
  EXPECT_EQ(ErrorOf(R"({"model":"llama","token_ids":[1],"scope":"model","reason":"r"})"),
            kExactlyOne);
  EXPECT_EQ(ErrorOf(R"({"model":"llama","scope":"worker","reason":"r"})"),
            "$.worker: required with block_hash or scope worker");
  EXPECT_EQ(ErrorOf(R"({"model":"llama","scope":"model","reason":"r","flsuh":true})"),
            "$.flsuh: unknown field");
}

TEST(InvalidationRequestTest, APromptOrChatMessagesNameASpanInPlaceOfTokenIds) {
  Result<InvalidationRequest> prompt =
      Decode(R"({"model":"llama","tenant":"acme","prompt":"leaked text","reason":"r"})");
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(prompt->prompt, "leaked text");
  EXPECT_TRUE(prompt->token_ids.empty());
  EXPECT_EQ(prompt->messages, "");

  // Kept as minified JSON text, each message as sent (its fields are the
  // engine's chat template's to judge).
  Result<InvalidationRequest> chat =
      Decode(R"({"model":"llama","messages":[ {"role":"user", "content":"hi"} ],"reason":"r"})");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->messages, R"([{"content":"hi","role":"user"}])");
  EXPECT_EQ(chat->prompt, "");
}

TEST(InvalidationRequestTest, EachPromptAndMessagesRuleIsRefusedByName) {
  const std::string kExactlyOne =
      ": give exactly one of token_ids, prompt, messages, worker + block_hash, or scope (worker, "
      "model or tenant)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model":"llama","token_ids":[1],"prompt":"p","reason":"r"})",
       "$.prompt: not with token_ids (give one of token_ids, prompt or messages)"},
      {R"({"model":"llama","token_ids":[1],"messages":[{}],"reason":"r"})",
       "$.messages: not with token_ids or prompt (give one of token_ids, prompt or messages)"},
      {R"({"model":"llama","prompt":"p","messages":[{}],"reason":"r"})",
       "$.messages: not with token_ids or prompt (give one of token_ids, prompt or messages)"},
      // Not beside a scope or a worker's block: only where token_ids may stand.
      {R"({"model":"llama","prompt":"p","scope":"model","reason":"r"})", "$.prompt" + kExactlyOne},
      {R"({"model":"llama","messages":[{}],"scope":"worker","worker":"w1","reason":"r"})",
       "$.messages" + kExactlyOne},
      {R"({"model":"llama","prompt":"p","worker":"w1","block_hash":7,"reason":"r"})",
       "$.prompt" + kExactlyOne},
      {R"({"scope":"tenant","tenant":"acme","prompt":"p","reason":"r"})",
       "$.prompt: not with scope tenant (a revocation takes every block of the tenant)"},
      {R"({"scope":"tenant","tenant":"acme","messages":[{}],"reason":"r"})",
       "$.messages: not with scope tenant (a revocation takes every block of the tenant)"},
      // The types.
      {R"({"model":"llama","prompt":["p"],"reason":"r"})", "$.prompt: want a string, got array"},
      {R"({"model":"llama","messages":"hi","reason":"r"})",
       "$.messages: want an array of chat messages, got string"},
      {R"({"model":"llama","messages":{"role":"user"},"reason":"r"})",
       "$.messages: want an array of chat messages, got object"},
      {R"({"model":"llama","messages":[{"role":"user"},"hi"],"reason":"r"})",
       "$.messages[1]: want an object, got string"},
      // The defaults ("" and []) are no span.
      {R"({"model":"llama","prompt":"","reason":"r"})", "$.token_ids" + kExactlyOne},
      {R"({"model":"llama","messages":[],"reason":"r"})", "$.token_ids" + kExactlyOne},
      {R"({"prompt":"p","reason":"r"})", "$.model: missing required field"},
  };
  for (const auto& [body, error] : cases) EXPECT_EQ(ErrorOf(body), error) << body;
  // The defaults pass beside the other forms, and beside a revocation.
  EXPECT_EQ(ErrorOf(R"({"model":"llama","scope":"model","prompt":"","messages":[],"reason":"r"})"),
            "ok");
  EXPECT_EQ(ErrorOf(R"({"scope":"tenant","tenant":"acme","prompt":"","messages":[],"reason":"r"})"),
            "ok");
}

TEST(InvalidationRequestTest, MessagesAreBoundedLikeTheRestOfTheBody) {
  JsonLimits limits;
  limits.max_depth = 4;
  Result<InvalidationRequest> deep = DecodeInvalidationRequestJson(
      R"({"model":"llama","messages":[{"role":"user","content":[[[["x"]]]]}],"reason":"r"})",
      limits);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kResourceExhausted) << deep.status().ToString();
}

Result<QuarantineRequest> DecodeQuarantine(const std::string& body) {
  return DecodeQuarantineRequestJson(body, JsonLimits{});
}

TEST(QuarantineRequestTest, APromptOrChatMessagesNameTheSpan) {
  Result<QuarantineRequest> prompt =
      DecodeQuarantine(R"({"model":"llama","tenant":"acme","prompt":"p","reason":"r"})");
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(prompt->prompt, "p");
  Result<QuarantineRequest> chat = DecodeQuarantine(
      R"({"model":"llama","messages":[{"role":"user","content":"hi"}],"invalidate":true,)"
      R"("reason":"r"})");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->messages, R"([{"content":"hi","role":"user"}])");
  EXPECT_TRUE(chat->invalidate);
}

TEST(QuarantineRequestTest, EachPromptAndMessagesRuleIsRefusedByName) {
  const std::string kExactlyOne =
      ": give token_ids, prompt or messages, or worker and block_hash (exactly one)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model":"llama","reason":"r"})", "$.token_ids" + kExactlyOne},
      {R"({"model":"llama","prompt":"","reason":"r"})", "$.token_ids" + kExactlyOne},
      {R"({"model":"llama","token_ids":[1],"prompt":"p","reason":"r"})",
       "$.prompt: not with token_ids (give one of token_ids, prompt or messages)"},
      {R"({"model":"llama","prompt":"p","messages":[{}],"reason":"r"})",
       "$.messages: not with token_ids or prompt (give one of token_ids, prompt or messages)"},
      {R"({"model":"llama","messages":[{}],"worker":"w1","block_hash":7,"reason":"r"})",
       "$.messages" + kExactlyOne},
      {R"({"model":"llama","messages":[1],"reason":"r"})",
       "$.messages[0]: want an object, got number"},
      {R"({"model":"llama","prompt":7,"reason":"r"})", "$.prompt: want a string, got number"},
      {R"({"model":"llama","prompt":"p"})", "$.reason: missing required field"},
  };
  for (const auto& [body, error] : cases) {
    Result<QuarantineRequest> decoded = DecodeQuarantine(body);
    ASSERT_FALSE(decoded.ok()) << body;
    EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(decoded.status().message(), error) << body;
  }
}

}  // namespace
}  // namespace kvgov
