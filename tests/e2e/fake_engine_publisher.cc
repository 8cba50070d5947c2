#include "e2e/fake_engine_publisher.h"

#include <msgpack.hpp>
#include <zmq_addon.hpp>

#include <numeric>

namespace kvgov::testing {
namespace {

std::string BigEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (56 - 8 * i));
  return bytes;
}

using Packer = msgpack::packer<msgpack::sbuffer>;

// One event, in the encoding vLLM >= 0.26 uses (a map tagged by "type") or
// the legacy positional one ([tag, fields...], trailing defaults omitted).
class EventWriter {
 public:
  EventWriter(Packer& pk, bool map) : pk_(pk), map_(map) {}

  template <typename... Fields>
  void Write(const std::string& tag, const Fields&... fields) {
    if (map_) {
      pk_.pack_map(static_cast<uint32_t>(1 + sizeof...(Fields)));
      pk_.pack(std::string("type"));
      pk_.pack(tag);
      (WriteNamed(fields), ...);
    } else {
      pk_.pack_array(static_cast<uint32_t>(1 + sizeof...(Fields)));
      pk_.pack(tag);
      (WritePositional(fields), ...);
    }
  }

 private:
  template <typename T>
  void WriteNamed(const std::pair<const char*, T>& field) {
    pk_.pack(std::string(field.first));
    Value(field.second);
  }
  template <typename T>
  void WritePositional(const std::pair<const char*, T>& field) {
    Value(field.second);
  }
  template <typename T>
  void Value(const T& value) {
    if constexpr (std::is_same_v<T, std::optional<uint64_t>>) {
      if (value) {
        pk_.pack(*value);
      } else {
        pk_.pack_nil();
      }
    } else {
      pk_.pack(value);
    }
  }

  Packer& pk_;
  bool map_;
};

}  // namespace

FakeEnginePublisher::FakeEnginePublisher(int64_t block_size)
    : block_size_(block_size), pub_(context_, zmq::socket_type::xpub), next_hash_(0xF000000000000000) {
  pub_.set(zmq::sockopt::linger, 0);
  pub_.bind("tcp://127.0.0.1:*");
  events_endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
  // The ROUTER is bound here so its endpoint is known before the thread runs.
  auto router = std::make_shared<zmq::socket_t>(context_, zmq::socket_type::router);
  router->set(zmq::sockopt::linger, 0);
  router->bind("tcp://127.0.0.1:*");
  replay_endpoint_ = router->get(zmq::sockopt::last_endpoint);
  replay_thread_ = std::thread([this, router] {
    while (!stopping_) {
      std::array<zmq::pollitem_t, 1> items = {{{router->handle(), 0, ZMQ_POLLIN, 0}}};
      zmq::poll(items, std::chrono::milliseconds(50));
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> request;
      (void)zmq::recv_multipart(*router, std::back_inserter(request));
      if (request.size() != 3 || request[2].size() != 8) continue;  // vLLM's rule
      uint64_t start = 0;
      const auto* bytes = static_cast<const unsigned char*>(request[2].data());
      for (int i = 0; i < 8; ++i) start = (start << 8) | bytes[i];
      std::vector<std::pair<uint64_t, std::string>> batches;
      {
        std::lock_guard lock(mu_);
        for (auto it = history_.lower_bound(start); it != history_.end(); ++it) {
          batches.emplace_back(it->first, it->second);
        }
      }
      const std::string identity = request[0].to_string();
      for (const auto& [seq, payload] : batches) {
        // Replies carry the topic, as vLLM >= 0.26 sends them.
        const std::string seq_bytes = BigEndian64(seq);
        std::array<zmq::const_buffer, 5> reply = {zmq::buffer(identity), zmq::const_buffer("", 0),
                                                  zmq::str_buffer("kv@fake"),
                                                  zmq::buffer(seq_bytes), zmq::buffer(payload)};
        zmq::send_multipart(*router, reply);
      }
      const std::string end_marker = BigEndian64(~uint64_t{0});
      std::array<zmq::const_buffer, 4> end = {zmq::buffer(identity), zmq::const_buffer("", 0),
                                              zmq::buffer(end_marker), zmq::const_buffer("", 0)};
      zmq::send_multipart(*router, end);
    }
  });
}

bool FakeEnginePublisher::WaitForSubscriber(std::chrono::milliseconds timeout) {
  std::array<zmq::pollitem_t, 1> items = {{{pub_.handle(), 0, ZMQ_POLLIN, 0}}};
  zmq::poll(items, timeout);
  if (!(items[0].revents & ZMQ_POLLIN)) return false;
  zmq::message_t subscription;
  (void)pub_.recv(subscription);
  return subscription.size() >= 1 && static_cast<const char*>(subscription.data())[0] == 1;
}

FakeEnginePublisher::~FakeEnginePublisher() {
  stopping_ = true;
  if (replay_thread_.joinable()) replay_thread_.join();
}


