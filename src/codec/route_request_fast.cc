#include "codec/route_request_fast.h"

#include <array>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <simdjson.h>

#include "kvgov/codec/route_api.h"
#include "kvgov/core/engine_events.h"

namespace kvgov::codec_internal {
namespace {

// The schema path's rules (route_api.cc, Schema<RouteRequestBody>) for the
// fields a route body has; anything they would refuse, and any field
// they do not know, is "not here".
enum Field : uint8_t { kModel, kTenant, kTokenIds, kTokenIdsB64, kLoraName, kWorkers, kFields };
constexpr std::array<std::string_view, kFields> kFieldNames = {
    "model", "tenant", "token_ids", "token_ids_b64", "lora_name", "workers"};

bool ReadString(simdjson::dom::element value, std::string& out) {
  std::string_view text;
  if (value.get(text) != simdjson::SUCCESS) return false;
  out.assign(text);
  return true;
}

bool ReadTokenIds(simdjson::dom::element value, const JsonLimits& limits,
                  std::vector<int64_t>& out) {
  simdjson::dom::array array;
  if (value.get(array) != simdjson::SUCCESS || array.size() > limits.max_array_items) return false;
  out.reserve(array.size());
  for (simdjson::dom::element item : array) {
    uint64_t token = 0;
    if (item.get(token) != simdjson::SUCCESS || token > static_cast<uint64_t>(kMaxTokenId)) {
      return false;
    }
    out.push_back(static_cast<int64_t>(token));
  }
  return true;
}

bool ReadWorkers(simdjson::dom::element value, const JsonLimits& limits,
                 std::vector<std::string>& out) {
  simdjson::dom::array array;
  if (value.get(array) != simdjson::SUCCESS || array.size() > limits.max_array_items) return false;
  for (simdjson::dom::element item : array) {
    if (!ReadString(item, out.emplace_back())) return false;
  }
  return true;
}

}  // namespace

std::optional<router::RouteRequest> DecodeRouteRequestFast(std::string_view text,
                                                           const JsonLimits& limits) {
  // A body is an object holding arrays: two levels.
  if (text.size() > limits.max_bytes || limits.max_depth < 2) return std::nullopt;
  try {
    // A parser's buffers are sized to the largest body it saw and first
    // touching them costs more than parsing an 8k-token body: each handler
    // thread keeps one for bodies up to kReusedParserBytes (a few MiB of
    // buffers a thread at most) and larger ones get a parser of their own.
    constexpr size_t kReusedParserBytes = size_t{256} << 10;
    thread_local simdjson::dom::parser reused;
    std::optional<simdjson::dom::parser> own;
    simdjson::dom::parser* parser = &reused;
    if (text.size() > kReusedParserBytes) parser = &own.emplace();
    if (parser->allocate(std::max(text.size(), parser == &reused ? kReusedParserBytes : 1), 3) !=
        simdjson::SUCCESS) {
      return std::nullopt;
    }
    simdjson::dom::object object;
    if (parser->parse(text.data(), text.size(), /*realloc_if_needed=*/true).get(object) !=
        simdjson::SUCCESS) {
      return std::nullopt;
    }
    router::RouteRequest route;
    std::string token_ids_b64;
    uint32_t seen = 0;
    for (const simdjson::dom::key_value_pair member : object) {
      size_t field = 0;
      while (field < kFields && kFieldNames[field] != member.key) ++field;
      if (field == kFields || (seen & (1u << field)) != 0)
        return std::nullopt;  // unknown, repeated
      seen |= 1u << field;
      bool read = false;
      switch (static_cast<Field>(field)) {
        case kModel:
          read = ReadString(member.value, route.model) && !route.model.empty();
          break;
        case kTenant:
          read = ReadString(member.value, route.tenant);
          break;
        case kTokenIds:
          read = ReadTokenIds(member.value, limits, route.token_ids);
          break;
        case kTokenIdsB64:
          read = ReadString(member.value, token_ids_b64);
          break;
        case kLoraName:
          read = ReadString(member.value, route.lora_name);
          break;
        case kWorkers:
          read = ReadWorkers(member.value, limits, route.workers);
          break;
        case kFields:
          break;
      }
      if (!read) return std::nullopt;
    }
    const bool numbers = (seen & (1u << kTokenIds)) != 0;
    const bool compact = (seen & (1u << kTokenIdsB64)) != 0;
    if ((seen & (1u << kModel)) == 0 || numbers == compact) return std::nullopt;
    if (compact) {
      Result<std::vector<int64_t>> tokens = DecodeTokenIdsBase64(token_ids_b64, "token_ids_b64");
      if (!tokens.ok()) return std::nullopt;
      route.token_ids = std::move(tokens).value();
    }
    return route;
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
}

}  // namespace kvgov::codec_internal
