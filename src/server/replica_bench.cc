// Replicas (docs/adr/0011-replicated-governance-log.md), measured over HTTP
// against the real daemon (kvgov::server::Server, in process, port 0,
// temporary data dirs) in three shapes, side by side in one run:
//   replicas:0  a single node, no Redis (governance writes go to its journal);
//   replicas:1  one replica on Redis Streams;
//   replicas:3  three replicas on one Redis log, sharing the key files.
// One real redis-server (kvgov_test_support) serves the run. All five
// servers run at once and follow the same 4 engines (one vLLM-framed
// publisher each on loopback, payloads from the simulator's wire encoder,
// ~1.8 k resident blocks per worker, each system prompt held by two
// workers). The shapes are measured interleaved, so each sees the same host
// (on a shared machine the disk's fsync latency and the spare CPU move a lot
// from one second to the next):
//  - governance writes: 300 rounds of one POST /v1/quarantine per shape
//    (shapes in rotating order; each write a distinct 4-block span no
//    worker holds; round-robin over a shape's servers, one kept-alive
//    connection per server); p50/p99 of the call. With 3 replicas, after
//    each write the other two are polled (GET /v1/journal?since=N&limit=1)
//    until their journal head reaches the write's row: "visible on all"
//    p50/p99, timed from the write's start (the polls' own HTTP round trips
//    included, so an upper bound), and the share of writes both others
//    already held at the first poll.
//  - routes: 6 rounds of a 0.5 s slice per shape (rotating order): 4 client
//    threads (spread over the shape's servers), each POST /v1/route a
//    2,048-token prompt (16 prompts, rotating) then POST its /done (untimed,
//    as routers release decisions); routes/s over all clients and the route
//    call's p50/p99. Clients and servers share the machine's cores.
// The first row to run measures all three shapes (about 15 s); each row
// reports its own. Checks: every server's journal ends at the same head
// seq and hash, and nothing but the benchmark's writes moved it.
//   cmake --build build-bench --target kvgov_replica_bench
//   build-bench/src/server/kvgov_replica_bench

#include <unistd.h>

#include <httplib.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <latch>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "testing/bench_smoke.h"
#include "kvgov/cert/issuer_key.h"
#include "kvgov/server/server.h"
#include "kvgov/sim/event_wire.h"
#include "testing/redis_server_process.h"
#include "testing/scratch_dir.h"
#include "testing/percentile.h"
#include "kvgov/auth/tenant_secret.h"

namespace kvgov::server {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr int kWorkers = 4;
constexpr int64_t kBlockSize = 16;
constexpr int kSystemPrompts = 4;
constexpr int kSystemBlocks = 64;
constexpr int kConversations = 48;  // per worker
constexpr int kConversationBlocks = 32;
constexpr int kPrompts = 16;
constexpr int kPromptTailBlocks = 64;  // a prompt: system prompt + 64 blocks (2,048 tokens)
constexpr int kDeepBlocks = 32;        // of a prompt's tail, what its deep holder holds
constexpr int64_t kVocab = 128256;
constexpr size_t kEventsPerBatch = 4;

constexpr int kWarmupWrites = 10;
const int kWrites = bench::Sized(300, 20);
constexpr int kQuarantineTokens = 4 * kBlockSize;
constexpr int kRouteClients = 4;
constexpr int kWarmupRoutes = 20;
const int kRouteRounds = bench::Sized(6, 1);  // x 0.5 s: 3 s of routes per shape
constexpr auto kRouteSlice = std::chrono::milliseconds(500);
constexpr auto kDeadline = std::chrono::seconds(60);

double Millis(Clock::duration elapsed) {
  return std::chrono::duration<double, std::milli>(elapsed).count();
}

std::string WorkerId(int worker) { return "w" + std::to_string(worker); }

std::vector<int64_t> RandomTokens(uint64_t seed, size_t count) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
  std::vector<int64_t> tokens(count);
  for (int64_t& t : tokens) t = token(rng);
  return tokens;
}

std::vector<int64_t> SystemPrompt(int prompt) {
  return RandomTokens(1000 + static_cast<uint64_t>(prompt),
                      static_cast<size_t>(kSystemBlocks * kBlockSize));
}

