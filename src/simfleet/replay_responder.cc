#include "simfleet/replay_responder.h"

#include <zmq_addon.hpp>

#include <array>

namespace kvgov::simfleet {

std::string BigEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (56 - 8 * i));
  return bytes;
}

std::optional<ReplayRequest> ReadReplayRequest(zmq::socket_t& router) {
  std::vector<zmq::message_t> frames;
  if (!zmq::recv_multipart(router, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
    return std::nullopt;
  }
  if (frames.size() != 3 || frames[2].size() != 8) return std::nullopt;  // vLLM's rule
  ReplayRequest request;
  request.identity = frames[0].to_string();
  const auto* bytes = static_cast<const unsigned char*>(frames[2].data());
  for (int i = 0; i < 8; ++i) request.start_seq = (request.start_seq << 8) | bytes[i];
  return request;
}

void AnswerReplay(zmq::socket_t& router, const ReplayRequest& request, std::string_view topic,
                  const std::vector<std::pair<uint64_t, std::string>>& batches) {
  for (const auto& [seq, payload] : batches) {
    const std::string seq_bytes = BigEndian64(seq);
    std::array<zmq::const_buffer, 5> reply = {
        zmq::buffer(request.identity), zmq::const_buffer("", 0),
        zmq::buffer(topic.data(), topic.size()), zmq::buffer(seq_bytes), zmq::buffer(payload)};
    (void)zmq::send_multipart(router, reply);
  }
  const std::string end_marker = BigEndian64(~uint64_t{0});
  std::array<zmq::const_buffer, 4> end = {zmq::buffer(request.identity), zmq::const_buffer("", 0),
                                          zmq::buffer(end_marker), zmq::const_buffer("", 0)};
  (void)zmq::send_multipart(router, end);
}

}  // namespace kvgov::simfleet
