#include "kvgov/log/log.h"
#include "kvgov/transport/zmq_ingest.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "kvgov/core/mutex.h"

namespace kvgov::transport {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr uint64_t kReplayEndMarker = ~uint64_t{0};  // seq -1 as signed

uint64_t ReadBigEndian64(const zmq::message_t& frame) {
  const auto* bytes = static_cast<const unsigned char*>(frame.data());
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i) value = (value << 8) | bytes[i];
  return value;
}

std::string BigEndian64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(value >> (56 - 8 * i));
  return bytes;
}

// Replay over a DEALER opened for one request, so replies to an abandoned
// request can never be mistaken for the next one's.
class ZmqReplaySource : public ingest::ReplaySource {
 public:
  ZmqReplaySource(zmq::context_t* context, std::string endpoint, ReplayLimits limits)
      : context_(context), endpoint_(std::move(endpoint)), limits_(limits) {}

  Status Replay(uint64_t start_seq,
                const std::function<void(uint64_t, std::string_view)>& on_batch) override {
    try {
      zmq::socket_t dealer(*context_, zmq::socket_type::dealer);
      dealer.set(zmq::sockopt::linger, 0);
      dealer.connect(endpoint_);
      std::string start = BigEndian64(start_seq);
      std::array<zmq::const_buffer, 2> request = {zmq::const_buffer("", 0), zmq::buffer(start)};
      if (!zmq::send_multipart(dealer, request)) {
        return Status::Unavailable("replay " + endpoint_ + ": request not sent");
      }
      const auto deadline = Clock::now() + limits_.total_timeout;
      for (uint64_t received = 0; received <= limits_.max_batches;) {
        const auto now = Clock::now();
        if (now >= deadline) return Status::Unavailable("replay " + endpoint_ + ": timed out");
        auto wait = std::min<Clock::duration>(limits_.idle_timeout, deadline - now);
        std::array<zmq::pollitem_t, 1> items = {{{dealer.handle(), 0, ZMQ_POLLIN, 0}}};
        zmq::poll(items, std::chrono::duration_cast<std::chrono::milliseconds>(wait));
        if (!(items[0].revents & ZMQ_POLLIN)) {
          return Status::Unavailable("replay " + endpoint_ + ": no reply within " +
                                     std::to_string(limits_.idle_timeout.count()) + " ms");
        }
        std::vector<zmq::message_t> frames;
        (void)zmq::recv_multipart(dealer, std::back_inserter(frames));
        // ["", seq, payload] from older engines, ["", topic, seq, payload]
        // since vLLM 0.26.
        if (frames.size() != 3 && frames.size() != 4) continue;
        const zmq::message_t& seq_frame = frames[frames.size() - 2];
        const zmq::message_t& payload = frames.back();
        if (seq_frame.size() != 8) continue;
        const uint64_t seq = ReadBigEndian64(seq_frame);
        if (seq == kReplayEndMarker && payload.empty()) return Status::Ok();
        on_batch(seq, std::string_view(static_cast<const char*>(payload.data()), payload.size()));
        ++received;
      }
      return Status::ResourceExhausted("replay " + endpoint_ + ": more than " +
                                       std::to_string(limits_.max_batches) + " batches");
    } catch (const zmq::error_t& error) {
      return Status::Unavailable("replay " + endpoint_ + ": " + error.what());
    }
  }

 private:
  zmq::context_t* context_;
  std::string endpoint_;
  ReplayLimits limits_;
};

struct Stream {
  ingest::StreamSpec spec;
  ingest::EngineKind kind;
  std::unique_ptr<ZmqReplaySource> replay;
  std::unique_ptr<ingest::EngineStream> stream;
  std::thread thread;
};

// A catch-up at the handshake can answer before the engine has taken the
// subscription, and a batch published in that window reaches neither the
// replay answer nor this socket. One more catch-up once the subscription has
// surely arrived closes it, unless a live batch already showed where the
// stream stands (read, or queued to be read).
constexpr auto kSettle = std::chrono::milliseconds(300);

uint16_t MonitorEvent(const zmq::message_t& frame) {
  uint16_t event = 0;
  if (frame.size() >= sizeof(event)) std::memcpy(&event, frame.data(), sizeof(event));
  return event;
}