// Prompt p: system prompt p % 4, then its own 64 blocks.
std::vector<int64_t> Prompt(int prompt) {
  std::vector<int64_t> tokens = SystemPrompt(prompt % kSystemPrompts);
  const std::vector<int64_t> tail = RandomTokens(
      5000 + static_cast<uint64_t>(prompt), static_cast<size_t>(kPromptTailBlocks * kBlockSize));
  tokens.insert(tokens.end(), tail.begin(), tail.end());
  return tokens;
}

// What worker w's engine stored, in order, and how many blocks: system
// prompts w and w+1 (so two workers hold each), the first 32 blocks of the
// tails of the prompts opening with system prompt w, and conversations,
// three in four under one of its system prompts.
struct WorkerCache {
  std::vector<BlockStored> events;
  uint64_t blocks = 0;
};

WorkerCache WorkerEvents(int worker) {
  std::mt19937_64 rng(0x5eed0000 + static_cast<uint64_t>(worker));
  WorkerCache cache;
  auto store = [&](std::span<const int64_t> tokens, std::optional<EngineHash> parent) {
    BlockStored stored;
    stored.block_size = kBlockSize;
    stored.medium = "GPU";
    stored.parent_block_hash = parent;
    stored.token_ids.assign(tokens.begin(), tokens.end());
    const size_t blocks = tokens.size() / static_cast<size_t>(kBlockSize);
    for (size_t b = 0; b < blocks; ++b) stored.block_hashes.push_back(rng());
    cache.blocks += blocks;
    cache.events.push_back(std::move(stored));
    return cache.events.back().block_hashes.back();
  };
  std::vector<EngineHash> tails;
  for (int s : {worker % kSystemPrompts, (worker + 1) % kSystemPrompts}) {
    tails.push_back(store(SystemPrompt(s), std::nullopt));
  }
  for (int p = worker % kSystemPrompts; p < kPrompts; p += kSystemPrompts) {
    const std::vector<int64_t> prompt = Prompt(p);
    const auto begin = prompt.begin() + kSystemBlocks * kBlockSize;
    store(std::span<const int64_t>(begin, begin + kDeepBlocks * kBlockSize), tails[0]);
  }
  for (int c = 0; c < kConversations; ++c) {
    const std::vector<int64_t> tokens =
        RandomTokens(rng(), static_cast<size_t>(kConversationBlocks * kBlockSize));
    std::optional<EngineHash> parent;
    if (rng() % 4 != 0) parent = tails[rng() % tails.size()];
    store(tokens, parent);
  }
  return cache;
}

std::vector<std::string> EncodeWorker(const WorkerCache& cache) {
  std::vector<std::string> payloads;
  EngineEventBatch batch;
  batch.ts = 1.79e9;
  batch.dp_rank = 0;
  for (size_t i = 0; i < cache.events.size(); i += kEventsPerBatch) {
    const size_t count = std::min(kEventsPerBatch, cache.events.size() - i);
    batch.ts += 0.01;
    batch.events.assign(cache.events.begin() + static_cast<std::ptrdiff_t>(i),
                        cache.events.begin() + static_cast<std::ptrdiff_t>(i + count));
    // Only extra keys can fail to encode, and these events carry none.
    payloads.push_back(sim::EncodeEventBatch(batch, sim::WireEncoding::kMap).value());
  }
  return payloads;
}

// An engine's live event socket, framed as vLLM frames it. Unlike
// bench::EventPublisher it reports every subscription (XPUB_VERBOSE), so
// several daemons following one engine can each be waited for.
class Publisher {
 public:
  explicit Publisher(zmq::context_t& context) : socket_(context, zmq::socket_type::xpub) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, 0);
    socket_.set(zmq::sockopt::xpub_verbose, 1);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
  }

  const std::string& endpoint() const { return endpoint_; }

  bool WaitForSubscribers(int count, Clock::time_point deadline) {
    int seen = 0;
    while (seen < count) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      std::array<zmq::pollitem_t, 1> items = {{{socket_.handle(), 0, ZMQ_POLLIN, 0}}};
      zmq::poll(items, left);
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      zmq::message_t message;
      if (!socket_.recv(message)) continue;
      if (message.size() >= 1 && static_cast<const char*>(message.data())[0] == 1) ++seen;
    }
    return true;
  }

  void Publish(uint64_t seq, std::string_view payload) {
    std::array<char, 8> seq_bytes{};
    for (size_t i = 0; i < seq_bytes.size(); ++i) {
      seq_bytes[i] = static_cast<char>(seq >> (56 - 8 * i));
    }
    std::array<zmq::const_buffer, 3> frames = {zmq::const_buffer("", 0), zmq::buffer(seq_bytes),
                                               zmq::buffer(payload.data(), payload.size())};
    (void)zmq::send_multipart(socket_, frames);
  }

 private:
  zmq::socket_t socket_;
  std::string endpoint_;
};

