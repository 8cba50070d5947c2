#include "kvgov/codec/route_api.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>

#include "codec/decision_writer.h"
#include "codec/json_fields.h"
#include "codec/route_request_fast.h"
#include "codec/router_json.h"
#include "kvgov/core/engine_events.h"

namespace kvgov::codec_internal {

// POST /v1/route's body as it arrives: token ids as JSON numbers or as
// base64 of little-endian uint32 (route-api.md), exactly one of the two.
struct RouteRequestBody {
  router::RouteRequest route;
  std::optional<std::vector<int64_t>> token_ids;
  std::optional<std::string> token_ids_b64;
};

template <>
struct Schema<RouteRequestBody> {
  static void Fields(auto& v, auto& r) {
    v.Required("model", r.route.model);
    v.Expect("model", !r.route.model.empty(), [] { return std::string("required, got empty"); });
    v.Optional("tenant", r.route.tenant);
    v.Optional("token_ids", r.token_ids);
    v.Optional("token_ids_b64", r.token_ids_b64);
    v.Validate([&]() -> Status {
      // Neither is reported as missing once the fields are read, after an
      // unknown field (often the misspelt one): DecodeRouteRequestBySchema.
      if (r.token_ids.has_value() && r.token_ids_b64.has_value()) {
        return Status::InvalidArgument(
            "token_ids: give exactly one of token_ids and token_ids_b64");
      }
      if (r.token_ids_b64.has_value()) {
        KVGOV_ASSIGN_OR_RETURN(r.route.token_ids,
                               DecodeTokenIdsBase64(*r.token_ids_b64, "token_ids_b64"));
        return Status::Ok();
      }
      if (!r.token_ids.has_value()) return Status::Ok();
      r.route.token_ids = std::move(*r.token_ids);
      return CheckTokenIds(r.route.token_ids);
    });
    v.Optional("lora_name", r.route.lora_name);
    v.Optional("workers", r.route.workers);
  }
};

// The usage object of POST /v1/route/{id}/done, as the engine answered it.
struct ReportedDetails {
  std::optional<int64_t> cached_tokens;
};
struct ReportedUsage {
  int64_t prompt_tokens = 0;
  std::optional<int64_t> completion_tokens;
  std::optional<int64_t> total_tokens;
  std::optional<ReportedDetails> prompt_tokens_details;
};
struct RouteDoneBody {
  std::optional<ReportedUsage> usage;
};

constexpr int64_t kMaxReportedTokens = (int64_t{1} << 31) - 1;

std::string CountProblem() { return "want an integer in 0-" + std::to_string(kMaxReportedTokens); }
bool IsCount(const std::optional<int64_t>& count) {
  return !count.has_value() || (*count >= 0 && *count <= kMaxReportedTokens);
}

template <>
struct Schema<ReportedDetails> {
  static void Fields(auto& v, auto& r) {
    v.Optional("cached_tokens", r.cached_tokens);
    v.Expect("cached_tokens", IsCount(r.cached_tokens), CountProblem);
  }
};

template <>
struct Schema<ReportedUsage> {
  static void Fields(auto& v, auto& r) {
    v.Required("prompt_tokens", r.prompt_tokens);
    v.Expect("prompt_tokens", IsCount(r.prompt_tokens), CountProblem);
    v.Optional("completion_tokens", r.completion_tokens);
    v.Expect("completion_tokens", IsCount(r.completion_tokens), CountProblem);
    v.Optional("total_tokens", r.total_tokens);
    v.Expect("total_tokens", IsCount(r.total_tokens), CountProblem);
    v.Optional("prompt_tokens_details", r.prompt_tokens_details);
    v.Validate([&] {
      const int64_t cached = r.prompt_tokens_details.has_value()
                                 ? r.prompt_tokens_details->cached_tokens.value_or(0)
                                 : 0;
      if (cached > r.prompt_tokens) {
        return Status::InvalidArgument(
            "prompt_tokens_details.cached_tokens: " + std::to_string(cached) +
            " is more than prompt_tokens (" + std::to_string(r.prompt_tokens) + ")");
      }
      return Status::Ok();
    });
  }
};

template <>
struct Schema<RouteDoneBody> {
  static void Fields(auto& v, auto& r) { v.Optional("usage", r.usage); }
};

template <>
struct Schema<ExplainRequest> {
  static void Fields(auto& v, auto& r) {
    v.Required("model", r.route.model);
    v.Expect("model", !r.route.model.empty(), [] { return std::string("required, got empty"); });
    v.Optional("tenant", r.route.tenant);
    v.Optional("token_ids", r.route.token_ids);
    v.Optional("prompt", r.prompt);
    v.Validate([&] {
      if (r.route.token_ids.empty() == r.prompt.empty()) {
        return Status::InvalidArgument("token_ids: give exactly one of token_ids and prompt");
      }
      return CheckTokenIds(r.route.token_ids);
    });
    v.Optional("lora_name", r.route.lora_name);
    v.Optional("workers", r.route.workers);
  }
};

nlohmann::json LoadJson(const router::WorkerLoad& load) {
  nlohmann::json json = {{"in_flight_requests", load.in_flight_requests},
                         {"decoding_requests", load.decoding_requests},
                         {"in_flight_blocks", load.in_flight_blocks},
                         {"peer_in_flight_blocks", load.peer_blocks},
                         {"blocks", load.blocks}};
  if (load.scraped) {
    json["scraped"] = {{"running", load.scraped->running},
                       {"waiting", load.scraped->waiting},
                       {"kv_usage", load.scraped->kv_usage},
                       {"scraped_at_ms", load.scraped->scraped_at_ms}};
  }
  return json;
}

nlohmann::json DecisionJson(const router::RouteDecision& decision) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const router::Candidate& c : decision.candidates) {
    nlohmann::json row = {{"worker", c.worker},
                          {"resident_blocks", c.resident_blocks},
                          {"overlap_blocks", c.overlap_blocks},
                          {"prefilling_blocks", c.prefilling_blocks},
                          {"tier_overlap", TierJson(c.tier_overlap)},
                          {"credited_blocks", c.credited_blocks},
                          {"cache_fullness", c.cache_fullness},
                          {"load", LoadJson(c.load)},
                          {"cost", c.cost},
                          {"eligible", c.eligible}};
    if (!c.reason.empty()) row["reason"] = c.reason;
    candidates.push_back(std::move(row));
  }
  return {
      {"decision_id", decision.decision_id},
      {"worker", decision.worker},
      {"cache_salt", decision.cache_salt},
      {"prompt_blocks", decision.prompt_blocks},
      {"overlap_blocks", decision.overlap_blocks},
      {"verdict",
       {{"kind", ToString(decision.verdict.kind)}, {"reason", ToString(decision.verdict.reason)}}},
      {"candidates", std::move(candidates)}};
}

}  // namespace kvgov::codec_internal

