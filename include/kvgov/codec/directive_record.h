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
/// pending targets and dispatch seqs included). Both forms carry a tenant
/// revocation's "revocation" object only when the directive has one, and
/// every owner's "residue" and "unattributed" always.
std::string EncodeDirectiveRecord(const governance::Directive& directive);

/// The record back. InvalidArgument for a record of the wrong shape,
/// naming the field ("directive record: revocation.flush: ..."). A record
/// written before owners were kept whole reads back with no owners; one
/// written before tenant revocations, with no revocation and every owner's
/// residue and unattributed 0.
Result<governance::Directive> DecodeDirectiveRecord(std::string_view record);

}  // namespace kvgov