std::unique_ptr<httplib::Client> Connect(uint16_t port) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  client->set_read_timeout(30, 0);
  return client;
}

std::string Describe(const httplib::Result& response, std::string_view what) {
  if (!response) return std::string(what) + ": " + httplib::to_string(response.error());
  return std::string(what) + ": " + std::to_string(response->status) + " " +
         response->body.substr(0, 200);
}

// The shapes measured, each a group of servers following the same engines:
// replicas 0 is one server without Redis.
struct Shape {
  int replicas = 0;
  std::vector<std::unique_ptr<Server>> servers;
  std::string Name() const {
    return replicas == 0 ? "single node" : std::to_string(replicas) + " replica(s)";
  }
};

// Every shape at once, so that writes and routes can be interleaved across
// them and each sees the same host. Members are destroyed bottom up:
// servers first, then the publishers, then their context, then the dirs.
class Deployment {
 public:
  Deployment() = default;
  Deployment(const Deployment&) = delete;
  Deployment& operator=(const Deployment&) = delete;
  ~Deployment() {
    for (Shape& shape : shapes_) {
      for (auto& server : shape.servers) server->Shutdown();
    }
    shapes_.clear();
    publishers_.clear();
  }

  // `redis_url` empty: the shapes with replicas are left out.
  Status Start(const std::vector<int>& replicas, const std::string& redis_url) {
    root_ = scratch_.emplace("kvgov_replica_bench").path();
    // The files replicas share; the single node uses them too.
    const std::string issuer_key = (root_ / "issuer.key").string();
    const std::string tenant_secret = (root_ / "tenant-secret.key").string();
    KVGOV_RETURN_IF_ERROR(cert::IssuerKey::LoadOrCreate(issuer_key).status());
    KVGOV_RETURN_IF_ERROR(auth::LoadOrCreateTenantSecret(tenant_secret).status());

    std::vector<ingest::EngineSpec> engines;
    for (int w = 0; w < kWorkers; ++w) {
      publishers_.push_back(std::make_unique<Publisher>(context_));
      ingest::EngineSpec engine;
      engine.id = WorkerId(w);
      engine.events = publishers_.back()->endpoint();
      engine.model = "llama";
      engine.block_size = kBlockSize;
      engines.push_back(std::move(engine));
    }
    int followers = 0;
    for (int count : replicas) {
      if (count > 0 && redis_url.empty()) continue;
      Shape shape;
      shape.replicas = count;
      const std::string name = "shape" + std::to_string(shapes_.size());
      for (int i = 0; i < std::max(1, count); ++i) {
        ServerOptions options;
        options.port = 0;
        options.data_dir = (root_ / name / ("node" + std::to_string(i))).string();
        options.engines = engines;
        options.issuer_key_file = issuer_key;
        options.tenant_secret_file = tenant_secret;
        if (count > 0) {
          options.redis_url = redis_url;
          options.redis_prefix = "kvgov-bench-" + std::to_string(::getpid()) + "-" + name;
          options.replica_id = name + "-replica" + std::to_string(i);
        }
        KVGOV_ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::Start(options));
        shape.servers.push_back(std::move(server));
        ++followers;
      }
      shapes_.push_back(std::move(shape));
    }

