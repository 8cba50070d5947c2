#pragma once

// An invalidation directive's state, as the server drives it and the store,
// the replicated log and the API carry it (JSON: include/kvgov/codec/
// directive_record.h). Plain data; the rules that move it between states
// live with the server for now (docs/adr/0013).

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kvgov/index/block_key.h"

namespace kvgov::governance {

/// One owner's part of a directive.
struct OwnerProgress {
  std::string worker;
  std::string connector;  // vllm, sglang, ... ("" when the owner has none)
  std::string scope;      // what it did: exact_span or whole_prefix_cache
  bool degraded = false;
  std::string degrade_reason;
  int attempts = 0;
  int last_status = 0;
  std::string last_error;
  std::string state;  // planned, dispatched, acknowledged, witnessed, failed
  bool whole_worker = false;                // every block of the worker is a target
  std::set<index::BlockKey> pending;        // targets not yet seen removed
  uint64_t target_count = 0;
  int64_t dispatch_seq = -1;                // the worker's stream seq when dispatched
  std::vector<uint64_t> witness_seqs;       // the event seqs that showed the removal
  std::string witness_kind;                 // block_removed or all_blocks_cleared
};

/// An invalidation directive: planned over the residency index, dispatched
/// to each owning engine's control API, witnessed in the engine's own event
/// stream, then certified. States: planned -> dispatched -> acknowledged ->
/// witnessed -> certified, or failed with a reason (referee_denied,
/// owner_unreachable, witness_timeout).
struct Directive {
  std::string id;
  std::string state;
  std::string failure;
  std::string reason;
  std::string model;
  std::string tenant;   // whose span, when named by tokens under a tenant; "" otherwise
  std::string subject;  // 64 hex: what the certificate names
  std::string scope;    // exact_span or whole_prefix_cache, as asked
  uint64_t target_count = 0;
  std::vector<OwnerProgress> owners;
  std::string certificate_id;
  int64_t created_ms = 0;
  int64_t deadline_ms = 0;
};

}  // namespace kvgov::governance
