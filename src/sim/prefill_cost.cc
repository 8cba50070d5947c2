#include "kvgov/sim/prefill_cost.h"

#include <array>
#include <string>

namespace kvgov::sim {
namespace {

// ../shared/reference/prefill-cost.md, measured 2026-11-29.
constexpr std::array<PrefillPoint, 4> kLlama3_8B = {
    {{1024, 25.5}, {4096, 25.7}, {8192, 27.8}, {16384, 31.6}}};
constexpr std::array<PrefillPoint, 3> kQwen3_32B = {{{1024, 109.1}, {4096, 113.7}, {8192, 121.1}}};

}  // namespace

Result<ModelShape> ParseModelShape(std::string_view name) {
  if (name == "llama-3-8b") return ModelShape::kLlama3_8B;
  if (name == "qwen3-32b") return ModelShape::kQwen3_32B;
  return Status::InvalidArgument("unknown model shape \"" + std::string(name.substr(0, 64)) +
                                 "\": want llama-3-8b or qwen3-32b");
}

std::string_view ToString(ModelShape shape) {
  return shape == ModelShape::kLlama3_8B ? "llama-3-8b" : "qwen3-32b";
}

int64_t KvBytesPerToken(ModelShape shape) {
  // 32 layers x 8 KV heads x 128 (Llama-3-8B); 64 x 8 x 128 (Qwen3-32B).
  return shape == ModelShape::kLlama3_8B ? 131072 : 262144;
}

int64_t WeightBytes(ModelShape shape) {
  return shape == ModelShape::kLlama3_8B ? int64_t{16'060'000'000} : int64_t{65'600'000'000};
}

double TransferSeconds(ModelShape shape, int64_t tokens, double bytes_per_s) {
  return static_cast<double>(tokens) * static_cast<double>(KvBytesPerToken(shape)) / bytes_per_s;
}

PrefillCostModel::PrefillCostModel(ModelShape shape)
    : shape_(shape),
      points_(shape == ModelShape::kLlama3_8B ? std::span<const PrefillPoint>(kLlama3_8B)
                                              : std::span<const PrefillPoint>(kQwen3_32B)) {}

double PrefillCostModel::MicrosPerToken(int64_t prompt_tokens) const {
  if (prompt_tokens <= points_.front().tokens) return points_.front().us_per_token;
  // The segment that holds the length, or the last one to extend past it.
  size_t upper = 1;
  while (upper + 1 < points_.size() && points_[upper].tokens < prompt_tokens) ++upper;
  const PrefillPoint& a = points_[upper - 1];
  const PrefillPoint& b = points_[upper];
  const double slope = (b.us_per_token - a.us_per_token) / static_cast<double>(b.tokens - a.tokens);
  return a.us_per_token + slope * static_cast<double>(prompt_tokens - a.tokens);
}

double PrefillCostModel::PrefillSeconds(int64_t prompt_tokens, int64_t computed_tokens) const {
  return static_cast<double>(computed_tokens) * MicrosPerToken(prompt_tokens) * 1e-6;
}

}  // namespace kvgov::sim
