#include "kvgov/services/prefix_watch.h"

#include <algorithm>

#include "kvgov/clock/clock.h"
#include "kvgov/log/log.h"

namespace kvgov::services {

void PrefixWatch::Observe(std::string_view model, std::string_view tenant,
                          std::span<const int64_t> tokens) {
  if (!detector_) return;
  const std::string_view named = tenant.empty() ? std::string_view("-") : tenant;
  const bool keep_context =
      std::find(context_tenants_.begin(), context_tenants_.end(), named) != context_tenants_.end();
  const prompts::Observation seen =
      detector_->Observe(model, tenant, tokens, clock::NowMillis(), keep_context);
  if (!seen.finding) return;
  const prompts::Finding& finding = *seen.finding;
  if (finding.avoidable_tokens > 0) {
    avoidable_tokens_
        ->WithLabels(
            {std::string(model), std::string(tenant), std::string(prompts::ToString(finding.kind))})
        ->Add(finding.avoidable_tokens);
  }
  if (seen.new_finding) {
    log::Line(log::Level::kWarn, "prefix.breaker_found")
        .Field("model", model)
        .Field("tenant", tenant)
        .Field("family", finding.family)
        .Field("kind", prompts::ToString(finding.kind))
        .Field("position_tokens", uint64_t{finding.position_tokens})
        .Field("length_tokens", uint64_t{finding.length_tokens})
        .Field("avoidable_tokens", uint64_t{finding.avoidable_tokens});
  }
}

}  // namespace kvgov::services
