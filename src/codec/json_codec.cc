#include "kvgov/codec/json_codec.h"

#include <string>
#include <utility>

#include "codec/schemas.h"

namespace kvgov::codec_internal {

namespace {

template <typename R>
std::string Encode(const R& record) {
  return codec_internal::Dump(ToJson(record));
}

template <typename R>
Result<R> Decode(std::string_view text, const JsonLimits& limits) {
  return DecodeDocument<R>(text, limits, "json codec");
}

}  // namespace
}  // namespace kvgov::codec_internal

namespace kvgov {

using codec_internal::Decode;
using codec_internal::Encode;

std::string EncodeJson(const Entry& entry) { return Encode(entry); }
std::string EncodeJson(const LookupVerdict& verdict) { return Encode(verdict); }
std::string EncodeJson(const KVTransfer& transfer) { return Encode(transfer); }
std::string EncodeJson(const MooncakeEvent& event) { return Encode(event); }
std::string EncodeJson(const LMCacheEvent& event) { return Encode(event); }
std::string EncodeJson(const NIXLLease& lease) { return Encode(lease); }
std::string EncodeJson(const ProviderCache& cache) { return Encode(cache); }
std::string EncodeJson(const KVPrefix& prefix) { return Encode(prefix); }
std::string EncodeJson(const ToolResult& result) { return Encode(result); }

Result<Entry> DecodeEntryJson(std::string_view text, const JsonLimits& limits) {
  return Decode<Entry>(text, limits);
}
Result<LookupVerdict> DecodeLookupVerdictJson(std::string_view text, const JsonLimits& limits) {
  return Decode<LookupVerdict>(text, limits);
}
Result<KVTransfer> DecodeKVTransferJson(std::string_view text, const JsonLimits& limits) {
  return Decode<KVTransfer>(text, limits);
}
Result<MooncakeEvent> DecodeMooncakeEventJson(std::string_view text, const JsonLimits& limits) {
  return Decode<MooncakeEvent>(text, limits);
}
Result<LMCacheEvent> DecodeLMCacheEventJson(std::string_view text, const JsonLimits& limits) {
  return Decode<LMCacheEvent>(text, limits);
}
Result<NIXLLease> DecodeNIXLLeaseJson(std::string_view text, const JsonLimits& limits) {
  return Decode<NIXLLease>(text, limits);
}
Result<ProviderCache> DecodeProviderCacheJson(std::string_view text, const JsonLimits& limits) {
  return Decode<ProviderCache>(text, limits);
}
Result<KVPrefix> DecodeKVPrefixJson(std::string_view text, const JsonLimits& limits) {
  return Decode<KVPrefix>(text, limits);
}
Result<ToolResult> DecodeToolResultJson(std::string_view text, const JsonLimits& limits) {
  return Decode<ToolResult>(text, limits);
}

}  // namespace kvgov
