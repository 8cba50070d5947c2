// The OpenAI-compatible gateway (docs/formats/gateway.md) against the real
// binary: two simulated vLLM engines, kvgov following and fronting them,
// httplib and curl as the clients.

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "connectors/test_support.h"
#include "e2e/bearer.h"
#include "e2e/daemon_process.h"
#include "e2e/gateway_daemon.h"
#include "e2e/run_command.h"
#include "e2e/tokens.h"
#include "e2e/wait.h"
#include "kvgov/simfleet/live_engine.h"

namespace kvgov::testing {
namespace {

using Json = nlohmann::json;

constexpr int64_t kBlockSize = 16;

class GatewayE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* id : {"w1", "w2"}) {
      simfleet::LiveEngineOptions options;
      options.id = id;
      options.model = "llama";
      options.pool.capacity_blocks = 512;
      options.pool.block_size = kBlockSize;
      options.speedup = 1000;
      options.token_interval = std::chrono::milliseconds(20);
      Result<std::unique_ptr<simfleet::LiveEngine>> engine = simfleet::LiveEngine::Start(options);
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      engines_.push_back(std::move(engine).value());
    }
  }

  // Starts kvgov with the gateway; `engine_keys[i]` is appended to engine
  // i's spec (",openai=..." to point it elsewhere).
  void StartKvgov(const std::vector<std::string>& engine_keys = {"", ""},
                  const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> specs;
    for (size_t i = 0; i < engines_.size(); ++i) {
      specs.push_back(engines_[i]->EngineSpec() + engine_keys[i]);
    }
    gateway_port_ = StartGatewayDaemon(daemon_, specs, extra_args, control_headers_);
    ASSERT_NE(gateway_port_, 0);
    control_ = std::make_unique<httplib::Client>("127.0.0.1", daemon_.port());
    gateway_ = std::make_unique<httplib::Client>("127.0.0.1", gateway_port_);
    gateway_->set_read_timeout(std::chrono::seconds(10));
  }

  httplib::Result Post(const std::string& path, const Json& body,
                       const httplib::Headers& headers = {}) {
    return gateway_->Post(path, headers, body.dump(), "application/json");
  }

  // A prompt of `words` distinct words, `salt` making it a prompt of its own.
  static std::string Words(int words, const std::string& salt) {
    std::string text;
    for (int i = 0; i < words; ++i) text += salt + std::to_string(i) + " ";
    return text;
  }

  // The value of one sample on the control API's /metrics; -1 when absent.
  double Metric(const std::string& sample) {
    httplib::Result metrics = control_->Get("/metrics", control_headers_);
    if (!metrics) return -1;
    const size_t at = metrics->body.find("\n" + sample + " ");
    if (at == std::string::npos) return -1;
    return std::stod(metrics->body.substr(at + sample.size() + 2));
  }

  // Scored predictions over both workers and every outcome.
  double Predictions() {
    double total = 0;
    for (const char* worker : {"w1", "w2"}) {
      for (const char* outcome : {"exact", "over", "under"}) {
        total += std::max(0.0, Metric(std::string("kvgov_gateway_predictions_total{worker=\"") +
                                      worker + "\",outcome=\"" + outcome + "\"}"));
      }
    }
    return total;
  }

  // The body of a streamed answer, read whole.
  std::string StreamBody(const Json& request) {
    httplib::Result answer = Post("/v1/completions", request);
    EXPECT_EQ(HttpStatus(answer), 200);
    return answer ? answer->body : "";
  }

  size_t Received() const {
    return engines_[0]->received_salts().size() + engines_[1]->received_salts().size();
  }

  std::vector<std::unique_ptr<simfleet::LiveEngine>> engines_;
  DaemonProcess daemon_;
  httplib::Headers control_headers_;  // a read token, once tokens exist
  std::unique_ptr<httplib::Client> control_;
  std::unique_ptr<httplib::Client> gateway_;
  int gateway_port_ = 0;
};

TEST_F(GatewayE2ETest, HealthAndModelsNameTheFleetsModels) {
  StartKvgov();
  EXPECT_EQ(HttpStatus(gateway_->Get("/health")), 200);
  httplib::Result models = gateway_->Get("/v1/models");
  ASSERT_EQ(HttpStatus(models), 200);
  const Json body = Json::parse(models->body);
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 1u);
  EXPECT_EQ(body["data"][0]["id"], "llama");
  // The control API is not on the gateway's listener, nor the reverse.
  EXPECT_EQ(HttpStatus(gateway_->Get("/v1/workers")), 404);
  EXPECT_EQ(HttpStatus(control_->Get("/v1/models")), 404);
}