namespace kvgov {

// Written directly (decision_writer.h); through the document only for a
// string that is not ASCII.
std::string EncodeRouteDecisionJson(const router::RouteDecision& decision) {
  if (std::optional<std::string> text = codec_internal::WriteDecisionJson(decision)) {
    return std::move(*text);
  }
  return codec_internal::Dump(codec_internal::DecisionJson(decision));
}

std::string EncodeUnroutableDecisionJson(const router::RouteDecision& decision) {
  constexpr std::string_view kCode = "unavailable";
  constexpr std::string_view kMessage = "no eligible worker; each candidate says why";
  if (std::optional<std::string> text =
          codec_internal::WriteDecisionJson(decision, kCode, kMessage)) {
    return std::move(*text);
  }
  nlohmann::json body = codec_internal::DecisionJson(decision);
  body["error"] = {{"code", kCode}, {"message", kMessage}};
  return codec_internal::Dump(body);
}

Result<router::RouteRequest> DecodeRouteRequestJson(std::string_view text,
                                                    const JsonLimits& limits) {
  // The common body in one simdjson pass; anything else, every error
  // included, on the schema path, which names it.
  if (std::optional<router::RouteRequest> fast =
          codec_internal::DecodeRouteRequestFast(text, limits)) {
    return std::move(*fast);
  }
  return codec_internal::DecodeRouteRequestBySchema(text, limits);
}

Result<ExplainRequest> DecodeExplainRequestJson(std::string_view text, const JsonLimits& limits) {
  return codec_internal::DecodeDocument<ExplainRequest>(text, limits, "route codec");
}

Result<RouteDoneReport> DecodeRouteDoneJson(std::string_view text, const JsonLimits& limits) {
  RouteDoneReport report;
  // Nothing but blanks releases only; past the size limit even blanks are
  // refused as any oversized body is.
  if (text.size() <= limits.max_bytes &&
      text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return report;
  }
  KVGOV_ASSIGN_OR_RETURN(
      codec_internal::RouteDoneBody body,
      codec_internal::DecodeDocument<codec_internal::RouteDoneBody>(text, limits, "route codec"));
  if (body.usage.has_value()) {
    EngineUsage& usage = report.usage.emplace();
    usage.prompt_tokens = body.usage->prompt_tokens;
    if (body.usage->prompt_tokens_details.has_value()) {
      usage.cached_tokens = body.usage->prompt_tokens_details->cached_tokens.value_or(0);
    }
  }
  return report;
}

}  // namespace kvgov

