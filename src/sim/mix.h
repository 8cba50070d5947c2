#pragma once

// Internal to kvgov_sim: one well-mixed 64-bit function (splitmix64's
// finalizer), so neighbouring inputs give unrelated outputs.

#include <cstdint>

namespace kvgov::sim {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace kvgov::sim