// Token ids pass through; the answer is the engine's, usage included, and a
// repeated prompt is a hit the engine itself reports.
TEST_F(GatewayE2ETest, ACompletionIsRoutedToTheEngineThatHoldsItsPrefix) {
  StartKvgov();
  // Neither engine has published yet, nor been sent work: idle, not live.
  {
    const Json rows = Json::parse(control_->Get("/v1/workers")->body);
    for (const Json& w : rows["workers"]) {
      EXPECT_EQ(w["state"], "idle") << w.dump();
      EXPECT_GE(w["waiting_for_events_ms"].get<int64_t>(), 0) << w.dump();
    }
  }
  const Json request = {{"model", "llama"}, {"prompt", Tokens(64, 1000)}, {"max_tokens", 2}};
  httplib::Result first = Post("/v1/completions", request);
  ASSERT_EQ(HttpStatus(first), 200) << (first ? first->body : "");
  const Json answer = Json::parse(first->body);
  EXPECT_EQ(answer["usage"]["prompt_tokens"], 64);
  EXPECT_EQ(answer["choices"][0]["text"], " tok0 tok1");
  // Wait until kvgov has the first request's blocks, then ask again: the
  // router sends it where they are, and the engine reports them cached.
  ASSERT_TRUE(WaitFor([&] {
    httplib::Result workers = control_->Get("/v1/workers");
    if (!workers) return false;
    uint64_t blocks = 0;
    const Json rows = Json::parse(workers->body);
    for (const Json& w : rows["workers"]) {
      blocks += w["blocks"]["hbm"].get<uint64_t>();
    }
    return blocks >= 4;
  }));
  httplib::Result second = Post("/v1/completions", request);
  ASSERT_EQ(HttpStatus(second), 200);
  EXPECT_EQ(Json::parse(second->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 64);

  // The engine's cached tokens are the ride_engine source's saving, and
  // kvgov's prediction is scored against them: both answers as predicted.
  const std::string worker = engines_[0]->received_salts().size() == 2 ? "w1" : "w2";
  EXPECT_EQ(Metric("kvgov_gateway_engine_cached_tokens_total{worker=\"" + worker + "\"}"), 64);
  EXPECT_EQ(Metric("kvgov_gateway_predicted_tokens_total{worker=\"" + worker + "\"}"), 64);
  EXPECT_EQ(Metric("kvgov_gateway_predictions_total{worker=\"" + worker + "\",outcome=\"exact\"}"),
            2);
  EXPECT_EQ(Metric("kvgov_prefill_tokens_saved_total{source=\"ride_engine\"}"), 64);
  EXPECT_EQ(Metric("kvgov_gateway_unaccounted_total"), 0);
  // The same tally, per worker, on /v1/workers; the engine that published
  // is live now.
  httplib::Result workers = control_->Get("/v1/workers");
  ASSERT_EQ(HttpStatus(workers), 200);
  const Json rows = Json::parse(workers->body);
  for (const Json& row : rows["workers"]) {
    if (row["id"] != worker) {
      EXPECT_FALSE(row.contains("predictions")) << row.dump();
      continue;
    }
    EXPECT_EQ(row["state"], "live");
    const Json& predictions = row["predictions"];
    EXPECT_EQ(predictions["scored"], 2);
    EXPECT_EQ(predictions["exact"], 2);
    EXPECT_EQ(predictions["accuracy"], 1.0);
    EXPECT_EQ(predictions["engine_cached_tokens"], 64);
  }
}

// A stream whose client did not ask for usage: the gateway asks the engine
// for it, accounts it and keeps it from the client; a client that asked
// gets it.
TEST_F(GatewayE2ETest, UsageIsAskedForAccountedAndStrippedFromStreams) {
  StartKvgov();
  const Json plain = {
      {"model", "llama"}, {"prompt", Tokens(40, 7000)}, {"max_tokens", 3}, {"stream", true}};
  const std::string stripped = StreamBody(plain);
  EXPECT_NE(stripped.find("tok2"), std::string::npos) << stripped;
  EXPECT_EQ(stripped.find("\"usage\""), std::string::npos) << stripped;
  EXPECT_TRUE(stripped.ends_with("data: [DONE]\n\n")) << stripped;
  // Accounted once the stream ended: one scored prediction.
  EXPECT_TRUE(WaitFor([&] { return Predictions() == 1; }));
  EXPECT_EQ(Metric("kvgov_gateway_unaccounted_total"), 0);
  EXPECT_EQ(Metric("kvgov_gateway_tokenize_mismatch_total{model=\"llama\"}"), -1);

  Json asked = plain;
  asked["stream_options"] = {{"include_usage", true}};
  const std::string kept = StreamBody(asked);
  EXPECT_NE(kept.find("\"prompt_tokens\":40"), std::string::npos) << kept;

  Json declined = plain;
  declined["stream_options"] = {{"include_usage", false}};
  const std::string none = StreamBody(declined);
  EXPECT_EQ(none.find("\"usage\""), std::string::npos) << none;
  EXPECT_TRUE(WaitFor([&] { return Metric("kvgov_gateway_unaccounted_total") == 1; }));
}

// Text and chat are tokenized by the engine's own /tokenize: what kvgov
// routes on is what the engine computes.
TEST_F(GatewayE2ETest, TextAndChatAreTokenizedByTheEngine) {
  StartKvgov();
  httplib::Result text = Post("/v1/completions", {{"model", "llama"}, {"prompt", Words(40, "w")}});
  ASSERT_EQ(HttpStatus(text), 200) << (text ? text->body : "");
  EXPECT_EQ(Json::parse(text->body)["usage"]["prompt_tokens"], 40);
  const Json chat_request = {{"model", "llama"},
                             {"messages",
                              {{{"role", "system"}, {"content", Words(30, "s")}},
                               {{"role", "user"}, {"content", "hello there"}}}},
                             {"max_tokens", 1}};
  httplib::Result chat = Post("/v1/chat/completions", chat_request);
  ASSERT_EQ(HttpStatus(chat), 200) << (chat ? chat->body : "");
  const Json answer = Json::parse(chat->body);
  // Two role markers, 32 words, the generation prompt.
  EXPECT_EQ(answer["usage"]["prompt_tokens"], 35);
  EXPECT_EQ(answer["object"], "chat.completion");
  EXPECT_EQ(answer["choices"][0]["message"]["content"], " tok0");
}

// The first chunk reaches the client while the engine is still generating;
// curl sees the raw SSE bytes, [DONE] last.
TEST_F(GatewayE2ETest, StreamsArriveChunkByChunk) {
  StartKvgov();
  const Json request = {
      {"model", "llama"}, {"prompt", Tokens(32, 5000)}, {"max_tokens", 10}, {"stream", true}};
  std::vector<std::string> chunks;
  httplib::Request streamed;
  streamed.method = "POST";
  streamed.path = "/v1/completions";
  streamed.body = request.dump();
  streamed.set_header("Content-Type", "application/json");
  int status = 0;
  streamed.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    EXPECT_EQ(response.get_header_value("Content-Type"), "text/event-stream");
    return true;
  };
  streamed.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    chunks.emplace_back(data, length);
    return true;
  };
  ASSERT_TRUE(gateway_->send(streamed));
  EXPECT_EQ(status, 200);
  // One read per token, 20 ms apart: not one buffered answer.
  EXPECT_GE(chunks.size(), 10u);
  EXPECT_NE(chunks.front().find("data: {"), std::string::npos);
  EXPECT_NE(chunks.back().find("data: [DONE]"), std::string::npos);

  const std::string curl = "curl -sN -X POST -H 'Content-Type: application/json' -d '" +
                           request.dump() + "' http://127.0.0.1:" + std::to_string(gateway_port_) +
                           "/v1/completions";
  std::string raw;
  ASSERT_EQ(RunCommand(curl, &raw), 0) << raw;
  EXPECT_EQ(raw.rfind("data: {", 0), 0u) << raw;
  EXPECT_NE(raw.find("\"text\":\" tok9\""), std::string::npos) << raw;
  EXPECT_TRUE(raw.ends_with("data: [DONE]\n\n")) << raw;
}

