#include "kvgov/services/usage_accounting.h"

#include <memory>
#include <utility>

#include "kvgov/core/digest.h"
#include "kvgov/core/kv_transfer.h"

namespace kvgov::services {

Entry RouteSavingEntry(std::string_view decision_id, std::string_view worker,
                       int64_t saved_tokens) {
  KVTransfer transfer;
  transfer.direction = KVTransferDirection::kRoute;
  transfer.span.span_digest = DigestFields("kvgov.route.v1", {decision_id});
  transfer.span.tokens = saved_tokens;
  transfer.span.owner = std::string(worker);
  transfer.span.to_tier = saved_tokens > 0 ? ResidencyTier::kHBM : ResidencyTier::kUnknown;
  transfer.span.outcome = saved_tokens > 0 ? KVTransferOutcome::kOk : KVTransferOutcome::kMissed;
  // A route span always lowers: its digest is set and its counts are not
  // negative.
  Entry entry = std::move(FromKVTransfer(transfer)).value();
  entry.metrics.prefill_tokens_saved = saved_tokens;
  entry.labels["decision_id"] = std::string(decision_id);
  return entry;
}

Result<std::unique_ptr<UsageAccounting>> UsageAccounting::Create(
    metrics::CacheAccounting* accounting, router::PredictionScores* scores,
    metrics::Registry* registry) {
  std::unique_ptr<UsageAccounting> usage(new UsageAccounting(accounting, scores));
  KVGOV_ASSIGN_OR_RETURN(
      usage->tokenize_mismatches_,
      registry->AddCounter({"kvgov_gateway_tokenize_mismatch_total",
                            "Gateway answers whose usage.prompt_tokens differ from the "
                            "tokens kvgov routed on, by model.",
                            {"model"}}));
  KVGOV_ASSIGN_OR_RETURN(
      usage->predictions_,
      registry->AddCounter({"kvgov_gateway_predictions_total",
                            "Gateway answers by how kvgov's predicted overlap compared with "
                            "the blocks the engine reported cached: exact, over (predicted "
                            "more) or under.",
                            {"worker", "outcome"}}));
  KVGOV_ASSIGN_OR_RETURN(
      usage->predicted_tokens_,
      registry->AddCounter({"kvgov_gateway_predicted_tokens_total",
                            "Prompt tokens kvgov predicted cached on the chosen worker.",
                            {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(usage->cached_tokens_,
                         registry->AddCounter({"kvgov_gateway_engine_cached_tokens_total",
                                               "Prompt tokens the engine reported cached "
                                               "(usage.prompt_tokens_details.cached_tokens).",
                                               {"worker"}}));
  KVGOV_ASSIGN_OR_RETURN(
      usage->unaccounted_,
      registry->AddCounter({"kvgov_gateway_unaccounted_total",
                            "Gateway answers that carried no usage (a stream whose client "
                            "set stream_options without include_usage, an error)."}));
  usage->unaccounted_->WithLabels({});
  return usage;
}

void UsageAccounting::Account(const std::string& worker, const std::string& decision_id,
                              const router::Prediction& prediction,
                              const std::optional<EngineUsage>& usage) {
  if (!usage) {
    unaccounted_->WithLabels({})->Inc();
    return;
  }
  if (prediction.whole_prompt && usage->prompt_tokens != prediction.routed_tokens) {
    tokenize_mismatches_->WithLabels({prediction.model})->Inc();
  }
  Entry entry = RouteSavingEntry(decision_id, worker, usage->cached_tokens);
  entry.labels["model"] = prediction.model;
  if (!prediction.tenant.empty()) entry.labels["tenant"] = prediction.tenant;
  accounting_->Record(entry);
  predicted_tokens_->WithLabels({worker})->Add(static_cast<double>(prediction.predicted_tokens));
  cached_tokens_->WithLabels({worker})->Add(static_cast<double>(usage->cached_tokens));
  const router::PredictionOutcome outcome = scores_->Record(
      worker, prediction.predicted_tokens, usage->cached_tokens, prediction.block_size);
  predictions_->WithLabels({worker, std::string(router::ToString(outcome))})->Inc();
}

}  // namespace kvgov::services