void RunStream(zmq::context_t& context, Stream& stream, const std::atomic<bool>& stopping,
               size_t stream_number) {
  zmq::socket_t sub(context, zmq::socket_type::sub);
  zmq::socket_t monitor(context, zmq::socket_type::pair);
  try {
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::subscribe, "");
    // Every (re)connection to the engine is a point where kvgov may have
    // missed batches: the monitor tells the stream when one completes.
    const std::string monitor_endpoint =
        "inproc://kvgov-ingest-monitor-" + std::to_string(stream_number);
    if (zmq_socket_monitor(sub.handle(), monitor_endpoint.c_str(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED) !=
        0) {
      throw zmq::error_t();
    }
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(monitor_endpoint);
    sub.connect(stream.spec.events);
  } catch (const zmq::error_t& error) {
    log::Line(log::Level::kError, "stream.subscribe_failed")
        .Field("worker", stream.spec.worker)
        .Field("endpoint", stream.spec.events)
        .Field("error", error.what());
    // GET /v1/workers shows it: without it the worker would look like an
    // engine nobody has sent work to.
    stream.stream->OnSubscribeFailed("cannot subscribe to " + stream.spec.events + ": " +
                                     error.what());
    return;
  }
  std::vector<zmq::message_t> frames;
  constexpr Clock::time_point kNoSettle = Clock::time_point::max();
  Clock::time_point settle_at = kNoSettle;
  uint64_t live_messages = 0;
  uint64_t live_at_catch_up = 0;
  auto catch_up = [&] {
    (void)stream.stream->CatchUp();
    live_at_catch_up = live_messages;
  };
  while (!stopping.load(std::memory_order_relaxed)) {
    try {
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(kPollInterval);
      if (settle_at != kNoSettle) {
        wait = std::clamp(
            std::chrono::duration_cast<std::chrono::milliseconds>(settle_at - Clock::now()),
            std::chrono::milliseconds(0), wait);
      }
      std::array<zmq::pollitem_t, 2> items = {
          {{monitor.handle(), 0, ZMQ_POLLIN, 0}, {sub.handle(), 0, ZMQ_POLLIN, 0}}};
      zmq::poll(items, wait);
      if (items[0].revents & ZMQ_POLLIN) {
        frames.clear();
        (void)zmq::recv_multipart(monitor, std::back_inserter(frames));
        if (!frames.empty() && MonitorEvent(frames[0]) == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
          catch_up();
          settle_at = Clock::now() + kSettle;
        }
      }
      if (settle_at != kNoSettle && Clock::now() >= settle_at) {
        settle_at = kNoSettle;
        // A live batch read or waiting to be read shows where the stream
        // stands; replaying under it would only redeliver it.
        const bool live_waiting = (sub.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
        if (live_messages == live_at_catch_up && !live_waiting) catch_up();
      }
      if (!(items[1].revents & ZMQ_POLLIN)) continue;
      // Everything already queued is taken without polling again: a poll is
      // a system call, and a stream that keeps up never waits between
      // messages anyway.
      while (!stopping.load(std::memory_order_relaxed)) {
        frames.clear();
        if (!zmq::recv_multipart(sub, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          break;
        }
        ++live_messages;
        if (frames.size() != 3 || frames[1].size() != 8) {
          stream.stream->OnBadFraming("want 3 frames [topic, 8-byte seq, payload], got " +
                                      std::to_string(frames.size()) + " frames");
          continue;
        }
        stream.stream->OnMessage(
            ReadBigEndian64(frames[1]),
            std::string_view(static_cast<const char*>(frames[2].data()), frames[2].size()));
      }
    } catch (const zmq::error_t& error) {
      if (error.num() == ETERM) return;
      log::Line(log::Level::kError, "stream.socket_error")
          .Field("worker", stream.spec.worker)
          .Field("error", error.what());
    }
  }
}

}  // namespace

struct ZmqIngest::Impl {
  index::ResidencyIndex* index;
  ingest::EntrySink sink;
  ReplayLimits limits;
  ingest::StreamDurability* durability;
  RecoverFn recover;
  ingest::StreamObserver observer;
  zmq::context_t context{1};
  std::atomic<bool> stopping{false};
  mutable Mutex mu;
  std::vector<std::unique_ptr<Stream>> streams KVGOV_GUARDED_BY(mu);
};

ZmqIngest::ZmqIngest(index::ResidencyIndex* index, ingest::EntrySink sink, ReplayLimits limits,
                     ingest::StreamDurability* durability, RecoverFn recover,
                     ingest::StreamObserver observer)
    : impl_(std::make_unique<Impl>()) {
  impl_->index = index;
  impl_->sink = std::move(sink);
  impl_->limits = limits;
  impl_->durability = durability;
  impl_->recover = std::move(recover);
  impl_->observer = std::move(observer);
}

ZmqIngest::~ZmqIngest() { Stop(); }

Status ZmqIngest::AddEngine(const ingest::EngineSpec& engine) {
  return AddEngines(std::span(&engine, 1));
}

Status ZmqIngest::AddEngines(std::span<const ingest::EngineSpec> engines) {
  MutexLock lock(impl_->mu);
  if (impl_->stopping) return Status::FailedPrecondition("ingest is stopping");
  // Every worker registered and every stream built before any recovers.
  std::vector<std::unique_ptr<Stream>> added;
  std::vector<const ingest::EngineSpec*> engine_of;  // by stream in `added`
  for (const ingest::EngineSpec& engine : engines) {
    const std::string context = "engine '" + engine.id + "'";
    Result<std::vector<ingest::StreamSpec>> specs = ingest::StreamsFor(engine);
    KVGOV_RETURN_IF_ERROR(specs.status().WithContext(context));
    for (const ingest::StreamSpec& spec : *specs) {
      KVGOV_RETURN_IF_ERROR(impl_->index
                                ->AddWorker(spec.worker, engine.model, engine.block_size,
                                            static_cast<uint64_t>(engine.pool_blocks))
                                .WithContext(context));
    }
    for (const ingest::StreamSpec& spec : *specs) {
      auto stream = std::make_unique<Stream>();
      stream->spec = spec;
      stream->kind = engine.kind;
      if (!spec.replay.empty()) {
        stream->replay =
            std::make_unique<ZmqReplaySource>(&impl_->context, spec.replay, impl_->limits);
      }
      stream->stream = std::make_unique<ingest::EngineStream>(spec.worker, engine.kind,
                                                              impl_->index, stream->replay.get(),
                                                              impl_->sink, impl_->durability);
      stream->stream->set_observer(impl_->observer);
      added.push_back(std::move(stream));
      engine_of.push_back(&engine);
    }
  }
  if (impl_->recover) {
    // One thread per core at most: a restore is CPU and memory bound, and
    // the index applies each worker's holder words under its lock anyway.
    std::vector<Status> recovered(added.size());
    std::atomic<size_t> next{0};
    auto recover_some = [&] {
      for (size_t i = next++; i < added.size(); i = next++) {
        recovered[i] = impl_->recover(*added[i]->stream);
      }
    };
    const size_t threads =
        std::min<size_t>(added.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> helpers;
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(recover_some);
    recover_some();
    for (std::thread& helper : helpers) helper.join();
    for (size_t i = 0; i < added.size(); ++i) {
      KVGOV_RETURN_IF_ERROR(recovered[i]
                                .WithContext("recovering " + added[i]->spec.worker)
                                .WithContext("engine '" + engine_of[i]->id + "'"));
    }
  }
  for (std::unique_ptr<Stream>& stream : added) {
    Stream* raw = stream.get();
    const size_t number = impl_->streams.size();
    raw->thread = std::thread(
        [this, raw, number] { RunStream(impl_->context, *raw, impl_->stopping, number); });
    impl_->streams.push_back(std::move(stream));
  }
  return Status::Ok();
}

std::vector<StreamView> ZmqIngest::Streams() const {
  MutexLock lock(impl_->mu);
  std::vector<StreamView> views;
  for (const auto& stream : impl_->streams) {
    views.push_back({stream->spec.worker, stream->kind, stream->spec.events, stream->spec.replay,
                     &stream->stream->stats()});
  }
  return views;
}

void ZmqIngest::Stop() {
  std::vector<std::unique_ptr<Stream>>* streams = nullptr;
  {
    MutexLock lock(impl_->mu);
    if (impl_->stopping.exchange(true)) return;
    streams = &impl_->streams;
  }
  // Joined without mu, which Streams keeps taking meanwhile: once stopping
  // is set under mu, AddEngines adds no stream, so the vector stays as it is.
  for (auto& stream : *streams) {
    if (stream->thread.joinable()) stream->thread.join();
  }
}

}  // namespace kvgov::transport
