#pragma once

#include <string>
#include <vector>

#include "kvgov/core/envelope.h"

namespace kvgov {

/// Admits entries from one trusted owner at a given scope.
struct AdmissionRule {
  std::string owner;  // matches Entry::residency.owner exactly
  Scope scope = Scope::kTenant;
  std::string admitted_by;  // who takes responsibility, recorded on the entry
};

/// The one place an untrusted entry becomes trusted. Every lowering leaves
/// entries tainted, agent-scoped and unadmitted; this policy, configured on
/// the trusted side, admits those whose owner a rule names. Provider
/// telemetry is never admitted (it is cost information, not a handle), and
/// a quarantined entry stays quarantined.
/// Immutable after construction; safe to share across threads.
class AdmissionPolicy {
 public:
  AdmissionPolicy() = default;
  explicit AdmissionPolicy(std::vector<AdmissionRule> rules) : rules_(std::move(rules)) {}

  /// The entry, admitted (trusted, the rule's scope, allow, admitted_by) when
  /// a rule matches, otherwise unchanged.
  Entry Admit(Entry entry) const;

 private:
  std::vector<AdmissionRule> rules_;
};

}  // namespace kvgov
