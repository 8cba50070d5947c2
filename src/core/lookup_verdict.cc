#include "kvgov/core/lookup_verdict.h"

#include <utility>

namespace kvgov {
namespace {

LookupVerdict WithEntry(LookupKind kind, LookupReason reason, Entry entry) {
  LookupVerdict verdict;
  verdict.kind = kind;
  verdict.reason = reason;
  verdict.entry = std::move(entry);
  return verdict;
}

}  // namespace

LookupVerdict LookupVerdict::Hit(Entry entry) {
  LookupVerdict verdict = WithEntry(LookupKind::kHit, LookupReason::kNone, std::move(entry));
  verdict.handle = verdict.entry->id;
  return verdict;
}

LookupVerdict LookupVerdict::Miss(LookupReason reason) {
  LookupVerdict verdict;
  verdict.kind = LookupKind::kMiss;
  verdict.reason = reason;
  return verdict;
}

LookupVerdict LookupVerdict::Revalidate(Entry entry, LookupReason reason) {
  return WithEntry(LookupKind::kRevalidate, reason, std::move(entry));
}

LookupVerdict LookupVerdict::Transform(Entry entry, LookupReason reason) {
  return WithEntry(LookupKind::kTransform, reason, std::move(entry));
}

LookupVerdict LookupVerdict::Quarantine(Entry entry, LookupReason reason) {
  return WithEntry(LookupKind::kQuarantine, reason, std::move(entry));
}

LookupVerdict LookupVerdict::Fault(Entry entry, LookupReason reason) {
  return WithEntry(LookupKind::kFault, reason, std::move(entry));
}

}  // namespace kvgov