// A client that goes away ends the engine's request too.
TEST_F(GatewayE2ETest, AClientThatGoesAwayAbortsTheEnginesRequest) {
  StartKvgov();
  httplib::Request streamed;
  streamed.method = "POST";
  streamed.path = "/v1/completions";
  streamed.body =
      Json{{"model", "llama"}, {"prompt", Tokens(32, 9000)}, {"max_tokens", 200}, {"stream", true}}
          .dump();
  streamed.set_header("Content-Type", "application/json");
  int received = 0;
  streamed.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++received < 2;
  };
  gateway_->send(streamed);
  EXPECT_EQ(received, 2);
  EXPECT_TRUE(WaitFor(
      [&] { return engines_[0]->aborted_streams() + engines_[1]->aborted_streams() == 1; }));
}

// The tenant's salt, and nobody else's, reaches the engine; a client may not
// send its own.
TEST_F(GatewayE2ETest, TheEngineReceivesTheTenantsSaltAndAClientSaltIsRefused) {
  const std::string a = AddToken(daemon_.data_dir(), "tenant-a", {"infer"}, "tenant-a");
  const std::string b = AddToken(daemon_.data_dir(), "tenant-b", {"infer"}, "tenant-b");
  const std::string fleet = AddToken(daemon_.data_dir(), "fleet", {"infer", "read"});
  const std::string reader = AddToken(daemon_.data_dir(), "reader", {"read"});
  control_headers_ = Bearer(reader);
  StartKvgov();
  const Json request = {{"model", "llama"}, {"prompt", Tokens(32, 100)}};
  EXPECT_EQ(HttpStatus(Post("/v1/completions", request)), 401);
  httplib::Result forbidden = Post("/v1/completions", request, Bearer(reader));
  ASSERT_EQ(HttpStatus(forbidden), 403);
  EXPECT_EQ(Json::parse(forbidden->body)["error"]["type"], "permission_error");
  for (const std::string* token : {&a, &a, &b, &fleet}) {
    ASSERT_EQ(HttpStatus(Post("/v1/completions", request, Bearer(*token))), 200);
  }
  std::vector<std::string> salts;
  for (const auto& engine : engines_) {
    for (const std::string& salt : engine->received_salts()) salts.push_back(salt);
  }
  ASSERT_EQ(salts.size(), 4u);
  std::map<std::string, int> counts;
  for (const std::string& salt : salts) ++counts[salt];
  // a twice under one salt, b under another, the fleet token under none.
  EXPECT_EQ(counts.size(), 3u);
  EXPECT_EQ(counts[""], 1);
  std::multiset<int> salted_counts;
  for (const auto& [salt, count] : counts) {
    if (salt.empty()) continue;
    EXPECT_EQ(salt.size(), 32u) << salt;  // router::TenantCacheSalt: 128 bits of hex
    salted_counts.insert(count);
  }
  EXPECT_EQ(salted_counts, (std::multiset<int>{1, 2}));

  Json salted = request;
  salted["cache_salt"] = "mine";
  httplib::Result refused = Post("/v1/completions", salted, Bearer(fleet));
  ASSERT_EQ(HttpStatus(refused), 400);
  const Json error = Json::parse(refused->body)["error"];
  EXPECT_EQ(error["param"], "cache_salt");
  EXPECT_EQ(error["type"], "invalid_request_error");

  // A fleet-wide caller names the tenant it sends for (a front end that
  // authenticates its users itself): that tenant's salt, as a-bound gets.
  httplib::Headers for_a = Bearer(fleet);
  for_a.emplace("X-Kvgov-Tenant", "tenant-a");
  ASSERT_EQ(HttpStatus(Post("/v1/completions", request, for_a)), 200);
  // A tenant-bound token cannot speak for another tenant; a bad name is 400.
  httplib::Headers b_for_a = Bearer(b);
  b_for_a.emplace("X-Kvgov-Tenant", "tenant-a");
  httplib::Result crossed = Post("/v1/completions", request, b_for_a);
  ASSERT_EQ(HttpStatus(crossed), 403);
  EXPECT_NE(Json::parse(crossed->body)["error"]["message"].get<std::string>().find("tenant-b"),
            std::string::npos);
  httplib::Headers spaced = Bearer(fleet);
  spaced.emplace("X-Kvgov-Tenant", "tenant a");
  EXPECT_EQ(HttpStatus(Post("/v1/completions", request, spaced)), 400);
  std::map<std::string, int> after;
  for (const auto& engine : engines_) {
    for (const std::string& salt : engine->received_salts()) ++after[salt];
  }
  ASSERT_EQ(after.size(), 3u);  // no new salt
  for (const auto& [salt, count] : counts) {
    EXPECT_EQ(after[salt], count + (count == 2 ? 1 : 0)) << salt;  // a's third
  }
}

