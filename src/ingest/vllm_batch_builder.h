#pragma once

// Test support: vLLM event batches as engines publish them, for the tests
// of the streams and of their durability.

#include <msgpack.hpp>

#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvgov::ingest {

// A vLLM batch in the legacy positional encoding:
// [ts, [[tag, fields...], ...], dp_rank].
template <int64_t kBlockSize>
class VllmBatchBuilder {
 public:
  explicit VllmBatchBuilder(double ts) : ts_(ts) {}

  VllmBatchBuilder& Stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent,
                           int64_t first_token) {
    std::vector<int64_t> tokens(hashes.size() * kBlockSize);
    std::iota(tokens.begin(), tokens.end(), first_token);
    events_.push_back([hashes = std::move(hashes), parent,
                       tokens = std::move(tokens)](msgpack::packer<msgpack::sbuffer>& pk) {
      pk.pack_array(7);
      pk.pack(std::string("BlockStored"));
      pk.pack(hashes);
      if (parent) {
        pk.pack(*parent);
      } else {
        pk.pack_nil();
      }
      pk.pack(tokens);
      pk.pack(kBlockSize);
      pk.pack_nil();  // lora_id
      pk.pack(std::string("GPU"));
    });
    return *this;
  }
  VllmBatchBuilder& Removed(std::vector<uint64_t> hashes) {
    events_.push_back([hashes = std::move(hashes)](msgpack::packer<msgpack::sbuffer>& pk) {
      pk.pack_array(3);
      pk.pack(std::string("BlockRemoved"));
      pk.pack(hashes);
      pk.pack(std::string("GPU"));
    });
    return *this;
  }
  VllmBatchBuilder& Cleared() {
    events_.push_back([](msgpack::packer<msgpack::sbuffer>& pk) {
      pk.pack_array(1);
      pk.pack(std::string("AllBlocksCleared"));
    });
    return *this;
  }
  std::string Bytes() const {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    pk.pack_array(3);
    pk.pack(ts_);
    pk.pack_array(static_cast<uint32_t>(events_.size()));
    for (const auto& event : events_) event(pk);
    pk.pack(0);
    return std::string(buffer.data(), buffer.size());
  }

 private:
  double ts_;
  std::vector<std::function<void(msgpack::packer<msgpack::sbuffer>&)>> events_;
};

}  // namespace kvgov::ingest
