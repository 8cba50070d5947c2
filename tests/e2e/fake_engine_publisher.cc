#include "e2e/fake_engine_publisher.h"

#include <zmq_addon.hpp>

#include <cstdlib>
#include <numeric>

#include "kvgov/index/block_key.h"
#include "kvgov/sim/event_wire.h"
#include "simfleet/replay_responder.h"

namespace kvgov::testing {
using simfleet::BigEndian64;

FakeEnginePublisher::FakeEnginePublisher(int64_t block_size)
    : FakeEnginePublisher(block_size, "tcp://127.0.0.1:*", "tcp://127.0.0.1:*") {}

FakeEnginePublisher::FakeEnginePublisher(int64_t block_size, const std::string& events_bind,
                                         const std::string& replay_bind)
    : block_size_(block_size),
      pub_(context_, zmq::socket_type::xpub),
      next_hash_(0xF000000000000000) {
  pub_.set(zmq::sockopt::linger, 0);
  // Every subscriber's subscription comes through, not only the first, so
  // a test can wait for each of several kvgov replicas.
  pub_.set(zmq::sockopt::xpub_verbose, 1);
  pub_.bind(events_bind);
  events_endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
  // The ROUTER is bound here so its endpoint is known before the thread runs.
  auto router = std::make_shared<zmq::socket_t>(context_, zmq::socket_type::router);
  router->set(zmq::sockopt::linger, 0);
  router->bind(replay_bind);
  replay_endpoint_ = router->get(zmq::sockopt::last_endpoint);
  replay_thread_ = std::thread([this, router] {
    while (!stopping_) {
      std::array<zmq::pollitem_t, 1> items = {{{router->handle(), 0, ZMQ_POLLIN, 0}}};
      zmq::poll(items, std::chrono::milliseconds(50));
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      std::optional<simfleet::ReplayRequest> request = simfleet::ReadReplayRequest(*router);
      if (!request) continue;
      ++replay_requests_;
      if (replay_silent_) continue;
      std::vector<std::pair<uint64_t, std::string>> batches;
      {
        std::lock_guard lock(mu_);
        for (auto it = history_.lower_bound(request->start_seq); it != history_.end(); ++it) {
          batches.emplace_back(it->first, it->second);
        }
      }
      simfleet::AnswerReplay(*router, *request, "kv@fake", batches);
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

void FakeEnginePublisher::PublishEvent(EngineEvent event, Encoding encoding) {
  EngineEventBatch batch;
  batch.ts = ts_ += 1.0;
  batch.dp_rank = 0;
  batch.events.push_back(std::move(event));
  Result<std::string> payload = sim::EncodeEventBatch(
      batch, encoding == Encoding::kMapEvents ? sim::WireEncoding::kMap
                                              : sim::WireEncoding::kLegacyPositional);
  // The fixture builds only encodable events; anything else is a test bug.
  if (!payload.ok()) std::abort();
  Publish(std::move(payload).value());
}

std::vector<uint64_t> FakeEnginePublisher::Store(std::optional<uint64_t> parent, int blocks,
                                                 int64_t first_token) {
  BlockStored stored;
  for (int i = 0; i < blocks; ++i) stored.block_hashes.push_back(next_hash_++);
  stored.parent_block_hash = parent;
  stored.token_ids.resize(static_cast<size_t>(blocks * block_size_));
  std::iota(stored.token_ids.begin(), stored.token_ids.end(), first_token);
  stored.block_size = block_size_;
  stored.medium = "GPU";
  const std::vector<uint64_t> hashes = stored.block_hashes;
  PublishEvent(std::move(stored), encoding_);
  held_.insert(hashes.begin(), hashes.end());
  return hashes;
}

std::vector<uint64_t> FakeEnginePublisher::StoreSalted(const std::vector<int64_t>& tokens,
                                                       const std::string& cache_salt) {
  const size_t blocks = tokens.size() / static_cast<size_t>(block_size_);
  BlockStored stored;
  for (size_t i = 0; i < blocks; ++i) stored.block_hashes.push_back(next_hash_++);
  stored.token_ids.assign(tokens.begin(), tokens.begin() + static_cast<long>(blocks * block_size_));
  stored.block_size = block_size_;
  stored.medium = "GPU";
  stored.extra_keys.assign(blocks, "");
  if (blocks > 0) stored.extra_keys[0] = FirstBlockExtraKey("", cache_salt);
  const std::vector<uint64_t> hashes = stored.block_hashes;
  // Always the map encoding: extra_keys sits past lora_name.
  PublishEvent(std::move(stored), Encoding::kMapEvents);
  held_.insert(hashes.begin(), hashes.end());
  return hashes;
}

void FakeEnginePublisher::Remove(const std::vector<uint64_t>& hashes) {
  PublishEvent(BlockRemoved{.block_hashes = hashes, .medium = "GPU", .group_idx = 0}, encoding_);
  for (uint64_t hash : hashes) held_.erase(hash);
}

void FakeEnginePublisher::Clear() {
  PublishEvent(AllBlocksCleared{}, encoding_);
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

void FakeEnginePublisher::ForgetBefore(uint64_t seq) {
  std::lock_guard lock(mu_);
  history_.erase(history_.begin(), history_.lower_bound(seq));
}

void FakeEnginePublisher::Restart() {
  std::lock_guard lock(mu_);
  history_.clear();
  next_seq_ = 0;
  held_.clear();
  ts_ += 1000.0;  // a later process: its clock has moved on
}

}  // namespace kvgov::testing
