#pragma once

// The JSON forms of an invalidation directive (docs/formats/governance-api.md).

#include <string>
#include <string_view>

#include "kvgov/core/status.h"
#include "kvgov/governance/directive.h"

namespace kvgov {

/// The directive as GET /v1/invalidations/{id} shows it: without the
/// owners' pending keys and dispatch seqs, or the deadline.
std::string EncodeDirectiveJson(const governance::Directive& directive);

/// The whole directive as the store and the replicated log keep it (owners'
/// pending targets and dispatch seqs included).
std::string EncodeDirectiveRecord(const governance::Directive& directive);

/// The record back. InvalidArgument for a record of the wrong shape. A
/// record written before owners were kept whole reads back with no owners.
Result<governance::Directive> DecodeDirectiveRecord(std::string_view record);

}  // namespace kvgov
