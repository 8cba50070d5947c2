#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace kvgov::testing {

/// `count` consecutive token ids from `start`: a prompt whose blocks no
/// other prompt of a test shares unless their ranges overlap.
inline std::vector<int64_t> Tokens(size_t count, int64_t start) {
  std::vector<int64_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), start);
  return tokens;
}

}  // namespace kvgov::testing
