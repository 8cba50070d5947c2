#include "kvgov/simfleet/live_engine.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <numeric>
#include <thread>

#include "kvgov/adapters/engine_wire.h"
#include "kvgov/connectors/engine_metrics.h"
#include "kvgov/index/residency_index.h"
#include "kvgov/ingest/engine_spec.h"
#include "kvgov/transport/zmq_ingest.h"

namespace kvgov::simfleet {
namespace {

using Json = nlohmann::json;

std::vector<int64_t> Tokens(int64_t count, int64_t first = 0) {
  std::vector<int64_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

uint64_t BigEndian(const zmq::message_t& frame) {
  uint64_t value = 0;
  const auto* bytes = static_cast<const unsigned char*>(frame.data());
  for (size_t i = 0; i < frame.size(); ++i) value = (value << 8) | bytes[i];
  return value;
}

std::unique_ptr<LiveEngine> StartEngine(sim::WireEncoding encoding) {
  LiveEngineOptions options;
  options.id = "sim-7";
  options.pool.capacity_blocks = 64;
  options.pool.block_size = 16;
  options.pool.hash_seed = 99;
  options.encoding = encoding;
  options.speedup = 1000;  // modeled milliseconds become microseconds
  Result<std::unique_ptr<LiveEngine>> engine = LiveEngine::Start(options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

Json Complete(httplib::Client& client, const std::vector<int64_t>& tokens,
              const std::string& salt = "") {
  Json body = {{"prompt", tokens}, {"max_tokens", 1}};
  if (!salt.empty()) body["cache_salt"] = salt;
  httplib::Result result = client.Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(result);
  if (!result) return Json();
  EXPECT_EQ(result->status, 200) << result->body;
  return Json::parse(result->body);
}

// Receives one live message, polling so a lost one fails instead of hanging.
std::vector<zmq::message_t> Receive(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  std::array<zmq::pollitem_t, 1> items = {{{socket.handle(), 0, ZMQ_POLLIN, 0}}};
  zmq::poll(items, std::chrono::seconds(5));
  if (items[0].revents & ZMQ_POLLIN) (void)zmq::recv_multipart(socket, std::back_inserter(frames));
  return frames;
}

class LiveEngineTest : public ::testing::TestWithParam<sim::WireEncoding> {};

TEST_P(LiveEngineTest, SpeaksVllmsWireAndControlApi) {
  std::unique_ptr<LiveEngine> engine = StartEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  zmq::context_t context;
  zmq::socket_t sub(context, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(engine->events_endpoint());
  httplib::Client client(engine->control_url());
  ASSERT_EQ(client.Get("/health")->status, 200);

  // The slow joiner: publish until the subscription has landed.
  std::vector<zmq::message_t> first;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int64_t offset = 0;
  while (first.empty() && std::chrono::steady_clock::now() < deadline) {
    Complete(client, Tokens(40, offset += 1000));
    std::array<zmq::pollitem_t, 1> items = {{{sub.handle(), 0, ZMQ_POLLIN, 0}}};
    zmq::poll(items, std::chrono::milliseconds(50));
    if (items[0].revents & ZMQ_POLLIN) (void)zmq::recv_multipart(sub, std::back_inserter(first));
  }
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].to_string(), "kv@sim-7");
  ASSERT_EQ(first[1].size(), 8u);
  uint64_t seq = BigEndian(first[1]);

  // A prompt of 40 tokens caches its two full blocks; a repeat hits them.
  const std::vector<int64_t> prompt = Tokens(40, 7);
  Json miss = Complete(client, prompt, "salt-1");
  EXPECT_EQ(miss["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  std::vector<zmq::message_t> stored = Receive(sub);
  ASSERT_EQ(stored.size(), 3u);
  EXPECT_EQ(BigEndian(stored[1]), ++seq);
  Result<EngineEventBatch> batch = adapters::DecodeEngineBatch(stored[2].to_string_view());
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->events.size(), 1u);
  const auto& event = std::get<BlockStored>(batch->events[0]);
  EXPECT_EQ(event.token_ids, Tokens(32, 7));
  EXPECT_EQ(event.extra_keys.at(0), "[\"salt-1\"]");
  Json hit = Complete(client, prompt, "salt-1");
  EXPECT_EQ(hit["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(hit["kvgov_sim"]["hit_blocks"], 2);

  // /metrics is vLLM's, as kvgov's scraper reads it.
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  Result<router::ScrapedLoad> load = connectors::ParseEngineMetrics(metrics->body, 0);
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_GT(load->kv_usage, 0.0);

  // A reset publishes AllBlocksCleared.
  ASSERT_EQ(client.Post("/reset_prefix_cache", "", "application/json")->status, 200);
  std::vector<zmq::message_t> cleared = Receive(sub);
  ASSERT_EQ(cleared.size(), 3u);
  Result<EngineEventBatch> cleared_batch = adapters::DecodeEngineBatch(cleared[2].to_string_view());
  ASSERT_TRUE(cleared_batch.ok());
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(cleared_batch->events.at(0)));
  EXPECT_EQ(Complete(client, prompt, "salt-1")["usage"]["prompt_tokens_details"]["cached_tokens"],
            0);

  // Replay from the stored batch on: [topic, seq, payload]..., then the end marker.
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.connect(engine->replay_endpoint());
  std::string start(8, '\0');
  const uint64_t stored_seq = BigEndian(stored[1]);
  for (int i = 0; i < 8; ++i) start[static_cast<size_t>(i)] = static_cast<char>(stored_seq >> (56 - 8 * i));
  std::array<zmq::const_buffer, 2> request = {zmq::const_buffer("", 0), zmq::buffer(start)};
  zmq::send_multipart(dealer, request);
  std::vector<zmq::message_t> reply = Receive(dealer);
  ASSERT_EQ(reply.size(), 4u);  // empty, topic, seq, payload
  EXPECT_EQ(reply[1].to_string(), "kv@sim-7");
  EXPECT_EQ(BigEndian(reply[2]), stored_seq);
  EXPECT_EQ(reply[3].to_string(), stored[2].to_string());
  uint64_t last = 0;
  do {
    reply = Receive(dealer);
    ASSERT_FALSE(reply.empty());
    last = BigEndian(reply[reply.size() == 3 ? 1 : 2]);
  } while (last != ~uint64_t{0});
}

TEST_P(LiveEngineTest, KvgovsIngestIndexesWhatTheEngineCaches) {
  std::unique_ptr<LiveEngine> engine = StartEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  Result<ingest::EngineSpec> spec = ingest::ParseEngineSpec(engine->EngineSpec());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  index::ResidencyIndex index;
  transport::ZmqIngest ingest(&index, [](const Entry&) {});
  ASSERT_TRUE(ingest.AddEngine(*spec).ok());

  httplib::Client client(engine->control_url());
  // Distinct prompts of 4 full blocks until kvgov's subscription has
  // landed; what it missed before, it repairs from the replay socket.
  auto held = [&] {
    std::optional<index::WorkerResidency> worker = index.Worker("sim-7");
    return worker.has_value() ? worker->blocks[0] : 0;
  };
  uint64_t sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (held() == 0 && sent < 12 && std::chrono::steady_clock::now() < deadline) {
    Complete(client, Tokens(64, 1000 * static_cast<int64_t>(sent++)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  while (held() != 4 * sent && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(held(), 4 * sent);
  EXPECT_GT(sent, 0u);
  ingest.Stop();
}

TEST(LiveEngineBadInputTest, RefusesAPromptThatIsNotTokenIds) {
  std::unique_ptr<LiveEngine> engine = StartEngine(sim::WireEncoding::kMap);
  ASSERT_NE(engine, nullptr);
  httplib::Client client(engine->control_url());
  httplib::Result result =
      client.Post("/v1/completions", R"({"prompt":[1,"two"]})", "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400);
  EXPECT_NE(result->body.find("prompt[1]"), std::string::npos) << result->body;
  result = client.Post("/v1/completions", "not json", "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400);
}

std::string EncodingName(const ::testing::TestParamInfo<sim::WireEncoding>& param) {
  return param.param == sim::WireEncoding::kMap ? "Map" : "LegacyPositional";
}

INSTANTIATE_TEST_SUITE_P(BothEncodings, LiveEngineTest,
                         ::testing::Values(sim::WireEncoding::kMap,
                                           sim::WireEncoding::kLegacyPositional),
                         EncodingName);

}  // namespace
}  // namespace kvgov::simfleet
