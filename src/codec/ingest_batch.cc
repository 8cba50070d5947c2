#include "kvgov/codec/ingest_batch.h"

#include <array>

#include "codec/schemas.h"
#include "kvgov/core/engine_events.h"

namespace kvgov::codec_internal {

template <>
struct Schema<SpanResidency> {
  static void Fields(auto& v, auto& r) {
    v.Optional("worker", r.worker);
    v.Optional("from_worker", r.from_worker);
    v.Optional("token_ids", r.token_ids);
    v.Validate([&] { return CheckTokenIds(r.token_ids); });
    v.Optional("block_hashes", r.block_hashes);
    v.Optional("lora_name", r.lora_name);
    v.Optional("cache_salt", r.cache_salt);
    v.Optional("group_idx", r.group_idx);
    v.Expect("block_hashes", r.token_ids.empty() || r.block_hashes.empty(),
             [] { return std::string("give token_ids or block_hashes, not both"); });
    v.Expect("worker", !r.worker.empty() || (r.token_ids.empty() && r.block_hashes.empty()),
             [] { return std::string("required when the span is named"); });
  }
};

namespace {

// The residency fields sit flat beside the kv_transfer's own fields.
constexpr std::array<std::string_view, 7> kResidencyKeys = {
    "worker", "from_worker", "token_ids", "block_hashes", "lora_name", "cache_salt", "group_idx"};

template <typename R>
Result<IngestEvent> DecodeRecord(const Json& element, const std::string& path) {
  R record;
  KVGOV_RETURN_IF_ERROR(FromJson(element, path, record));
  return IngestEvent{std::move(record), std::nullopt};
}

// kv_transfer and nixl_lease may name where their span lives.
template <typename R>
Result<IngestEvent> DecodeWithResidency(Json element, const std::string& path) {
  Json residency_fields = Json::object();
  for (std::string_view key : kResidencyKeys) {
    auto it = element.find(key);
    if (it == element.end()) continue;
    residency_fields[std::string(key)] = std::move(*it);
    element.erase(it);
  }
  // A lease's span lives on its prefill worker unless the report says
  // otherwise.
  if constexpr (std::is_same_v<R, NIXLLease>) {
    auto engine = element.find("remote_engine");
    if (!residency_fields.empty() && !residency_fields.contains("worker") &&
        engine != element.end()) {
      residency_fields["worker"] = *engine;
    }
  }
  R record;
  KVGOV_RETURN_IF_ERROR(FromJson(element, path, record));
  IngestEvent event{std::move(record), std::nullopt};
  if (!residency_fields.empty()) {
    SpanResidency residency;
    KVGOV_RETURN_IF_ERROR(FromJson(residency_fields, path, residency));
    event.residency = std::move(residency);
  }
  return event;
}

Result<IngestEvent> DecodeElement(const Json& element, const std::string& path) {
  KVGOV_RETURN_IF_ERROR(ExpectObject(element, path));
  auto type_it = element.find("type");
  if (type_it == element.end()) return PathError(ChildPath(path, "type"), "required");
  std::string type;
  KVGOV_RETURN_IF_ERROR(ReadScalar(*type_it, ChildPath(path, "type"), type));
  Json record = element;
  record.erase("type");
  if (type == "kv_transfer") return DecodeWithResidency<KVTransfer>(std::move(record), path);
  if (type == "nixl_lease") return DecodeWithResidency<NIXLLease>(std::move(record), path);
  if (type == "provider_cache") return DecodeRecord<ProviderCache>(record, path);
  if (type == "tool_result") return DecodeRecord<ToolResult>(record, path);
  if (type == "entry") return DecodeRecord<Entry>(record, path);
  return PathError(ChildPath(path, "type"),
                   "unknown event type '" + type.substr(0, 64) +
                       "' (want one of: kv_transfer, nixl_lease, provider_cache, tool_result, "
                       "entry)");
}

}  // namespace
}  // namespace kvgov::codec_internal

namespace kvgov {

std::string_view IngestTypeName(const IngestRecord& record) {
  static constexpr std::array<std::string_view, std::variant_size_v<IngestRecord>> kNames = {
      "kv_transfer", "nixl_lease", "provider_cache", "tool_result", "entry"};
  return kNames[record.index()];
}

Result<IngestBatch> DecodeIngestBatchJson(std::string_view text, const JsonLimits& limits) {
  using namespace codec_internal;
  try {
    KVGOV_ASSIGN_OR_RETURN(const Json doc, ParseJson(text, limits));
    KVGOV_RETURN_IF_ERROR(ExpectObject(doc, "$"));
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (it.key() != "events") return PathError(ChildPath("$", it.key()), "unknown field");
    }
    auto events = doc.find("events");
    if (events == doc.end()) return PathError("$.events", "required");
    KVGOV_RETURN_IF_ERROR(ExpectArray(*events, "$.events"));
    IngestBatch batch;
    batch.events.reserve(events->size());
    for (size_t i = 0; i < events->size(); ++i) {
      batch.events.push_back(DecodeElement((*events)[i], IndexPath("$.events", i)));
    }
    return batch;
  } catch (const Json::exception& e) {
    return Status::Internal(std::string("ingest batch codec: ") + e.what());
  }
}

}  // namespace kvgov
