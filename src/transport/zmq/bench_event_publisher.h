#pragma once

// Benchmark support, never linked into kvgov: a real ZeroMQ publisher that
// sends pre-encoded engine payloads (kvgov::sim::EncodeEventBatch) the way
// vLLM frames them. Shared by the ingest benchmark (zmq_ingest_bench.cc
// here) and the HTTP route benchmark (src/server/route_http_bench.cc), so
// both drive kvgov through the same wire: docs/formats/engine-events.md §1.

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvgov::bench {

/// An engine's live event socket on loopback, as vLLM's publisher binds it:
/// frames [topic, seq (8 bytes, big-endian), payload]. It is an XPUB, which
/// speaks PUB's wire and also reports when a subscriber has joined, so
/// nothing is lost to ZeroMQ's slow-joiner window. The send high-water mark
/// is unlimited: a PUB drops messages at its mark, and a benchmark that
/// publishes faster than kvgov ingests must queue them, not lose them.
class EventPublisher {
 public:
  explicit EventPublisher(zmq::context_t& context) : socket_(context, zmq::socket_type::xpub) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, 0);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  }

  /// tcp://127.0.0.1:PORT, the form an EngineSpec takes.
  const std::string& endpoint() const { return endpoint_; }

  /// Waits for a subscription; false on timeout.
  bool WaitForSubscriber(std::chrono::milliseconds timeout) {
    std::array<zmq::pollitem_t, 1> items = {{{socket_.handle(), 0, ZMQ_POLLIN, 0}}};
    zmq::poll(items, timeout);
    if (!(items[0].revents & ZMQ_POLLIN)) return false;
    zmq::message_t subscription;
    (void)socket_.recv(subscription);
    return subscription.size() >= 1 && static_cast<const char*>(subscription.data())[0] == 1;
  }

  void Publish(uint64_t seq, std::string_view payload) {
    std::array<char, 8> seq_bytes{};
    for (size_t i = 0; i < seq_bytes.size(); ++i) {
      seq_bytes[i] = static_cast<char>(seq >> (56 - 8 * i));
    }
    // vLLM's default topic is empty.
    std::array<zmq::const_buffer, 3> frames = {zmq::const_buffer("", 0), zmq::buffer(seq_bytes),
                                               zmq::buffer(payload.data(), payload.size())};
    (void)zmq::send_multipart(socket_, frames);
  }

 private:
  zmq::socket_t socket_;
  std::string endpoint_;
};

}  // namespace kvgov::bench
