#pragma once

#include <map>
#include <optional>
#include <string>

#include "kvgov/core/envelope.h"

namespace kvgov {

/// The typed answer to "may this object be served from cache?". Every gate
/// in kvgov reduces to CanServe(): only a hit with a valid handle serves.
/// Misses keep a typed reason so a recompute is never silent.
struct LookupVerdict {
  LookupKind kind = LookupKind::kMiss;
  LookupReason reason = LookupReason::kAbsent;
  std::optional<Entry> entry;
  EntryId handle;
  std::map<std::string, std::string> meta;

  bool CanServe() const { return kind == LookupKind::kHit && handle.Valid(); }

  static LookupVerdict Hit(Entry entry);
  static LookupVerdict Miss(LookupReason reason);
  static LookupVerdict Revalidate(Entry entry, LookupReason reason);
  static LookupVerdict Transform(Entry entry, LookupReason reason);
  static LookupVerdict Quarantine(Entry entry, LookupReason reason);
  static LookupVerdict Fault(Entry entry, LookupReason reason);

  friend bool operator==(const LookupVerdict&, const LookupVerdict&) = default;
};

}  // namespace kvgov
