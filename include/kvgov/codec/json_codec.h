#pragma once

// The JSON wire form of every kvgov record. The format is specified in
// docs/formats/envelope.md; this header is its only implementation, so the
// spec and the code change together.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvgov/core/envelope.h"
#include "kvgov/core/kv_prefix.h"
#include "kvgov/core/kv_transfer.h"
#include "kvgov/core/lookup_verdict.h"
#include "kvgov/core/nixl_lease.h"
#include "kvgov/core/provider_cache.h"
#include "kvgov/core/status.h"
#include "kvgov/core/tool_result.h"
#include "kvgov/core/transport_ops.h"

namespace kvgov {

/// The envelope format this codec writes in `format_version` and the only
/// one it reads.
inline constexpr int64_t kEnvelopeFormatVersion = 1;

/// Bounds on untrusted JSON input, checked before any decoded value reaches a
/// caller. The defaults suit one report per HTTP body.
struct JsonLimits {
  std::size_t max_bytes = std::size_t{1} << 20;        // whole body, checked before parsing
  std::size_t max_depth = 32;                          // nested objects/arrays; the top level is 1
  std::size_t max_array_items = std::size_t{1} << 20;  // per array
};

/// Encoders. Each writes one compact JSON object holding every field of the
/// record, keys in sorted order, so equal records encode to equal bytes.
/// Entry (also when nested in a LookupVerdict) carries
/// "format_version": kEnvelopeFormatVersion. An absent LookupVerdict::entry
/// is omitted. Encoding cannot fail: string bytes that are not valid UTF-8
/// are written as U+FFFD, and a non-finite double is written as null (which
/// no decoder accepts). Records that came from a decoder have neither.
std::string EncodeJson(const Entry& entry);
std::string EncodeJson(const LookupVerdict& verdict);
std::string EncodeJson(const KVTransfer& transfer);
std::string EncodeJson(const MooncakeEvent& event);
std::string EncodeJson(const LMCacheEvent& event);
std::string EncodeJson(const NIXLLease& lease);
std::string EncodeJson(const ProviderCache& cache);
std::string EncodeJson(const KVPrefix& prefix);
std::string EncodeJson(const ToolResult& result);

/// Decoders. Each parses one JSON object and returns the record, or:
///  - ResourceExhausted when `text` is longer than limits.max_bytes, nests
///    deeper than limits.max_depth, or holds an array longer than
///    limits.max_array_items;
///  - InvalidArgument for anything else wrong: malformed JSON, a duplicate
///    key, an unknown field, a missing required field, a value of the wrong
///    JSON type, an integer that is fractional or outside the C++ field's
///    range, an unknown enum spelling, or a record invariant (see below).
/// Every error message is "<path>: <problem>", where the path names the
/// offending value from the document root, e.g.
/// "$.security.taint: unknown taint 'trustd' (want one of: ...)".
/// Unknown fields and enum values are rejected, never ignored: a misspelt
/// trust field must fail loudly rather than decode to its default.
///
/// DecodeEntryJson (and the `entry` of a LookupVerdict) also rejects a
/// format_version other than kEnvelopeFormatVersion, an EntryId with a
/// negative length, a `source` other than SourceForPlane(plane) (an absent
/// source is set to it), and anything else ValidateEntry rejects.
/// Required fields: Entry: id (with digest), plane. LookupVerdict: kind.
/// KVTransfer: direction, span_digest. MooncakeEvent, LMCacheEvent:
/// operation, span_digest. NIXLLease: lease_id, event, role. ProviderCache:
/// provider, model_id. KVPrefix: token_ids, model_id. ToolResult: key, event.
/// Every other field is optional and defaults as the C++ struct does.
Result<Entry> DecodeEntryJson(std::string_view text, const JsonLimits& limits = {});
Result<LookupVerdict> DecodeLookupVerdictJson(std::string_view text, const JsonLimits& limits = {});
Result<KVTransfer> DecodeKVTransferJson(std::string_view text, const JsonLimits& limits = {});
Result<MooncakeEvent> DecodeMooncakeEventJson(std::string_view text, const JsonLimits& limits = {});
Result<LMCacheEvent> DecodeLMCacheEventJson(std::string_view text, const JsonLimits& limits = {});
Result<NIXLLease> DecodeNIXLLeaseJson(std::string_view text, const JsonLimits& limits = {});
Result<ProviderCache> DecodeProviderCacheJson(std::string_view text, const JsonLimits& limits = {});
Result<KVPrefix> DecodeKVPrefixJson(std::string_view text, const JsonLimits& limits = {});
Result<ToolResult> DecodeToolResultJson(std::string_view text, const JsonLimits& limits = {});

}  // namespace kvgov