namespace kvgov::codec_internal {

Result<router::RouteRequest> DecodeRouteRequestBySchema(std::string_view text,
                                                        const JsonLimits& limits) {
  KVGOV_ASSIGN_OR_RETURN(RouteRequestBody body,
                         DecodeDocument<RouteRequestBody>(text, limits, "route codec"));
  if (!body.token_ids.has_value() && !body.token_ids_b64.has_value()) {
    return Status::InvalidArgument("$.token_ids: missing required field");
  }
  return std::move(body.route);
}

}  // namespace kvgov::codec_internal

namespace kvgov {
namespace {

constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The value of each base64 character; 0xff for any other byte.
constexpr std::array<uint8_t, 256> kBase64Values = [] {
  std::array<uint8_t, 256> values{};
  values.fill(0xff);
  for (uint8_t i = 0; i < 64; ++i) values[static_cast<uint8_t>(kBase64Alphabet[i])] = i;
  return values;
}();

}  // namespace

std::string EncodeTokenIdsBase64(std::span<const int64_t> token_ids) {
  std::string bytes;
  bytes.reserve(token_ids.size() * 4);
  for (int64_t token : token_ids) {
    const auto value = static_cast<uint32_t>(token);
    for (int shift = 0; shift < 32; shift += 8) bytes += static_cast<char>(value >> shift);
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t k = 0; k < 3; ++k) {
      group = (group << 8) | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    }
    for (size_t k = 0; k < 4; ++k) {
      out += k <= n ? kBase64Alphabet[(group >> (18 - 6 * k)) & 0x3f] : '=';
    }
  }
  return out;
}

Result<std::vector<int64_t>> DecodeTokenIdsBase64(std::string_view text, std::string_view field) {
  const std::string name(field);
  if (text.size() % 4 != 0) {
    return Status::InvalidArgument(name +
                                   ": want padded base64 (a multiple of 4 characters), got " +
                                   std::to_string(text.size()));
  }
  size_t padding = 0;
  while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') ++padding;
  const std::string_view digits = text.substr(0, text.size() - padding);
  // Four characters make three bytes; the last group may be short.
  std::string bytes(digits.size() / 4 * 3 + (digits.size() % 4 == 0 ? 0 : digits.size() % 4 - 1),
                    '\0');
  size_t out = 0;
  for (size_t i = 0; i < digits.size(); i += 4) {
    const size_t n = std::min<size_t>(4, digits.size() - i);
    uint32_t group = 0;
    uint8_t invalid = 0;
    for (size_t k = 0; k < 4; ++k) {
      const uint8_t value = k < n ? kBase64Values[static_cast<uint8_t>(digits[i + k])] : 0;
      invalid |= value;  // 0xff has the bit no digit has
      group = (group << 6) | (value & 0x3f);
    }
    if ((invalid & 0x80) != 0 || n == 1) {
      size_t at = i;
      while (at < digits.size() && kBase64Values[static_cast<uint8_t>(digits[at])] != 0xff) ++at;
      return Status::InvalidArgument(name + ": not base64 at character " + std::to_string(at));
    }
    for (size_t k = 0; k + 1 < n; ++k) bytes[out++] = static_cast<char>(group >> (16 - 8 * k));
  }
  if (bytes.size() % 4 != 0) {
    return Status::InvalidArgument(name + ": " + std::to_string(bytes.size()) +
                                   " bytes, not a whole number of 4-byte token ids");
  }
  std::vector<int64_t> tokens(bytes.size() / 4);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + 4 * t);
    const uint32_t token =
        uint32_t{b[0]} | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 24);
    if (token > static_cast<uint32_t>(kMaxTokenId)) {
      return Status::InvalidArgument(name + "[" + std::to_string(t) + "]: want a token id in 0.." +
                                     std::to_string(kMaxTokenId) + ", got " +
                                     std::to_string(token));
    }
    tokens[t] = token;
  }
  return tokens;
}

}  // namespace kvgov
