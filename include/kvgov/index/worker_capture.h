#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvgov/index/block_key.h"
#include "kvgov/index/residency_index.h"

namespace kvgov::index {

/// One worker's residency copied out of the index (ResidencyIndex::
/// CaptureWorker) at one moment, to be encoded as a snapshot
/// (EncodeWorkerSnapshot) later and on any thread: the copy is what index
/// writers wait for, the sorting and encoding are not. Owns its data and
/// refers to nothing in the index.
struct WorkerCapture {
  struct KeyTiers {
    BlockKey key;
    uint16_t tiers;  // bit i = ResidencyTier i
  };
  struct KeyRef {
    BlockKey key;
    int64_t group_idx;
    EngineHash hash;
  };

  std::string model;
  int64_t block_size = 0;
  WorkerState state = WorkerState::kLive;
  uint64_t key_probe = 0;  // the index's hasher fingerprint (index-snapshot.md)
  std::vector<KeyRef> refs;
  // Every resident key's tiers, in any order and possibly repeated, unless
  // `uniform` is set: then each ref names a resident key of its own, all
  // in these tiers, and `keys` is empty.
  std::vector<KeyTiers> keys;
  std::optional<uint16_t> uniform;
};

/// The capture as an index snapshot (docs/formats/index-snapshot.md):
/// sorts the capture's tables in place, so it takes them by value. Equal
/// residency gives equal bytes.
std::string EncodeWorkerSnapshot(WorkerCapture capture);

}  // namespace kvgov::index