TEST_F(GatewayE2ETest, BadRequestsGetOpenAIErrors) {
  StartKvgov();
  httplib::Result unknown = Post("/v1/completions", {{"model", "gpt-9"}, {"prompt", "hi"}});
  ASSERT_EQ(HttpStatus(unknown), 404);
  EXPECT_EQ(Json::parse(unknown->body)["error"]["code"], "model_not_found");
  EXPECT_NE(unknown->body.find("this gateway serves 'llama'"), std::string::npos) << unknown->body;
  httplib::Result batch = Post("/v1/completions", {{"model", "llama"}, {"prompt", {"a", "b"}}});
  ASSERT_EQ(HttpStatus(batch), 400);
  EXPECT_EQ(Json::parse(batch->body)["error"]["param"], "prompt");
  httplib::Result garbage = gateway_->Post("/v1/chat/completions", "{", "application/json");
  ASSERT_EQ(HttpStatus(garbage), 400);
  EXPECT_TRUE(Json::parse(garbage->body)["error"].contains("message"));
  EXPECT_EQ(Received(), 0u);
}

// A drained worker receives nothing through the gateway.
TEST_F(GatewayE2ETest, ADrainedWorkerReceivesNothing) {
  StartKvgov();
  ASSERT_EQ(HttpStatus(control_->Post("/v1/workers/w1/drain", "{}", "application/json")), 200);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(HttpStatus(Post("/v1/completions",
                              {{"model", "llama"}, {"prompt", Tokens(32, 20000 + i * 100)}})),
              200);
  }
  EXPECT_EQ(engines_[0]->received_salts().size(), 0u);
  EXPECT_EQ(engines_[1]->received_salts().size(), 4u);
}

