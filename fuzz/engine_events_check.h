#pragma once

// The invariants of a decoded engine event batch, shared by the vLLM/SGLang
// and Mooncake fuzz targets: what the decoders promise about every batch
// they return (include/kvgov/adapters/engine_wire.h,
// docs/formats/engine-events.md), checked independently of how they got
// there.

#include <cmath>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "kvgov/adapters/engine_wire.h"
#include "kvgov/core/engine_events.h"

namespace kvgov::fuzz {

/// Limits small enough that a fuzzer reaches every one of them with inputs
/// of a few hundred bytes. Each is at most its default, so a payload these
/// accept the defaults accept too.
inline adapters::MsgpackLimits SmallMsgpackLimits() {
  adapters::MsgpackLimits limits;
  limits.max_payload_bytes = 1024;
  limits.max_array = 8;
  limits.max_map = 6;
  limits.max_str = 24;
  limits.max_bin = 12;
  limits.max_depth = 4;
  return limits;
}

/// The defaults but with ext values let through the shape check, so the
/// decoders' own type checks meet them (the defaults refuse every ext).
inline adapters::MsgpackLimits ExtMsgpackLimits() {
  adapters::MsgpackLimits limits;
  limits.max_ext = 16;
  return limits;
}

/// Which decoder produced the batch: the two schemas differ in what a
/// BlockStored must carry.
enum class EngineSchema { kVllm, kMooncake };

// An extra key is canonical JSON (sorted keys, no whitespace, minimal
// escapes): a JSON parser must read it and print it back byte for byte.
// nlohmann prints with the same escapes and key order, so any difference is
// a key that two publishers of the same block could spell two ways.
inline void CheckExtraKey(const std::string& key) {
  if (key.empty()) return;  // a block without extra keys
  FUZZ_CHECK(IsValidUtf8(key), "extra key is not UTF-8");
  nlohmann::json parsed = nlohmann::json::parse(key, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!parsed.is_discarded(), "extra key is not JSON: %s", key.c_str());
  const std::string printed = parsed.dump();
  FUZZ_CHECK(printed == key, "extra key is not canonical: %s (canonical: %s)", key.c_str(),
             printed.c_str());
}

inline void CheckStored(const BlockStored& stored, EngineSchema schema) {
  const size_t blocks = stored.block_hashes.size();
  const size_t tokens = stored.token_ids.size();
  if (schema == EngineSchema::kVllm) {
    // vLLM hashes full blocks only: every store carries its tokens.
    FUZZ_CHECK(stored.block_size > 0, "block_size %lld", static_cast<long long>(stored.block_size));
  } else {
    // Mooncake may leave the block size unknown (0), and then sends no tokens.
    FUZZ_CHECK(stored.block_size >= 0, "block_size %lld",
               static_cast<long long>(stored.block_size));
    FUZZ_CHECK(tokens == 0 || stored.block_size > 0, "tokens without a block size");
  }
  if (stored.block_size > 0 && (schema == EngineSchema::kVllm || tokens > 0)) {
    const auto block_size = static_cast<uint64_t>(stored.block_size);
    FUZZ_CHECK(tokens % block_size == 0 && tokens / block_size == blocks,
               "%zu tokens for %zu blocks of %lld", tokens, blocks,
               static_cast<long long>(stored.block_size));
  }
  for (int64_t token : stored.token_ids) {
    FUZZ_CHECK(token >= 0 && token <= kMaxTokenId, "token id %lld out of range",
               static_cast<long long>(token));
  }
  FUZZ_CHECK(stored.extra_keys.empty() || stored.extra_keys.size() == blocks,
             "%zu extra keys for %zu blocks", stored.extra_keys.size(), blocks);
  if (schema == EngineSchema::kMooncake && blocks > 0) {
    // The tenant namespace rides on the first block's key, always.
    FUZZ_CHECK(
        stored.extra_keys.size() == blocks && stored.extra_keys[0].starts_with("[\"mooncake\","),
        "mooncake store without its tenant key");
  }
  for (const std::string& key : stored.extra_keys) CheckExtraKey(key);
  FUZZ_CHECK(stored.group_idx >= 0, "group_idx %lld", static_cast<long long>(stored.group_idx));
  FUZZ_CHECK(IsValidUtf8(stored.lora_name), "lora_name is not UTF-8");
  FUZZ_CHECK(IsValidUtf8(stored.medium), "medium is not UTF-8");
  FUZZ_CHECK(IsValidUtf8(stored.kv_cache_spec_kind), "kv_cache_spec_kind is not UTF-8");
  FUZZ_CHECK(IsValidUtf8(stored.locality), "locality is not UTF-8");
  FUZZ_CHECK(stored.kv_cache_spec_sliding_window >= 0, "sliding window %lld",
             static_cast<long long>(stored.kv_cache_spec_sliding_window));
}

inline void CheckBatch(const EngineEventBatch& batch, EngineSchema schema) {
  // The stream's restart detection compares batch timestamps: a NaN or an
  // infinity would make every later batch look like a redelivery, or none.
  FUZZ_CHECK(std::isfinite(batch.ts), "ts %f", batch.ts);
  for (const EngineEvent& event : batch.events) {
    if (const auto* stored = std::get_if<BlockStored>(&event)) {
      CheckStored(*stored, schema);
    } else if (const auto* removed = std::get_if<BlockRemoved>(&event)) {
      FUZZ_CHECK(removed->group_idx >= 0, "group_idx %lld",
                 static_cast<long long>(removed->group_idx));
      FUZZ_CHECK(IsValidUtf8(removed->medium), "medium is not UTF-8");
      FUZZ_CHECK(IsValidUtf8(removed->locality), "locality is not UTF-8");
    }
  }
}

inline void CheckFailure(const Status& status, std::string_view payload,
                         const adapters::MsgpackLimits& limits) {
  FUZZ_CHECK(CodeIsOneOf(status, StatusCode::kCorruption, StatusCode::kResourceExhausted,
                         StatusCode::kInvalidArgument),
             "unexpected code: %s", Describe(status).c_str());
  FUZZ_CHECK(!status.message().empty(), "error without a message");
  // The size limit is checked before anything else is read.
  if (payload.size() > limits.max_payload_bytes) {
    FUZZ_CHECK(status.code() == StatusCode::kResourceExhausted, "oversized payload: %s",
               Describe(status).c_str());
  }
}

inline void CheckOutcome(const Result<EngineEventBatch>& result, std::string_view payload,
                         const adapters::MsgpackLimits& limits, EngineSchema schema) {
  if (result.ok()) {
    CheckBatch(*result, schema);
  } else {
    CheckFailure(result.status(), payload, limits);
  }
}

/// `tight` and `loose` decode one payload under limits where every bound of
/// `loose` is at least that of `tight`. Looser limits may accept more,
/// never decode differently: whatever `tight` accepts, `loose` decodes to
/// the same batch, and whatever `tight` refuses for anything but a limit,
/// `loose` refuses word for word.
inline void CheckLooserAgrees(const Result<EngineEventBatch>& tight,
                              const Result<EngineEventBatch>& loose, const char* what) {
  if (tight.ok()) {
    FUZZ_CHECK(loose.ok(), "%s: refused by the looser limits: %s", what,
               Describe(loose.status()).c_str());
    FUZZ_CHECK(*tight == *loose, "%s: the limits changed the decoded batch", what);
  } else if (tight.status().code() != StatusCode::kResourceExhausted) {
    FUZZ_CHECK(!loose.ok() && loose.status() == tight.status(), "%s: tight %s, loose %s", what,
               Describe(tight.status()).c_str(), Describe(loose.status()).c_str());
  }
}

/// Decodes `payload` under the small, the default and the ext-permitting
/// limits (each looser than the one before), checks every outcome, and
/// checks that they agree.
template <typename Decode>
void CheckDecoder(Decode decode, std::string_view payload, EngineSchema schema) {
  const adapters::MsgpackLimits small = SmallMsgpackLimits();
  const adapters::MsgpackLimits defaults;
  const adapters::MsgpackLimits ext = ExtMsgpackLimits();
  const Result<EngineEventBatch> bounded = decode(payload, small);
  const Result<EngineEventBatch> full = decode(payload, defaults);
  const Result<EngineEventBatch> with_ext = decode(payload, ext);
  CheckOutcome(bounded, payload, small, schema);
  CheckOutcome(full, payload, defaults, schema);
  CheckOutcome(with_ext, payload, ext, schema);
  CheckLooserAgrees(bounded, full, "small vs default limits");
  CheckLooserAgrees(full, with_ext, "default vs ext-permitting limits");
}

}  // namespace kvgov::fuzz
