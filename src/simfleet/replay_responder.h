#pragma once

// The engine side of vLLM's replay protocol (docs/formats/engine-events.md
// §1.2), for kvgov's simulated engines and test publishers: read a request
// from a bound ROUTER socket, answer with every buffered batch from its
// start seq, then the end marker, in vLLM >= 0.26's framing (the topic frame
// in every reply). Internal to the simulated fleet and the tests: it speaks
// cppzmq, which public headers do not.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <zmq.hpp>

namespace kvgov::simfleet {

/// `seq` as 8 bytes, big-endian: the seq frame of a live or replayed batch.
std::string BigEndian64(uint64_t value);

struct ReplayRequest {
  std::string identity;  // the requesting DEALER, as the ROUTER names it
  uint64_t start_seq = 0;
};

/// Reads one request if one is waiting; nothing (and it is dropped, as vLLM
/// drops it) unless it is exactly [identity, "", 8-byte start seq].
std::optional<ReplayRequest> ReadReplayRequest(zmq::socket_t& router);

/// Sends `batches` (seq, payload), oldest first, and the end marker.
void AnswerReplay(zmq::socket_t& router, const ReplayRequest& request, std::string_view topic,
                  const std::vector<std::pair<uint64_t, std::string>>& batches);

}  // namespace kvgov::simfleet