// The daemon's events, one logfmt line each on stderr (ADR 0017): start-up
// recovery, each engine's health as it changes, every governance write, a
// token file reload; never a secret.
TEST_F(GatewayE2ETest, TheDaemonLogsItsEventsAsLogfmtLines) {
  StartKvgov();
  auto logged = [&](const std::string& fragment) {
    return WaitFor([&] { return daemon_.Stderr().find(fragment) != std::string::npos; });
  };
  EXPECT_TRUE(logged(" level=info event=recovery.done snapshot_blocks=0")) << daemon_.Stderr();
  EXPECT_TRUE(logged("event=engine.health worker=w1 healthy=true")) << daemon_.Stderr();

  const Json quarantine = {{"model", "llama"}, {"token_ids", Tokens(32, 50000)}, {"reason", "x"}};
  httplib::Result quarantined =
      control_->Post("/v1/quarantine", quarantine.dump(), "application/json");
  ASSERT_EQ(HttpStatus(quarantined), 200);
  const std::string id = Json::parse(quarantined->body)["id"];
  EXPECT_TRUE(logged("event=governance.write kind=quarantine subject=" + id + " actor=local seq="))
      << daemon_.Stderr();

  engines_[1]->Stop();
  EXPECT_TRUE(logged("level=warn event=engine.health worker=w2 healthy=false error=\"GET "))
      << daemon_.Stderr();

  const std::string secret = AddToken(daemon_.data_dir(), "late", {"read"});
  // Any call has the daemon look at the token file again.
  EXPECT_TRUE(WaitFor([&] {
    (void)control_->Get("/v1/workers");
    return daemon_.Stderr().find("event=tokens.reload") != std::string::npos;
  })) << daemon_.Stderr();
  EXPECT_TRUE(logged(" tokens=1")) << daemon_.Stderr();
  // ... and journals the change, naming the token and never its secret.
  EXPECT_TRUE(logged("event=governance.write kind=token.add subject=late actor=token-file seq="))
      << daemon_.Stderr();

  const std::string err = daemon_.Stderr();
  EXPECT_EQ(err.find(secret), std::string::npos);
  EXPECT_EQ(err.find(secret.substr(6)), std::string::npos);
  // Every event line is logfmt from its first byte.
  for (size_t at = err.find("event="); at != std::string::npos; at = err.find("event=", at + 1)) {
    const size_t line = err.rfind('\n', at);
    EXPECT_EQ(err.compare(line == std::string::npos ? 0 : line + 1, 3, "ts="), 0)
        << err.substr(line == std::string::npos ? 0 : line + 1, 120);
  }
}

// A quarantined span earns no credit through the gateway: the next request
// for it is routed as if no worker held it.
TEST_F(GatewayE2ETest, AQuarantinedSpanEarnsNoCredit) {
  const std::vector<int64_t> prompt = Tokens(64, 40000);
  engines_[0]->Prefill(prompt, "");
  StartKvgov();
  ASSERT_TRUE(WaitFor([&] {
    httplib::Result workers = control_->Get("/v1/workers");
    if (!workers) return false;
    const Json rows = Json::parse(workers->body);
    return rows["workers"][0]["blocks"]["hbm"] == 4;
  }));
  const Json request = {{"model", "llama"}, {"prompt", prompt}, {"max_tokens", 1}};
  ASSERT_EQ(HttpStatus(Post("/v1/completions", request)), 200);
  auto predicted = [&] {
    return std::max(0.0, Metric("kvgov_gateway_predicted_tokens_total{worker=\"w1\"}")) +
           std::max(0.0, Metric("kvgov_gateway_predicted_tokens_total{worker=\"w2\"}"));
  };
  EXPECT_TRUE(WaitFor([&] { return predicted() == 64; }));

  // A request crossing a quarantine goes out under a diverted salt, only to
  // an engine proven to key by salts (ADR 0028): a tenant's request proves it.
  httplib::Headers tenant = {{"X-Kvgov-Tenant", "acme"}};
  const Json other = {{"model", "llama"}, {"prompt", Tokens(16, 90000)}, {"max_tokens", 1}};
  ASSERT_EQ(HttpStatus(Post("/v1/completions", other, tenant)), 200);
  ASSERT_TRUE(WaitFor([&] {
    return control_->Get("/v1/workers")->body.find("\"reported\"") != std::string::npos;
  }));
  const Json quarantine = {{"model", "llama"}, {"token_ids", prompt}, {"reason", "poisoned"}};
  httplib::Result quarantined =
      control_->Post("/v1/quarantine", quarantine.dump(), "application/json");
  ASSERT_EQ(HttpStatus(quarantined), 200);
  ASSERT_EQ(HttpStatus(Post("/v1/completions", request)), 200);
  ASSERT_TRUE(WaitFor([&] { return Predictions() == 3; }));
  EXPECT_EQ(predicted(), 64);  // nothing credited the second time

  // Lifted (journaled, with why), the span earns credit again.
  const std::string id = Json::parse(quarantined->body)["id"];
  const std::string lift = "/v1/quarantines/" + id + "/lift";
  EXPECT_EQ(HttpStatus(control_->Post(lift, "{}", "application/json")), 400);  // no reason
  httplib::Result lifted =
      control_->Post(lift, Json{{"reason", "a false alarm"}}.dump(), "application/json");
  ASSERT_EQ(HttpStatus(lifted), 200) << (lifted ? lifted->body : "");
  EXPECT_EQ(Json::parse(lifted->body)["blocks"], 4);
  EXPECT_EQ(HttpStatus(control_->Post(lift, Json{{"reason", "again"}}.dump(), "application/json")),
            404);
  EXPECT_EQ(Json::parse(control_->Get("/v1/quarantines")->body)["quarantines"].size(), 0u);
  const Json journal = Json::parse(control_->Get("/v1/journal?limit=100")->body);
  bool journaled = false;
  for (const Json& row : journal["rows"]) {
    journaled |= row.value("kind", "") == "quarantine.lift" && row.value("subject", "") == id;
  }
  EXPECT_TRUE(journaled) << journal.dump();
  // Routed where the span is, to w1 again: the release of the last request
  // made both workers idle, so credit decides.
  ASSERT_EQ(HttpStatus(Post("/v1/completions", request)), 200);
  ASSERT_TRUE(WaitFor([&] { return Predictions() == 4; }));
  EXPECT_EQ(predicted(), 128);
}

