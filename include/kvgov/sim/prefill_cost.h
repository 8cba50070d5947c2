#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kvgov/core/status.h"

namespace kvgov::sim {

/// Model shapes whose prefill was measured on one H200
/// (../shared/reference/prefill-cost.md: bf16, batch 1, median of 5).
enum class ModelShape { kLlama3_8B, kQwen3_32B };

/// "llama-3-8b" or "qwen3-32b"; InvalidArgument naming the accepted ones.
Result<ModelShape> ParseModelShape(std::string_view name);
std::string_view ToString(ModelShape shape);

/// Bytes of KV cache one token holds in bf16 (2 x layers x KV heads x head
/// dim x 2 bytes): what a prefill/decode handoff moves per token.
int64_t KvBytesPerToken(ModelShape shape);

/// Bytes of the model's weights in bf16 (8.03 B and 32.8 B parameters): what
/// every decode step reads once.
int64_t WeightBytes(ModelShape shape);

/// Seconds to move `tokens` tokens of KV over a link of `bytes_per_s`.
double TransferSeconds(ModelShape shape, int64_t tokens, double bytes_per_s);

/// A measured point: prefilling `tokens` tokens cost `us_per_token` each.
struct PrefillPoint {
  int64_t tokens;
  double us_per_token;
};

/// The simulator's modeled prefill time: the measured cost per token at
/// the prompt's length (interpolated linearly between measured lengths,
/// flat below the first and extended along the last segment above it),
/// times the tokens actually computed. A cache hit therefore saves exactly
/// the prefill of the tokens it covers, while the tokens still computed pay
/// for attending over the whole context. Immutable.
class PrefillCostModel {
 public:
  explicit PrefillCostModel(ModelShape shape);

  ModelShape shape() const { return shape_; }

  /// Microseconds per prefilled token for a prompt of `prompt_tokens`.
  double MicrosPerToken(int64_t prompt_tokens) const;

  /// Seconds to prefill `computed_tokens` of a `prompt_tokens`-token prompt.
  double PrefillSeconds(int64_t prompt_tokens, int64_t computed_tokens) const;

 private:
  ModelShape shape_;
  std::span<const PrefillPoint> points_;
};

}  // namespace kvgov::sim
