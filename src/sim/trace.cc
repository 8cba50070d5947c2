#include "kvgov/sim/trace.h"

#include <cmath>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "sim/mix.h"

namespace kvgov::sim {
namespace {

using Json = nlohmann::json;

// A line holds four fields; anything nested deeper is not a trace line.
constexpr int kMaxLineDepth = 4;

Status LineError(size_t line, std::string_view field, std::string_view problem) {
  std::string message = "line " + std::to_string(line) + ": ";
  if (!field.empty()) message += std::string(field) + ": ";
  return Status::InvalidArgument(message + std::string(problem));
}

// A JSON number that is an integer in [min, max]: an integer, or a float
// with no fraction (some exporters write 12.0).
Result<int64_t> IntegerField(const Json& line_json, std::string_view name, int64_t min, int64_t max,
                             size_t line) {
  const auto it = line_json.find(name);
  if (it == line_json.end()) return LineError(line, name, "missing");
  int64_t value = 0;
  if (it->is_number_integer()) {
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return LineError(line, name, "out of range");
    }
    value = it->get<int64_t>();
  } else if (it->is_number_float()) {
    const double number = it->get<double>();
    if (!std::isfinite(number) || std::floor(number) != number || std::fabs(number) > 9e15) {
      return LineError(line, name, "want an integer");
    }
    value = static_cast<int64_t>(number);
  } else {
    return LineError(line, name, "want an integer");
  }
  if (value < min || value > max) {
    return LineError(
        line, name,
        std::to_string(value) + " is outside " + std::to_string(min) + ".." + std::to_string(max));
  }
  return value;
}

}  // namespace

Result<std::vector<SimRequest>> ParseMooncakeTrace(std::string_view text,
                                                   const MooncakeTraceOptions& options) {
  if (options.block_tokens < 1 || options.block_tokens > 65536) {
    return Status::InvalidArgument("trace block tokens: want 1..65536, got " +
                                   std::to_string(options.block_tokens));
  }
  if (!(options.speedup > 0) || !std::isfinite(options.speedup)) {
    return Status::InvalidArgument("trace speed-up: want a positive number");
  }
  if (!(options.window_start_s >= 0) || !(options.window_end_s > options.window_start_s)) {
    return Status::InvalidArgument("trace window: want 0 <= start < end");
  }
  if (options.vocabulary < 2 || options.vocabulary > (int64_t{1} << 31)) {
    return Status::InvalidArgument("trace vocabulary: want 2..2^31");
  }

  std::vector<SimRequest> requests;
  // One block's tokens per hash id, made once: the trace's blocks repeat.
  std::unordered_map<int64_t, std::vector<int64_t>> blocks;
  int64_t previous_ms = std::numeric_limits<int64_t>::min();
  size_t line_number = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (line.size() > kMaxTraceLineBytes) {
      return LineError(line_number, "",
                       "longer than " + std::to_string(kMaxTraceLineBytes) + " bytes");
    }
    if (requests.size() == kMaxTraceRequests) {
      return LineError(line_number, "",
                       "more than " + std::to_string(kMaxTraceRequests) + " requests");
    }
    bool too_deep = false;
    Json parsed = Json::parse(
        line.begin(), line.end(),
        [&](int depth, Json::parse_event_t, Json&) {
          if (depth > kMaxLineDepth) too_deep = true;
          return !too_deep;
        },
        /*allow_exceptions=*/false);
    if (too_deep) return LineError(line_number, "", "nested too deeply");
    if (parsed.is_discarded()) return LineError(line_number, "", "not valid JSON");
    if (!parsed.is_object()) return LineError(line_number, "", "want a JSON object");

    KVGOV_ASSIGN_OR_RETURN(
        int64_t timestamp_ms,
        IntegerField(parsed, "timestamp", 0, std::numeric_limits<int64_t>::max() / 2, line_number));
    KVGOV_ASSIGN_OR_RETURN(int64_t input_length, IntegerField(parsed, "input_length", 1,
                                                              kMaxTraceInputTokens, line_number));
    KVGOV_ASSIGN_OR_RETURN(int64_t output_length, IntegerField(parsed, "output_length", 0,
                                                               kMaxTraceInputTokens, line_number));
    if (timestamp_ms < previous_ms) {
      return LineError(line_number, "timestamp",
                       std::to_string(timestamp_ms) + " precedes the line before's " +
                           std::to_string(previous_ms) +
                           " (the trace must be sorted by time; it is not reordered)");
    }
    previous_ms = timestamp_ms;
    const auto hash_ids = parsed.find("hash_ids");
    if (hash_ids == parsed.end()) return LineError(line_number, "hash_ids", "missing");
    if (!hash_ids->is_array()) return LineError(line_number, "hash_ids", "want an array");
    const int64_t want = (input_length + options.block_tokens - 1) / options.block_tokens;
    if (static_cast<int64_t>(hash_ids->size()) != want) {
      return LineError(line_number, "hash_ids",
                       std::to_string(hash_ids->size()) + " ids for " +
                           std::to_string(input_length) + " tokens; want ceil(input_length / " +
                           std::to_string(options.block_tokens) + ") = " + std::to_string(want));
    }

    const double at_s = static_cast<double>(timestamp_ms) / 1000.0;
    if (at_s < options.window_start_s) continue;
    if (at_s >= options.window_end_s) break;  // sorted: nothing later is in the window

    SimRequest request;
    request.id = requests.size();
    request.arrival_s = (at_s - options.window_start_s) / options.speedup;
    request.session = "trace";
    request.output_tokens = output_length;
    request.tokens.reserve(static_cast<size_t>(input_length));
    for (size_t i = 0; i < hash_ids->size(); ++i) {
      const Json& id_json = (*hash_ids)[i];
      if (!id_json.is_number_integer() ||
          (id_json.is_number_unsigned() &&
           id_json.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ||
          id_json.get<int64_t>() < 0) {
        return LineError(line_number, "hash_ids[" + std::to_string(i) + "]",
                         "want a non-negative integer");
      }
      const int64_t id = id_json.get<int64_t>();
      auto [block, made] = blocks.try_emplace(id);
      if (made) {
        block->second.resize(static_cast<size_t>(options.block_tokens));
        const uint64_t base = SplitMix64(options.seed ^ SplitMix64(static_cast<uint64_t>(id)));
        for (int64_t k = 0; k < options.block_tokens; ++k) {
          block->second[static_cast<size_t>(k)] =
              static_cast<int64_t>(SplitMix64(base + static_cast<uint64_t>(k)) %
                                   static_cast<uint64_t>(options.vocabulary));
        }
      }
      const int64_t take = std::min<int64_t>(
          options.block_tokens, input_length - static_cast<int64_t>(request.tokens.size()));
      request.tokens.insert(request.tokens.end(), block->second.begin(),
                            block->second.begin() + take);
    }
    requests.push_back(std::move(request));
  }
  return requests;
}

}  // namespace kvgov::sim