// A chat span is quarantined and invalidated by its messages, tokenized by
// the engine as the gateway tokenizes a chat completion: the answer names
// the ids, and a chat request with those messages is diverted.
TEST_F(GatewayE2ETest, AChatSpanIsQuarantinedByItsMessages) {
  StartKvgov();
  // A diverted salt goes only to an engine proven to key by salts (ADR
  // 0028): a tenant's request proves it.
  httplib::Headers tenant = {{"X-Kvgov-Tenant", "acme"}};
  const Json other = {{"model", "llama"}, {"prompt", Tokens(16, 90000)}, {"max_tokens", 1}};
  ASSERT_EQ(HttpStatus(Post("/v1/completions", other, tenant)), 200);
  ASSERT_TRUE(WaitFor([&] {
    return control_->Get("/v1/workers")->body.find("\"reported\"") != std::string::npos;
  }));

  const Json messages = {{{"role", "system"}, {"content", Words(30, "leak")}},
                         {{"role", "user"}, {"content", "hello there"}}};
  httplib::Result quarantined =
      control_->Post("/v1/quarantine",
                     Json{{"model", "llama"}, {"messages", messages}, {"reason", "leaked"}}.dump(),
                     "application/json");
  ASSERT_EQ(HttpStatus(quarantined), 200) << (quarantined ? quarantined->body : "");
  const Json answer = Json::parse(quarantined->body);
  // Two role markers, 32 words, the generation prompt: two blocks of 16.
  ASSERT_TRUE(answer.contains("token_ids")) << answer.dump();
  const std::vector<int64_t> token_ids = answer["token_ids"];
  EXPECT_EQ(token_ids.size(), 35u);
  EXPECT_EQ(answer["blocks"], 2);

  // The same messages name the same span for an invalidation.
  httplib::Result invalidated =
      control_->Post("/v1/invalidations",
                     Json{{"model", "llama"}, {"messages", messages}, {"reason", "leaked"}}.dump(),
                     "application/json");
  ASSERT_EQ(HttpStatus(invalidated), 202) << (invalidated ? invalidated->body : "");
  EXPECT_EQ(Json::parse(invalidated->body)["token_ids"], token_ids);

  // The engine counts the chat the gateway forwards as those tokens, and
  // the request crosses the quarantine: diverted.
  const Json chat = {{"model", "llama"}, {"messages", messages}, {"max_tokens", 1}};
  httplib::Result served = Post("/v1/chat/completions", chat);
  ASSERT_EQ(HttpStatus(served), 200) << (served ? served->body : "");
  EXPECT_EQ(Json::parse(served->body)["usage"]["prompt_tokens"], 35);
  EXPECT_EQ(Metric("kvgov_quarantine_diversions_total{model=\"llama\",tenant=\"none\"}"), 1);

  // A model no worker serves is named; and a span is named one way only.
  httplib::Result unknown = control_->Post(
      "/v1/quarantine", Json{{"model", "mistral"}, {"prompt", "hi"}, {"reason", "r"}}.dump(),
      "application/json");
  ASSERT_EQ(HttpStatus(unknown), 404);
  EXPECT_NE(unknown->body.find("mistral"), std::string::npos) << unknown->body;
  httplib::Result both = control_->Post(
      "/v1/invalidations",
      Json{{"model", "llama"}, {"prompt", "hi"}, {"token_ids", token_ids}, {"reason", "r"}}.dump(),
      "application/json");
  ASSERT_EQ(HttpStatus(both), 400);
  EXPECT_NE(both->body.find("$.prompt: not with token_ids"), std::string::npos) << both->body;
}

// The engine that holds the prefix cannot be reached: the request goes to
// the next candidate before any byte reached the client, and is counted.
TEST_F(GatewayE2ETest, AnUnreachableEngineIsRetriedOnTheNextCandidate) {
  const std::vector<int64_t> prompt = Tokens(64, 30000);
  engines_[1]->Prefill(prompt, "");  // w2 holds the prompt: the router prefers it
  const connectors::ClosedPort closed;
  StartKvgov({"", ",openai=" + closed.url()});
  ASSERT_TRUE(WaitFor([&] {
    httplib::Result workers = control_->Get("/v1/workers");
    if (!workers) return false;
    const Json rows = Json::parse(workers->body);
    for (const Json& w : rows["workers"]) {
      if (w["id"] == "w2" && w["blocks"]["hbm"].get<uint64_t>() >= 4) return true;
    }
    return false;
  }));
  httplib::Result answer = Post("/v1/completions", {{"model", "llama"}, {"prompt", prompt}});
  ASSERT_EQ(HttpStatus(answer), 200) << (answer ? answer->body : "");
  EXPECT_EQ(engines_[0]->received_salts().size(), 1u);
  httplib::Result metrics = control_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("kvgov_gateway_upstream_retries_total 1"), std::string::npos);
}

