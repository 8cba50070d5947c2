#pragma once

// The cache breakers found in the prompts kvgov routes
// (docs/formats/prefix-diagnostics.md): the gateway and /v1/route feed each
// prompt to the detector; the control API reports what it found.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/metrics/registry.h"
#include "kvgov/prompts/cache_breakers.h"

namespace kvgov::services {

/// The cache breakers found in routed prompts.
///
/// Thread-safe: the detector and the metric family each are.
class PrefixWatch {
 public:
  /// `detector` null: detection is off (serve --prefix-diagnostics=false).
  /// `context_tenants`: the tenants ("-" for none) whose findings keep a
  /// few tokens of context (--prefix-context-tenants). `avoidable_tokens`:
  /// the {model,tenant,cause} counter, null when detection is off.
  PrefixWatch(std::unique_ptr<prompts::CacheBreakerDetector> detector,
              std::vector<std::string> context_tenants, metrics::CounterFamily* avoidable_tokens)
      : detector_(std::move(detector)),
        context_tenants_(std::move(context_tenants)),
        avoidable_tokens_(avoidable_tokens) {}

  /// Compares one routed prompt with the recent prompts of its family:
  /// counts the tokens its finding makes the engine recompute, and logs a
  /// finding the first time it is seen. Nothing when detection is off.
  void Observe(std::string_view model, std::string_view tenant, std::span<const int64_t> tokens);

  /// Null when detection is off.
  const prompts::CacheBreakerDetector* detector() const { return detector_.get(); }

 private:
  const std::unique_ptr<prompts::CacheBreakerDetector> detector_;
  const std::vector<std::string> context_tenants_;
  metrics::CounterFamily* const avoidable_tokens_;
};

}  // namespace kvgov::services