    const auto deadline = Clock::now() + kDeadline;
    for (auto& publisher : publishers_) {
      if (!publisher->WaitForSubscribers(followers, deadline)) {
        return Status::Unavailable("an engine's stream was not followed by every server");
      }
    }
    std::vector<uint64_t> blocks;
    for (int w = 0; w < kWorkers; ++w) {
      const WorkerCache cache = WorkerEvents(w);
      blocks.push_back(cache.blocks);
      const std::vector<std::string> payloads = EncodeWorker(cache);
      for (size_t seq = 0; seq < payloads.size(); ++seq) {
        publishers_[static_cast<size_t>(w)]->Publish(seq, payloads[seq]);
      }
    }
    for (Shape& shape : shapes_) {
      for (auto& server : shape.servers) {
        std::unique_ptr<httplib::Client> client = Connect(server->port());
        while (!Resident(*client, blocks)) {
          if (Clock::now() > deadline) {
            return Status::Unavailable("a server did not hold every engine's blocks in time");
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    }
    return Status::Ok();
  }

  const std::vector<Shape>& shapes() const { return shapes_; }

 private:
  // True once GET /v1/workers shows every worker holding its blocks in hbm.
  static bool Resident(httplib::Client& client, const std::vector<uint64_t>& blocks) {
    httplib::Result response = client.Get("/v1/workers");
    if (!response || response->status != 200) return false;
    const Json body = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (!body.is_object() || !body.contains("workers")) return false;
    static const Json::json_pointer kHbm("/blocks/hbm");
    size_t full = 0;
    for (const Json& worker : body["workers"]) {
      for (int w = 0; w < kWorkers; ++w) {
        if (worker.value("id", "") == WorkerId(w) &&
            worker.value(kHbm, uint64_t{0}) == blocks[static_cast<size_t>(w)]) {
          ++full;
        }
      }
    }
    return full == static_cast<size_t>(kWorkers);
  }

  std::optional<test_support::ScratchDir> scratch_;  // removed after the servers stop
  std::filesystem::path root_;
  zmq::context_t context_{1};
  std::vector<std::unique_ptr<Publisher>> publishers_;
  std::vector<Shape> shapes_;
};

struct JournalHead {
  uint64_t seq = 0;
  std::string hash;
};

Result<JournalHead> Head(httplib::Client& client, uint64_t since) {
  httplib::Result response =
      client.Get("/v1/journal?since=" + std::to_string(std::max<uint64_t>(since, 1)) + "&limit=1");
  if (!response || response->status != 200) {
    return Status::Unavailable(Describe(response, "GET /v1/journal"));
  }
  const Json body = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return Status::Corruption("GET /v1/journal: not a JSON object");
  return JournalHead{body.value("head_seq", uint64_t{0}), body.value("head_hash", "")};
}

struct Figures {
  int replicas = 0;
  std::string name;
  std::vector<double> write_ms;
  std::vector<double> visible_ms;    // with more than one server
  size_t visible_at_first_poll = 0;  // writes every other server held when first asked
  std::vector<double> route_ms;
  size_t routes = 0;
  double route_s = 0;
};

// One shape's governance writes: a kept-alive connection per server, the
// journal head every server must reach next.
class Writer {
 public:
  explicit Writer(const Shape& shape) {
    for (const auto& server : shape.servers) clients_.push_back(Connect(server->port()));
  }

  // Waits until every server has applied every replica's serve.start.
  Status Settle() {
    for (const auto deadline = Clock::now() + kDeadline;;) {
      std::vector<uint64_t> heads;
      for (auto& client : clients_) {
        KVGOV_ASSIGN_OR_RETURN(JournalHead head, Head(*client, 1));
        heads.push_back(head.seq);
      }
      if (std::all_of(heads.begin(), heads.end(), [&](uint64_t h) { return h == heads[0]; })) {
        expected_ = heads[0];
        return Status::Ok();
      }
      if (Clock::now() > deadline) return Status::Unavailable("the replicas' journals never met");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Write i (round-robin over the servers); then, with several servers,
  // polls the others until their journal holds it.
  Status Write(int i, Figures* figures, bool record) {
    const size_t writer = static_cast<size_t>(i) % clients_.size();
    const std::string body =
        Json({{"model", "llama"},
              {"token_ids", RandomTokens(1'000'000 + static_cast<uint64_t>(i), kQuarantineTokens)},
              {"reason", "replica bench " + std::to_string(i)}})
            .dump();
    const auto started = Clock::now();
    httplib::Result response = clients_[writer]->Post("/v1/quarantine", body, "application/json");
    const auto written = Clock::now();
    if (!response || response->status != 200) {
      return Status::Unavailable(Describe(response, "POST /v1/quarantine"));
    }
    ++expected_;
    bool first_poll = true;
    for (size_t other = 0; other < clients_.size(); ++other) {
      if (other == writer) continue;
      for (const auto deadline = Clock::now() + kDeadline;;) {
        KVGOV_ASSIGN_OR_RETURN(JournalHead head, Head(*clients_[other], expected_));
        if (head.seq >= expected_) break;
        first_poll = false;
        if (Clock::now() > deadline) {
          return Status::Unavailable("a write never became visible on replica " +
                                     std::to_string(other));
        }
      }
    }
    const auto visible = Clock::now();
    if (!record) return Status::Ok();
    figures->write_ms.push_back(Millis(written - started));
    if (clients_.size() > 1) {
      figures->visible_ms.push_back(Millis(visible - started));
      if (first_poll) ++figures->visible_at_first_poll;
    }
    return Status::Ok();
  }

  // Nothing else wrote meanwhile, and every server holds the same chain.
  Status Check() {
    std::optional<JournalHead> first;
    for (auto& client : clients_) {
      KVGOV_ASSIGN_OR_RETURN(JournalHead head, Head(*client, expected_));
      if (head.seq != expected_) {
        return Status::FailedPrecondition("journal head " + std::to_string(head.seq) +
                                          ", expected " + std::to_string(expected_) +
                                          ": something else wrote during the benchmark");
      }
      if (first.has_value() && head.hash != first->hash) {
        return Status::FailedPrecondition("the replicas' journal chains differ");
      }
      first = head;
    }
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<httplib::Client>> clients_;
  uint64_t expected_ = 0;
};

// Writes in rounds, one per shape a round, the shapes' order rotating.
Status MeasureWrites(const std::vector<Shape>& shapes, std::vector<Figures>* figures) {
  std::vector<Writer> writers;
  for (const Shape& shape : shapes) {
    writers.emplace_back(shape);
    KVGOV_RETURN_IF_ERROR(writers.back().Settle());
  }
  for (int i = 0; i < kWarmupWrites + kWrites; ++i) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      const size_t s = (static_cast<size_t>(i) + k) % shapes.size();
      KVGOV_RETURN_IF_ERROR(writers[s].Write(i, &(*figures)[s], i >= kWarmupWrites));
    }
  }
  for (Writer& writer : writers) KVGOV_RETURN_IF_ERROR(writer.Check());
  return Status::Ok();
}

// kRouteClients threads route against one shape for `slice` (clients
// spread over its servers); each route's decision is released right after.
Status RouteSlice(const Shape& shape, const std::vector<std::string>& bodies,
                  std::chrono::milliseconds slice, Figures* figures) {
  std::latch warmed(kRouteClients);
  std::mutex mu;
  std::string failure;
  std::vector<std::vector<double>> latencies(kRouteClients);
  std::vector<double> elapsed_s(kRouteClients, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kRouteClients; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<httplib::Client> client =
          Connect(shape.servers[static_cast<size_t>(t) % shape.servers.size()]->port());
      auto route_once = [&](int call, std::vector<double>* sink) -> bool {
        const std::string& body = bodies[static_cast<size_t>(call + t * 5) % bodies.size()];
        const auto sent = Clock::now();
        httplib::Result response = client->Post("/v1/route", body, "application/json");
        const auto routed = Clock::now();
        if (!response || response->status != 200) {
          std::lock_guard lock(mu);
          failure = Describe(response, "POST /v1/route");
          return false;
        }
        const Json decision = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
        const std::string done = "/v1/route/" +
                                 (decision.is_object() ? decision.value("decision_id", "") : "") +
                                 "/done";
        if (httplib::Result released = client->Post(done); !released || released->status != 200) {
          std::lock_guard lock(mu);
          failure = Describe(released, "POST " + done);
          return false;
        }
        if (sink != nullptr) sink->push_back(Millis(routed - sent));
        return true;
      };
      bool ok = true;
      for (int i = 0; i < kWarmupRoutes && ok; ++i) ok = route_once(i, nullptr);
      warmed.arrive_and_wait();
      const auto started = Clock::now();
      for (int i = 0; ok && Clock::now() < started + slice; ++i) {
        ok = route_once(i, &latencies[static_cast<size_t>(t)]);
      }
      elapsed_s[static_cast<size_t>(t)] =
          std::chrono::duration<double>(Clock::now() - started).count();
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (!failure.empty()) return Status::Unavailable(failure);
  for (const std::vector<double>& each : latencies) {
    figures->routes += each.size();
    figures->route_ms.insert(figures->route_ms.end(), each.begin(), each.end());
  }
  figures->route_s += *std::max_element(elapsed_s.begin(), elapsed_s.end());
  return Status::Ok();
}

// Route slices in rounds, one per shape a round, the shapes' order rotating.
Status MeasureRoutes(const std::vector<Shape>& shapes, std::vector<Figures>* figures) {
  std::vector<std::string> bodies;
  for (int p = 0; p < kPrompts; ++p) {
    bodies.push_back(Json({{"model", "llama"}, {"token_ids", Prompt(p)}}).dump());
  }
  for (int round = 0; round < kRouteRounds; ++round) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      const size_t s = (static_cast<size_t>(round) + k) % shapes.size();
      KVGOV_RETURN_IF_ERROR(RouteSlice(shapes[s], bodies, kRouteSlice, &(*figures)[s]));
    }
  }
  return Status::Ok();
}

struct Measurement {
  Status status = Status::Ok();
  Status redis = Status::Ok();
  std::vector<Figures> figures;
};

// Everything, once per process: one redis-server, every shape, interleaved.
Measurement MeasureAll() {
  Measurement out;
  test_support::RedisServerProcess redis;
  out.redis = redis.Start();
  Deployment deployment;
  out.status = deployment.Start({0, 1, 3}, out.redis.ok() ? redis.url() : "");
  if (!out.status.ok()) return out;
  for (const Shape& shape : deployment.shapes()) {
    Figures figures;
    figures.replicas = shape.replicas;
    figures.name = shape.Name();
    out.figures.push_back(std::move(figures));
  }
  out.status = MeasureWrites(deployment.shapes(), &out.figures);
  if (out.status.ok()) out.status = MeasureRoutes(deployment.shapes(), &out.figures);
  return out;
}

const Measurement& Measured() {
  static const Measurement measurement = MeasureAll();
  return measurement;
}

// One row per shape; the first row to run measures all of them together.
void BM_Replicas(benchmark::State& state) {
  const int replicas = static_cast<int>(state.range(0));
  const Measurement* measured = nullptr;
  for (auto _ : state) measured = &Measured();
  if (measured == nullptr) return;
  if (!measured->status.ok()) {
    state.SkipWithError(measured->status.ToString().c_str());
    return;
  }
  const auto found = std::find_if(measured->figures.begin(), measured->figures.end(),
                                  [&](const Figures& each) { return each.replicas == replicas; });
  if (found == measured->figures.end()) {
    state.SkipWithError(("redis-server: " + measured->redis.ToString()).c_str());
    return;
  }
  const Figures& figures = *found;
  const double write_p50 = bench::Percentile(figures.write_ms, 0.50);
  const double write_p99 = bench::Percentile(figures.write_ms, 0.99);
  const double routes_per_s = static_cast<double>(figures.routes) / figures.route_s;
  const double route_p50 = bench::Percentile(figures.route_ms, 0.50);
  const double route_p99 = bench::Percentile(figures.route_ms, 0.99);
  state.counters["servers"] = std::max(1, replicas);
  state.counters["write_p50_ms"] = write_p50;
  state.counters["write_p99_ms"] = write_p99;
  state.counters["routes_per_s"] = routes_per_s;
  state.counters["route_p50_ms"] = route_p50;
  state.counters["route_p99_ms"] = route_p99;
  std::string visible;
  if (!figures.visible_ms.empty()) {
    const double visible_p50 = bench::Percentile(figures.visible_ms, 0.50);
    const double visible_p99 = bench::Percentile(figures.visible_ms, 0.99);
    state.counters["visible_p50_ms"] = visible_p50;
    state.counters["visible_p99_ms"] = visible_p99;
    const double first_poll = static_cast<double>(figures.visible_at_first_poll) /
                              static_cast<double>(figures.visible_ms.size());
    state.counters["visible_at_first_poll"] = first_poll;
    char line[128];
    std::snprintf(line, sizeof(line),
                  "; visible on all p50 %.2f ms, p99 %.2f ms (%.0f%% at the first poll)",
                  visible_p50, visible_p99, 100 * first_poll);
    visible = line;
  }
  std::fprintf(stderr,
               "kvgov_replica_bench %-12s %zu writes p50 %.2f ms, p99 %.2f ms%s | %d clients: "
               "%.0f routes/s, p50 %.2f ms, p99 %.2f ms\n",
               (figures.name + ":").c_str(), figures.write_ms.size(), write_p50, write_p99,
               visible.c_str(), kRouteClients, routes_per_s, route_p50, route_p99);
}
BENCHMARK(BM_Replicas)
    ->ArgName("replicas")
    ->Arg(0)
    ->Arg(1)
    ->Arg(3)
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace kvgov::server