// No engine can tokenize: 502 with the reason, and nothing is routed.
TEST_F(GatewayE2ETest, ATokenizerFailureIs502AndNothingIsRouted) {
  const connectors::ClosedPort closed;
  const std::string dead = ",openai=" + closed.url();
  StartKvgov({dead, dead});
  httplib::Result answer = Post("/v1/completions", {{"model", "llama"}, {"prompt", "hello"}});
  ASSERT_EQ(HttpStatus(answer), 502);
  const Json error = Json::parse(answer->body)["error"];
  EXPECT_EQ(error["code"], "tokenizer_unavailable");
  EXPECT_NE(error["message"].get<std::string>().find("tokenize"), std::string::npos);
  EXPECT_EQ(Received(), 0u);
  EXPECT_EQ(Metric("kvgov_gateway_tokenize_failures_total{model=\"llama\"}"), 1);
}

// With every worker at its in-flight limit the gateway answers 429; a busy
// worker is skipped while another has room.
TEST_F(GatewayE2ETest, EveryWorkerBusyIs429WithRetryAfter) {
  StartKvgov({"", ""}, {"--gateway-max-in-flight", "1"});
  // Two long streams hold both workers (200 tokens, 20 ms each).
  std::vector<std::thread> streams;
  std::atomic<int> started{0};
  std::atomic<bool> release{false};
  // One after the other, so the second sees the first in flight and goes
  // to the other worker.
  for (int i = 0; i < 2; ++i) {
    streams.emplace_back([&, i] {
      httplib::Client client("127.0.0.1", gateway_port_);
      httplib::Request streamed;
      streamed.method = "POST";
      streamed.path = "/v1/completions";
      streamed.body = Json{
          {"model", "llama"},
          {"prompt", Tokens(32, 40000 + i * 1000)},
          {"max_tokens", 200},
          {"stream",
           true}}.dump();
      streamed.set_header("Content-Type", "application/json");
      bool counted = false;
      streamed.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
        if (!counted) started.fetch_add(1);
        counted = true;
        return !release.load();
      };
      client.send(streamed);
    });
    if (!WaitFor([&] { return started.load() == i + 1; })) break;
  }
  const bool both_started = started.load() == 2;
  httplib::Result busy = Post("/v1/completions", {{"model", "llama"}, {"prompt", Tokens(32, 1)}});
  const int status = HttpStatus(busy);
  release = true;
  for (std::thread& stream : streams) stream.join();
  ASSERT_TRUE(both_started);
  ASSERT_EQ(status, 429);
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  EXPECT_EQ(Json::parse(busy->body)["error"]["type"], "rate_limit_error");
  EXPECT_EQ(engines_[0]->received_salts().size() + engines_[1]->received_salts().size(), 2u);
  // Once the streams ended, there is room again.
  EXPECT_TRUE(WaitFor([&] {
    return HttpStatus(Post("/v1/completions", {{"model", "llama"}, {"prompt", Tokens(32, 1)}})) ==
           200;
  }));
}

// A streamed answer's decision weighs its prefill until the engine's first
// event, then its decode (decode_load_weight x its prompt blocks) until the
// stream ends.
TEST_F(GatewayE2ETest, AStreamsLoadTurnsToDecodeAtItsFirstEvent) {
  StartKvgov();
  std::atomic<bool> first_event{false};
  std::atomic<bool> release{false};
  // 48 prompt tokens: 3 blocks, so ceil(3 / 16) = 1 block of decode load.
  std::thread stream([&] {
    httplib::Client client("127.0.0.1", gateway_port_);
    httplib::Request streamed;
    streamed.method = "POST";
    streamed.path = "/v1/completions";
    streamed.body = Json{
        {"model", "llama"},
        {"prompt", Tokens(48, 61000)},
        {"max_tokens", 200},
        {"stream",
         true}}.dump();
    streamed.set_header("Content-Type", "application/json");
    streamed.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      first_event = true;
      return !release.load();
    };
    client.send(streamed);
  });
  // The load of the worker kvgov has a decision on, once it decodes.
  Json decoding;
  const bool seen = WaitFor([&] {
    if (!first_event.load()) return false;
    httplib::Result workers = control_->Get("/v1/workers", control_headers_);
    if (!workers || workers->status != 200) return false;
    const Json listed = Json::parse(workers->body);
    for (const Json& worker : listed["workers"]) {
      if (worker["load"]["decoding_requests"] == 1) decoding = worker["load"];
    }
    return !decoding.is_null();
  });
  release = true;
  stream.join();
  ASSERT_TRUE(seen) << "no worker reported a decoding request";
  EXPECT_EQ(decoding["in_flight_requests"], 1);
  EXPECT_EQ(decoding["in_flight_blocks"], 1);
  // Once the stream ended, nothing is in flight.
  EXPECT_TRUE(WaitFor([&] {
    httplib::Result workers = control_->Get("/v1/workers", control_headers_);
    if (!workers || workers->status != 200) return false;
    const Json listed = Json::parse(workers->body);
    for (const Json& worker : listed["workers"]) {
      if (worker["load"]["in_flight_requests"] != 0) return false;
    }
    return true;
  }));
}