void FakeEnginePublisher::Publish(std::string payload) {
  const uint64_t seq = next_seq_++;
  {
    std::lock_guard lock(mu_);
    history_[seq] = payload;
  }
  if (drop_next_) {
    drop_next_ = false;
    return;
  }
  const std::string seq_bytes = BigEndian64(seq);
  std::array<zmq::const_buffer, 3> frames = {zmq::str_buffer("kv@fake"), zmq::buffer(seq_bytes),
                                             zmq::buffer(payload)};
  zmq::send_multipart(pub_, frames);
}

std::vector<uint64_t> FakeEnginePublisher::Store(std::optional<uint64_t> parent, int blocks,
                                                 int64_t first_token) {
  std::vector<uint64_t> hashes;
  for (int i = 0; i < blocks; ++i) hashes.push_back(next_hash_++);
  std::vector<int64_t> tokens(static_cast<size_t>(blocks * block_size_));
  std::iota(tokens.begin(), tokens.end(), first_token);

  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pk.pack_array(3);
  pk.pack(ts_ += 1.0);
  pk.pack_array(1);
  EventWriter(pk, encoding_ == Encoding::kMapEvents)
      .Write("BlockStored", std::pair{"block_hashes", hashes},
             std::pair{"parent_block_hash", parent}, std::pair{"token_ids", tokens},
             std::pair{"block_size", block_size_}, std::pair{"lora_id", std::optional<uint64_t>()},
             std::pair{"medium", std::string("GPU")});
  pk.pack(0);
  Publish(std::string(buffer.data(), buffer.size()));
  held_.insert(hashes.begin(), hashes.end());
  return hashes;
}

std::vector<uint64_t> FakeEnginePublisher::StoreSalted(const std::vector<int64_t>& tokens,
                                                       const std::string& cache_salt) {
  const size_t blocks = tokens.size() / static_cast<size_t>(block_size_);
  std::vector<uint64_t> hashes;
  for (size_t i = 0; i < blocks; ++i) hashes.push_back(next_hash_++);
  std::vector<int64_t> full(tokens.begin(),
                            tokens.begin() + static_cast<long>(blocks * block_size_));

  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pk.pack_array(3);
  pk.pack(ts_ += 1.0);
  pk.pack_array(1);
  pk.pack_map(7);  // always the map encoding: extra_keys sits past lora_name
  pk.pack(std::string("type"));
  pk.pack(std::string("BlockStored"));
  pk.pack(std::string("block_hashes"));
  pk.pack(hashes);
  pk.pack(std::string("parent_block_hash"));
  pk.pack_nil();
  pk.pack(std::string("token_ids"));
  pk.pack(full);
  pk.pack(std::string("block_size"));
  pk.pack(block_size_);
  pk.pack(std::string("medium"));
  pk.pack(std::string("GPU"));
  pk.pack(std::string("extra_keys"));
  pk.pack_array(static_cast<uint32_t>(blocks));
  for (size_t i = 0; i < blocks; ++i) {
    if (i == 0) {
      pk.pack_array(1);
      pk.pack(cache_salt);
    } else {
      pk.pack_nil();
    }
  }
  pk.pack(0);
  Publish(std::string(buffer.data(), buffer.size()));
  held_.insert(hashes.begin(), hashes.end());
  return hashes;
}

void FakeEnginePublisher::Remove(const std::vector<uint64_t>& hashes) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pk.pack_array(3);
  pk.pack(ts_ += 1.0);
  pk.pack_array(1);
  EventWriter(pk, encoding_ == Encoding::kMapEvents)
      .Write("BlockRemoved", std::pair{"block_hashes", hashes},
             std::pair{"medium", std::string("GPU")});
  pk.pack(0);
  Publish(std::string(buffer.data(), buffer.size()));
  for (uint64_t hash : hashes) held_.erase(hash);
}

void FakeEnginePublisher::Clear() {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pk.pack_array(3);
  pk.pack(ts_ += 1.0);
  pk.pack_array(1);
  EventWriter(pk, encoding_ == Encoding::kMapEvents).Write("AllBlocksCleared");
  pk.pack(0);
  Publish(std::string(buffer.data(), buffer.size()));
  held_.clear();
}

void FakeEnginePublisher::Resend(uint64_t seq) {
  std::string payload;
  {
    std::lock_guard lock(mu_);
    payload = history_.at(seq);
  }
  const std::string seq_bytes = BigEndian64(seq);
  std::array<zmq::const_buffer, 3> frames = {zmq::str_buffer("kv@fake"), zmq::buffer(seq_bytes),
                                             zmq::buffer(payload)};
  zmq::send_multipart(pub_, frames);
}

void FakeEnginePublisher::SendGarbage() { Publish("\xc1\xc1 not msgpack"); }

void FakeEnginePublisher::Restart() {
  std::lock_guard lock(mu_);
  history_.clear();
  next_seq_ = 0;
  held_.clear();
  ts_ += 1000.0;  // a later process: its clock has moved on
}

}  // namespace kvgov::testing
