#include "kvgov/core/admission.h"

namespace kvgov {

Entry AdmissionPolicy::Admit(Entry entry) const {
  if (entry.plane == Plane::kProvider || entry.security.taint == Taint::kQuarantined) {
    return entry;
  }
  for (const AdmissionRule& rule : rules_) {
    if (rule.owner != entry.residency.owner) continue;
    entry.security.taint = Taint::kTrusted;
    entry.security.scope = rule.scope;
    entry.security.admission_verdict = AdmissionVerdict::kAllow;
    entry.security.admitted_by = rule.admitted_by;
    return entry;
  }
  return entry;
}

}  // namespace kvgov