// The official OpenAI SDK (npm's openai, pinned by tests/node's lockfile),
// not a client of kvgov's own, against the gateway.
TEST_F(GatewayE2ETest, TheOfficialOpenAIClientWorksThroughTheGateway) {
  if (const std::string missing = NodePackageMissing("openai"); !missing.empty()) {
    GTEST_SKIP() << missing;
  }
  const std::string sdk = AddToken(daemon_.data_dir(), "sdk", {"infer"});
  control_headers_ = Bearer(AddToken(daemon_.data_dir(), "reader", {"read"}));
  StartKvgov();
  std::string output;
  ASSERT_EQ(RunOpenAISdkChecks(gateway_port_, sdk, &output), 0) << output;
  const Json seen = Json::parse(output.substr(output.rfind('{')));
  EXPECT_EQ(seen["ok"], true);
  EXPECT_GE(seen["chat_chunks"].get<int>(), 6);
  RecordProperty("openai_sdk", output);
}

// A Responses conversation stays on the worker that holds it: each
// follow-up naming previous_response_id goes where that response was
// answered, whatever the router would have chosen.
TEST_F(GatewayE2ETest, AResponsesConversationStaysOnTheWorkerThatHoldsIt) {
  StartKvgov();
  httplib::Result first =
      Post("/v1/responses",
           Json{{"model", "llama"}, {"input", Words(40, "conv")}, {"max_output_tokens", 1}});
  ASSERT_EQ(HttpStatus(first), 200) << (first ? first->body : "");
  std::string previous = Json::parse(first->body)["id"];
  const size_t owner = engines_[0]->received_salts().size() == 1 ? 0 : 1;
  ASSERT_EQ(engines_[owner]->received_salts().size(), 1u);
  // Load the owner so the router alone would send new work elsewhere.
  for (int turn = 0; turn < 6; ++turn) {
    httplib::Result next =
        Post("/v1/responses", Json{{"model", "llama"},
                                   {"previous_response_id", previous},
                                   {"input", Words(8, "t" + std::to_string(turn))},
                                   {"max_output_tokens", 1}});
    ASSERT_EQ(HttpStatus(next), 200) << "turn " << turn << ": " << (next ? next->body : "");
    previous = Json::parse(next->body)["id"];
  }
  EXPECT_EQ(engines_[owner]->received_salts().size(), 7u);
  EXPECT_EQ(engines_[1 - owner]->received_salts().size(), 0u);
  // A response no engine answered through this gateway: the engine says so.
  httplib::Result unknown = Post("/v1/responses", Json{{"model", "llama"},
                                                       {"previous_response_id", "resp_nobody"},
                                                       {"input", "x"},
                                                       {"max_output_tokens", 1}});
  EXPECT_EQ(HttpStatus(unknown), 404) << (unknown ? unknown->body : "");
  // The engine counted its whole prompt, kvgov only the new input: no
  // mismatch is counted for a follow-up.
  EXPECT_EQ(Metric("kvgov_gateway_tokenize_mismatch_total{model=\"llama\"}"), -1);
}

// The official Anthropic SDK (npm's @anthropic-ai/sdk, pinned by
// tests/node's lockfile) against the gateway's Messages endpoint, with the
// engine's own accounting checked on kvgov's side.
TEST_F(GatewayE2ETest, TheOfficialAnthropicClientWorksThroughTheGateway) {
  if (const std::string missing = NodePackageMissing("@anthropic-ai/sdk"); !missing.empty()) {
    GTEST_SKIP() << missing;
  }
  const std::string sdk = AddToken(daemon_.data_dir(), "sdk", {"infer"});
  control_headers_ = Bearer(AddToken(daemon_.data_dir(), "reader", {"read"}));
  StartKvgov();
  std::string output;
  ASSERT_EQ(RunAnthropicSdkChecks(gateway_port_, sdk, &output), 0) << output;
  // Its last line: one JSON object (with objects inside).
  std::string last = output.substr(0, output.find_last_not_of('\n') + 1);
  last = last.substr(last.rfind('\n') + 1);
  const Json seen = Json::parse(last);
  EXPECT_EQ(seen["ok"], true);
  EXPECT_GE(seen["cache_read_input_tokens"].get<int>(), 32);
  // kvgov routed on the engine's own tokens, and read the Messages usage.
  EXPECT_EQ(Metric("kvgov_gateway_tokenize_mismatch_total{model=\"llama\"}"), -1)
      << "a Messages prompt was tokenized differently from the engine";
  EXPECT_GE(Predictions(), 3);
  EXPECT_EQ(Metric("kvgov_gateway_requests_total{endpoint=\"messages\"}"), 5);
  RecordProperty("anthropic_sdk", output);
}

}  // namespace
}  // namespace kvgov::testing
