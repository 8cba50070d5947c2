// DecodeIngestBatchJson: the body of POST /v1/events, from any client that
// can reach the API. Checked, beyond no crash, leak or exception:
//  - only the documented error codes, each message led by its path, for
//    the whole body and for every element ("$.events[3]...");
//  - every decoded record survives the codec's round trip: EncodeJson then
//    the record's own decoder gives the record back (a value the decoder
//    accepts but the encoder cannot write, such as a non-finite double,
//    breaks it);
//  - every record lowers as the daemon lowers it (kvgov/core From*) into
//    an entry that ValidateEntry accepts and that itself round-trips;
//  - the residency rules (token_ids xor block_hashes; a named span names
//    its worker);
//  - small limits only ever refuse.

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "json_check.h"
#include "kvgov/codec/ingest_batch.h"
#include "kvgov/codec/json_codec.h"
#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/provider_cache.h"
#include "kvgov/core/tool_result.h"

namespace kvgov::fuzz {
namespace {

// The decoder that reads back what EncodeJson(record) writes.
template <typename R>
Result<R> DecodeRecord(std::string_view text) {
  if constexpr (std::is_same_v<R, KVTransfer>) {
    return DecodeKVTransferJson(text);
  } else if constexpr (std::is_same_v<R, NIXLLease>) {
    return DecodeNIXLLeaseJson(text);
  } else if constexpr (std::is_same_v<R, ProviderCache>) {
    return DecodeProviderCacheJson(text);
  } else if constexpr (std::is_same_v<R, ToolResult>) {
    return DecodeToolResultJson(text);
  } else {
    static_assert(std::is_same_v<R, Entry>);
    return DecodeEntryJson(text);
  }
}

template <typename R>
void CheckRoundTrip(const R& record, const char* type) {
  const std::string encoded = EncodeJson(record);
  const Result<R> decoded = DecodeRecord<R>(encoded);
  FUZZ_CHECK(decoded.ok(), "%s: the codec refuses its own encoding: %s\n  encoded: %s", type,
             Describe(decoded.status()).c_str(), encoded.c_str());
  FUZZ_CHECK(*decoded == record, "%s: decode(encode(x)) != x\n  encoded: %s", type,
             encoded.c_str());
}

// What the daemon does with an accepted element before anything else
// (src/server/http_api.cc, Ingest). The lease's clock is a fixed instant:
// the lowering is a pure function of it.
Result<Entry> Lower(const IngestRecord& record) {
  return std::visit(
      [](const auto& r) -> Result<Entry> {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, KVTransfer>) {
          return FromKVTransfer(r);
        } else if constexpr (std::is_same_v<R, NIXLLease>) {
          KVGOV_RETURN_IF_ERROR(CheckNIXLLeaseReport(r));
          return FromNIXLLease(r, 1'700'000'000'000);
        } else if constexpr (std::is_same_v<R, ProviderCache>) {
          return FromProviderCache(r);
        } else if constexpr (std::is_same_v<R, ToolResult>) {
          return FromToolResult(r);
        } else {
          return r;
        }
      },
      record);
}

void CheckResidency(const SpanResidency& residency) {
  FUZZ_CHECK(residency.token_ids.empty() || residency.block_hashes.empty(),
             "residency with both token_ids and block_hashes");
  FUZZ_CHECK(
      !residency.worker.empty() || (residency.token_ids.empty() && residency.block_hashes.empty()),
      "a named span without its worker");
  CheckUtf8(residency.worker, "worker");
  CheckUtf8(residency.from_worker, "from_worker");
  CheckUtf8(residency.lora_name, "lora_name");
  CheckUtf8(residency.cache_salt, "cache_salt");
}

void CheckEvent(const IngestEvent& event) {
  const std::string type(IngestTypeName(event.record));
  std::visit([&](const auto& record) { CheckRoundTrip(record, type.c_str()); }, event.record);
  if (event.residency.has_value()) {
    FUZZ_CHECK(std::holds_alternative<KVTransfer>(event.record) ||
                   std::holds_alternative<NIXLLease>(event.record),
               "%s with residency fields", type.c_str());
    CheckResidency(*event.residency);
  }
  const Result<Entry> lowered = Lower(event.record);
  if (!lowered.ok()) {
    FUZZ_CHECK(lowered.status().code() == StatusCode::kInvalidArgument, "%s lowering: %s",
               type.c_str(), Describe(lowered.status()).c_str());
    return;
  }
  const Status valid = ValidateEntry(*lowered);
  FUZZ_CHECK(valid.ok(), "%s lowers to an invalid entry: %s", type.c_str(),
             Describe(valid).c_str());
  CheckRoundTrip(*lowered, "lowered entry");
}

void CheckBatch(const IngestBatch& batch) {
  for (size_t i = 0; i < batch.events.size(); ++i) {
    const Result<IngestEvent>& event = batch.events[i];
    if (event.ok()) {
      CheckEvent(*event);
      continue;
    }
    // An element's error is a schema error about that element, never a
    // limit (limits are whole-body) and never an internal one.
    FUZZ_CHECK(event.status().code() == StatusCode::kInvalidArgument, "element %zu: %s", i,
               Describe(event.status()).c_str());
    const std::string path = "$.events[" + std::to_string(i) + "]";
    FUZZ_CHECK(event.status().message().starts_with(path), "element %zu: %s", i,
               Describe(event.status()).c_str());
  }
}

// Decoded batches compared element by element: the outcome of each, and
// the value when it decoded.
bool SameBatch(const IngestBatch& a, const IngestBatch& b) {
  if (a.events.size() != b.events.size()) return false;
  for (size_t i = 0; i < a.events.size(); ++i) {
    const Result<IngestEvent>& x = a.events[i];
    const Result<IngestEvent>& y = b.events[i];
    if (x.ok() != y.ok()) return false;
    if (!x.ok()) {
      if (x.status() != y.status()) return false;
      continue;
    }
    if (x->record != y->record || x->residency != y->residency) return false;
  }
  return true;
}

}  // namespace
}  // namespace kvgov::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgov;
  using namespace kvgov::fuzz;
  const std::string_view text = AsText(data, size);
  const JsonLimits defaults;
  const JsonLimits small = SmallJsonLimits();
  const Result<IngestBatch> full = DecodeIngestBatchJson(text, defaults);
  const Result<IngestBatch> bounded = DecodeIngestBatchJson(text, small);
  const auto check = [&](const Result<IngestBatch>& result, const JsonLimits& limits) {
    if (result.ok()) {
      CheckBatch(*result);
    } else {
      CheckJsonFailure(result.status(), text, limits);
    }
  };
  check(full, defaults);
  check(bounded, small);
  CheckLimitsAgree(full, bounded, SameBatch);
  return 0;
}
