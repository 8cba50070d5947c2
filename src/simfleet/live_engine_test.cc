#include "kvgov/simfleet/live_engine.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <functional>
#include <future>
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

// The slow joiner: plain completions (each publishes a batch) until the
// subscription has landed; the first batch it received, empty after 5 s.
std::vector<zmq::message_t> FirstBatchOnceJoined(zmq::socket_t& sub, httplib::Client& client) {
  std::vector<zmq::message_t> first;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int64_t offset = 0;
  while (first.empty() && std::chrono::steady_clock::now() < deadline) {
    Complete(client, Tokens(40, offset += 1000));
    std::array<zmq::pollitem_t, 1> items = {{{sub.handle(), 0, ZMQ_POLLIN, 0}}};
    zmq::poll(items, std::chrono::milliseconds(50));
    if (items[0].revents & ZMQ_POLLIN) (void)zmq::recv_multipart(sub, std::back_inserter(first));
  }
  return first;
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
  const std::vector<zmq::message_t> first = FirstBatchOnceJoined(sub, client);
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
  for (int i = 0; i < 8; ++i)
    start[static_cast<size_t>(i)] = static_cast<char>(stored_seq >> (56 - 8 * i));
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

// Disaggregated engines: a prefill engine hands a prompt over, a decode
// engine pulls it, as vLLM's NixlConnector does through its toy proxy.

std::unique_ptr<LiveEngine> StartRole(const std::string& id, ingest::EngineRole role,
                                      std::chrono::milliseconds kv_lease = std::chrono::seconds(30),
                                      std::chrono::milliseconds pull_delay = {}) {
  LiveEngineOptions options;
  options.id = id;
  options.role = role;
  options.pool.capacity_blocks = 64;
  options.pool.block_size = 16;
  options.pool.hash_seed = std::hash<std::string>{}(id);
  options.speedup = 1000;
  options.kv_lease = kv_lease;
  options.pull_delay = pull_delay;
  Result<std::unique_ptr<LiveEngine>> engine = LiveEngine::Start(options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

int PortOf(const LiveEngine& engine) {
  const std::string url = engine.control_url();
  return std::stoi(url.substr(url.rfind(':') + 1));
}

// What vLLM's toy proxy asks of the prefill leg.
Json PrefillLeg(const std::vector<int64_t>& prompt) {
  return Json{{"prompt", prompt},
              {"max_tokens", 1},
              {"stream", false},
              {"kv_transfer_params",
               {{"do_remote_decode", true},
                {"do_remote_prefill", false},
                {"remote_engine_id", nullptr},
                {"remote_block_ids", nullptr},
                {"remote_host", nullptr},
                {"remote_port", nullptr}}}};
}

// Runs the prefill leg; the kv_transfer_params of its answer.
Json HandOver(LiveEngine& prefill, const std::vector<int64_t>& prompt,
              const std::string& request_id = "") {
  httplib::Client client(prefill.control_url());
  httplib::Headers headers;
  if (!request_id.empty()) headers.emplace("X-Request-Id", request_id);
  httplib::Result result =
      client.Post("/v1/completions", headers, PrefillLeg(prompt).dump(), "application/json");
  EXPECT_TRUE(result);
  if (!result) return Json();
  EXPECT_EQ(result->status, 200) << result->body;
  const Json answer = Json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(answer.is_object() && answer.contains("kv_transfer_params")) << result->body;
  return answer.is_object() ? answer.value("kv_transfer_params", Json()) : Json();
}

httplib::Result DecodeLeg(LiveEngine& decode, Json body, const Json& params) {
  body["kv_transfer_params"] = params;
  httplib::Client client(decode.control_url());
  return client.Post("/v1/completions", body.dump(), "application/json");
}

// The data of each server-sent event, in order.
std::vector<std::string> EventData(const std::string& stream) {
  std::vector<std::string> data;
  size_t at = 0;
  while ((at = stream.find("data: ", at)) != std::string::npos) {
    const size_t end = stream.find("\n\n", at);
    data.push_back(stream.substr(at + 6, end == std::string::npos ? end : end - at - 6));
    at = end == std::string::npos ? stream.size() : end;
  }
  return data;
}

bool IsLowerHex(std::string_view text) {
  return !text.empty() && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

TEST(LiveEngineDisaggregationTest, HandsAPromptOverFromPrefillToDecode) {
  std::unique_ptr<LiveEngine> prefill = StartRole("sim-p", ingest::EngineRole::kPrefill);
  std::unique_ptr<LiveEngine> decode = StartRole("sim-d", ingest::EngineRole::kDecode);
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  zmq::context_t context;
  zmq::socket_t sub(context, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(decode->events_endpoint());
  httplib::Client d_client(decode->control_url());
  // The slow joiner, and a decode engine serving a plain completion
  // locally: publish until the subscription has landed.
  const std::vector<zmq::message_t> first = FirstBatchOnceJoined(sub, d_client);
  ASSERT_FALSE(first.empty());

  // The prefill leg answers with vLLM's pull-scheduler params and pins.
  const std::vector<int64_t> prompt = Tokens(40, 7);  // two full blocks and 8 tokens
  const Json params = HandOver(*prefill, prompt, "req-1");
  ASSERT_TRUE(params.is_object());
  EXPECT_EQ(params["do_remote_prefill"], true);
  EXPECT_EQ(params["do_remote_decode"], false);
  EXPECT_EQ(params["remote_engine_id"], "sim-p");
  const std::string remote_id = params.value("remote_request_id", "");
  EXPECT_TRUE(remote_id.starts_with("req-1-") && remote_id.size() == 14 &&
              IsLowerHex(std::string_view(remote_id).substr(6)))
      << remote_id;
  ASSERT_TRUE(params["remote_block_ids"].is_array());
  ASSERT_EQ(params["remote_block_ids"].size(), 1u);
  EXPECT_EQ(params["remote_block_ids"][0].size(), 2u);
  EXPECT_EQ(params["remote_host"], "127.0.0.1");
  EXPECT_EQ(params["remote_port"], PortOf(*prefill));
  EXPECT_EQ(params["tp_size"], 1);
  EXPECT_EQ(params["remote_num_tokens"], 40);
  EXPECT_EQ(params["transfer_mode"], "pull");
  EXPECT_EQ(prefill->pinned_blocks(), 2u);

  // The decode leg: the client's own body (streamed) plus those params.
  httplib::Result answer = DecodeLeg(*decode,
                                     Json{{"prompt", prompt},
                                          {"max_tokens", 3},
                                          {"stream", true},
                                          {"stream_options", {{"include_usage", true}}}},
                                     params);
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  EXPECT_EQ(answer->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = EventData(answer->body);
  ASSERT_EQ(events.size(), 6u) << answer->body;  // 3 tokens, the finish, usage, [DONE]
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Json::parse(events[static_cast<size_t>(i)])["choices"][0]["text"],
              " tok" + std::to_string(i));
  }
  const Json usage = Json::parse(events[4])["usage"];
  EXPECT_EQ(usage["prompt_tokens"], 40);
  EXPECT_EQ(usage["completion_tokens"], 3);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 40);
  EXPECT_EQ(events[5], "[DONE]");

  // The pull ended the pin; the blocks stay in P's prefix cache.
  EXPECT_EQ(prefill->pulls(), 1u);
  EXPECT_EQ(prefill->pinned_blocks(), 0u);
  EXPECT_EQ(prefill->resident_blocks(), 2u);
  EXPECT_EQ(decode->failed_pulls(), 0u);

  // D published the pulled blocks as its own, under its own hashes.
  bool published = false;
  while (!published) {
    std::vector<zmq::message_t> message = Receive(sub);
    ASSERT_EQ(message.size(), 3u) << "no BlockStored of the pulled prompt";
    Result<EngineEventBatch> batch = adapters::DecodeEngineBatch(message[2].to_string_view());
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    for (const EngineEvent& event : batch->events) {
      const auto* stored = std::get_if<BlockStored>(&event);
      if (stored != nullptr && stored->token_ids == Tokens(32, 7)) published = true;
    }
  }
  // And D holds the prompt: a plain completion of it there hits every block.
  const Json again = Complete(d_client, prompt);
  EXPECT_EQ(again["kvgov_sim"]["hit_blocks"], 2);
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
}

TEST(LiveEngineDisaggregationTest, PullsOnlyWhatItDoesNotHoldAndOnlyOnce) {
  std::unique_ptr<LiveEngine> prefill = StartRole("sim-p", ingest::EngineRole::kPrefill);
  std::unique_ptr<LiveEngine> decode = StartRole("sim-d", ingest::EngineRole::kBoth);
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  httplib::Client d_client(decode->control_url());
  const std::vector<int64_t> prompt = Tokens(40, 7);
  Complete(d_client, Tokens(16, 7));               // D already holds the first block
  const Json params = HandOver(*prefill, prompt);  // no X-Request-Id: a generated one
  const std::string remote_id = params.value("remote_request_id", "");
  EXPECT_EQ(remote_id.size(), 32u + 1 + 8) << remote_id;

  const Json body = {{"prompt", prompt}, {"max_tokens", 2}};
  httplib::Result answer = DecodeLeg(*decode, body, params);
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  const Json decoded = Json::parse(answer->body);
  EXPECT_EQ(decoded["choices"][0]["text"], " tok0 tok1");
  EXPECT_EQ(decoded["usage"]["prompt_tokens_details"]["cached_tokens"], 40);
  EXPECT_EQ(decoded["kvgov_sim"]["pulled_tokens"], 24);
  EXPECT_DOUBLE_EQ(decoded["kvgov_sim"]["transfer_s"].get<double>(), 24 * 131072 / 50e9);
  EXPECT_EQ(decoded["kvgov_sim"]["prefill_s"], 0.0);
  EXPECT_FALSE(decoded.contains("kv_transfer_params"));
  EXPECT_EQ(prefill->pulls(), 1u);

  // The pin ended with the first pull: the same params again fail, as
  // vLLM's kv_load_failure_policy=fail does.
  answer = DecodeLeg(*decode, body, params);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 503);
  const Json error = Json::parse(answer->body);
  EXPECT_EQ(error["error"]["message"], "kv_transfer_params: remote request " + remote_id +
                                           " is unknown or expired at engine sim-p");
  EXPECT_EQ(decode->failed_pulls(), 1u);
  EXPECT_EQ(prefill->pulls(), 1u);
}

TEST(LiveEngineDisaggregationTest, APinThatLapsedFailsThePull) {
  std::unique_ptr<LiveEngine> prefill =
      StartRole("sim-p", ingest::EngineRole::kPrefill, std::chrono::milliseconds(50));
  std::unique_ptr<LiveEngine> decode =
      StartRole("sim-d", ingest::EngineRole::kDecode, std::chrono::seconds(30),
                std::chrono::milliseconds(200));
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  const std::vector<int64_t> prompt = Tokens(40, 7);
  const Json params = HandOver(*prefill, prompt, "req-lapse");
  httplib::Result answer = DecodeLeg(*decode, Json{{"prompt", prompt}, {"max_tokens", 1}}, params);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 503);
  EXPECT_NE(answer->body.find(params.value("remote_request_id", "?")), std::string::npos)
      << answer->body;
  EXPECT_EQ(decode->failed_pulls(), 1u);
  EXPECT_EQ(prefill->pulls(), 0u);
  // The lapsed pin is freed, its blocks still cached.
  EXPECT_EQ(prefill->pinned_blocks(), 0u);
  EXPECT_EQ(prefill->resident_blocks(), 2u);
}

TEST(LiveEngineDisaggregationTest, AnUnreachablePrefillEngineFailsThePull) {
  std::unique_ptr<LiveEngine> prefill = StartRole("sim-p", ingest::EngineRole::kPrefill);
  std::unique_ptr<LiveEngine> decode = StartRole("sim-d", ingest::EngineRole::kDecode);
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  const std::vector<int64_t> prompt = Tokens(40, 7);
  const Json params = HandOver(*prefill, prompt);
  prefill->Stop();
  httplib::Result answer = DecodeLeg(*decode, Json{{"prompt", prompt}, {"max_tokens", 1}}, params);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 503);
  EXPECT_NE(answer->body.find("unreachable"), std::string::npos) << answer->body;
  EXPECT_EQ(decode->failed_pulls(), 1u);
}

TEST(LiveEngineDisaggregationTest, AHandoffMissingAFieldIsRefusedNamingIt) {
  std::unique_ptr<LiveEngine> prefill = StartRole("sim-p", ingest::EngineRole::kPrefill);
  std::unique_ptr<LiveEngine> decode = StartRole("sim-d", ingest::EngineRole::kDecode);
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  const std::vector<int64_t> prompt = Tokens(40, 7);
  const Json params = {{"do_remote_prefill", true},
                       {"do_remote_decode", false},
                       {"remote_engine_id", "sim-p"},
                       {"remote_request_id", "req-1-0badc0de"},
                       {"remote_host", "127.0.0.1"},
                       {"remote_port", PortOf(*prefill)},
                       {"remote_block_ids", Json::array({Json::array({0, 1})})}};
  const Json body = {{"prompt", prompt}, {"max_tokens", 1}};
  for (const char* field : {"remote_engine_id", "remote_request_id", "remote_host", "remote_port",
                            "remote_block_ids"}) {
    Json partial = params;
    partial.erase(field);
    httplib::Result answer = DecodeLeg(*decode, body, partial);
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->status, 400) << field;
    EXPECT_NE(answer->body.find(std::string("kv_transfer_params.") + field + ": required"),
              std::string::npos)
        << answer->body;
  }
  Json bad_port = params;
  bad_port["remote_port"] = "8000";
  httplib::Result answer = DecodeLeg(*decode, body, bad_port);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 400);
  EXPECT_NE(answer->body.find("kv_transfer_params.remote_port: want an integer"), std::string::npos)
      << answer->body;
  EXPECT_EQ(decode->failed_pulls(), 0u);  // refused before any pull

  // The prefill leg answers in one body, and only a prefill engine serves it.
  httplib::Client p_client(prefill->control_url());
  Json streamed = PrefillLeg(prompt);
  streamed["stream"] = true;
  answer = p_client.Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 400);
  EXPECT_NE(answer->body.find("stream: a remote-decode prefill answers in one body"),
            std::string::npos)
      << answer->body;
  httplib::Client d_client(decode->control_url());
  answer = d_client.Post("/v1/completions", PrefillLeg(prompt).dump(), "application/json");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 400);
  EXPECT_NE(answer->body.find("kv_transfer_params.do_remote_decode"), std::string::npos)
      << answer->body;
  EXPECT_EQ(prefill->pinned_blocks(), 0u);
}

TEST(LiveEngineDisaggregationTest, TheEngineSpecCarriesTheRole) {
  std::unique_ptr<LiveEngine> prefill =
      StartRole("sim-p", ingest::EngineRole::kPrefill, std::chrono::milliseconds(2500));
  std::unique_ptr<LiveEngine> decode = StartRole("sim-d", ingest::EngineRole::kDecode);
  std::unique_ptr<LiveEngine> both = StartRole("sim-b", ingest::EngineRole::kBoth);
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  ASSERT_NE(both, nullptr);
  EXPECT_TRUE(prefill->EngineSpec().ends_with(",role=prefill,kv-lease-ms=2500"))
      << prefill->EngineSpec();
  EXPECT_TRUE(decode->EngineSpec().ends_with(",role=decode")) << decode->EngineSpec();
  EXPECT_EQ(both->EngineSpec().find("role="), std::string::npos) << both->EngineSpec();
  Result<ingest::EngineSpec> spec = ingest::ParseEngineSpec(prefill->EngineSpec());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->role, ingest::EngineRole::kPrefill);
  EXPECT_EQ(spec->kv_lease_ms, 2500);
  spec = ingest::ParseEngineSpec(decode->EngineSpec());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->role, ingest::EngineRole::kDecode);
  EXPECT_TRUE(ingest::ParseEngineSpec(both->EngineSpec()).ok());
}

// SGLang's PD protocol: one body with a bootstrap room to both engines at
// once, the prefill engine pushing the room's KV to the decode engine
// (here: the decode engine fetching it over POST /kvgov_sim/bootstrap).

std::unique_ptr<LiveEngine> StartSglang(
    const std::string& id, ingest::EngineRole role,
    std::chrono::milliseconds kv_lease = std::chrono::seconds(30),
    std::chrono::milliseconds pull_delay = {}) {
  LiveEngineOptions options;
  options.id = id;
  options.kind = ingest::EngineKind::kSglang;
  options.role = role;
  options.pool.capacity_blocks = 64;
  options.pool.block_size = 16;
  options.pool.hash_seed = std::hash<std::string>{}(id);
  options.speedup = 1000;
  options.kv_lease = kv_lease;
  options.pull_delay = pull_delay;
  Result<std::unique_ptr<LiveEngine>> engine = LiveEngine::Start(options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// The body sgl-model-gateway sends both legs: the client's, plus the room.
Json RoomBody(const std::vector<int64_t>& prompt, const LiveEngine& prefill, uint64_t room,
              int max_tokens, bool stream) {
  Json body = {{"prompt", prompt},
               {"max_tokens", max_tokens},
               {"stream", stream},
               {"bootstrap_host", "127.0.0.1"},
               {"bootstrap_port", PortOf(prefill)},
               {"bootstrap_room", room}};
  if (stream) body["stream_options"] = {{"include_usage", true}};
  return body;
}

httplib::Result PostCompletion(const LiveEngine& engine, const Json& body) {
  httplib::Client client(engine.control_url());
  client.set_read_timeout(std::chrono::seconds(10));
  return client.Post("/v1/completions", body.dump(), "application/json");
}

// Polls `done` every millisecond for up to 10 s.
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The waiting requests an engine's /metrics reports.
int Waiting(const LiveEngine& engine) {
  httplib::Client client(engine.control_url());
  httplib::Result metrics = client.Get("/metrics");
  if (!metrics) return -1;
  Result<router::ScrapedLoad> load = connectors::ParseEngineMetrics(metrics->body, 0);
  return load.ok() ? static_cast<int>(load->waiting) : -1;
}

TEST(LiveEngineSglangTest, TheEngineSpecSaysSglangAndTheBootstrapPort) {
  std::unique_ptr<LiveEngine> prefill =
      StartSglang("sim-p", ingest::EngineRole::kPrefill, std::chrono::milliseconds(2500));
  std::unique_ptr<LiveEngine> decode = StartSglang("sim-d", ingest::EngineRole::kDecode);
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  EXPECT_NE(prefill->EngineSpec().find(",kind=sglang,"), std::string::npos)
      << prefill->EngineSpec();
  EXPECT_TRUE(prefill->EngineSpec().ends_with(",role=prefill,kv-lease-ms=2500,bootstrap-port=" +
                                              std::to_string(PortOf(*prefill))))
      << prefill->EngineSpec();
  EXPECT_TRUE(decode->EngineSpec().ends_with(",role=decode")) << decode->EngineSpec();
  Result<ingest::EngineSpec> spec = ingest::ParseEngineSpec(prefill->EngineSpec());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->kind, ingest::EngineKind::kSglang);
  EXPECT_EQ(spec->kv_lease_ms, 2500);
  EXPECT_EQ(spec->bootstrap_port, PortOf(*prefill));
  spec = ingest::ParseEngineSpec(decode->EngineSpec());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->kind, ingest::EngineKind::kSglang);

  // SGLang's tokenizer path, with the shapes of vLLM's.
  httplib::Client client(prefill->control_url());
  const std::string ask = Json{{"prompt", "a b c"}}.dump();
  httplib::Result sglang = client.Post("/v1/tokenize", ask, "application/json");
  httplib::Result vllm = client.Post("/tokenize", ask, "application/json");
  ASSERT_TRUE(sglang && vllm);
  ASSERT_EQ(sglang->status, 200) << sglang->body;
  EXPECT_EQ(sglang->body, vllm->body);
  EXPECT_EQ(Json::parse(sglang->body)["count"], 3);
  std::unique_ptr<LiveEngine> vllm_engine = StartRole("sim-v", ingest::EngineRole::kBoth);
  ASSERT_NE(vllm_engine, nullptr);
  httplib::Client v_client(vllm_engine->control_url());
  EXPECT_EQ(v_client.Post("/v1/tokenize", ask, "application/json")->status, 404);
  // A mooncake store serves no requests.
  LiveEngineOptions mooncake;
  mooncake.kind = ingest::EngineKind::kMooncake;
  EXPECT_FALSE(LiveEngine::Start(mooncake).ok());
}

TEST(LiveEngineSglangTest, KvgovsSglangDecoderIndexesWhatTheEngineCaches) {
  // kvgov decodes kind=sglang with the EventBatch decoder vLLM's streams
  // use (SGLang's publisher reuses that wire): what the simulator
  // publishes must index under that kind too.
  std::unique_ptr<LiveEngine> engine = StartSglang("sim-s", ingest::EngineRole::kBoth);
  ASSERT_NE(engine, nullptr);
  Result<ingest::EngineSpec> spec = ingest::ParseEngineSpec(engine->EngineSpec());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->kind, ingest::EngineKind::kSglang);
  index::ResidencyIndex index;
  transport::ZmqIngest ingest(&index, [](const Entry&) {});
  ASSERT_TRUE(ingest.AddEngine(*spec).ok());
  httplib::Client client(engine->control_url());
  auto held = [&] {
    std::optional<index::WorkerResidency> worker = index.Worker("sim-s");
    return worker.has_value() ? worker->blocks[0] : 0;
  };
  uint64_t sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (held() == 0 && sent < 12 && std::chrono::steady_clock::now() < deadline) {
    Complete(client, Tokens(64, 1000 * static_cast<int64_t>(sent++)), "tenant-salt");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  while (held() != 4 * sent && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(held(), 4 * sent);
  EXPECT_GT(sent, 0u);
  ingest.Stop();
}

TEST(LiveEngineSglangTest, HandsAPromptOverThroughTheBootstrapRoom) {
  std::unique_ptr<LiveEngine> prefill = StartSglang("sim-p", ingest::EngineRole::kPrefill);
  std::unique_ptr<LiveEngine> decode =
      StartSglang("sim-d", ingest::EngineRole::kDecode, std::chrono::seconds(30),
                  std::chrono::milliseconds(300));
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  zmq::context_t context;
  zmq::socket_t sub(context, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(decode->events_endpoint());
  httplib::Client d_client(decode->control_url());
  // The slow joiner: plain completions, served locally, until it has landed.
  const std::vector<zmq::message_t> first = FirstBatchOnceJoined(sub, d_client);
  ASSERT_FALSE(first.empty());

  // Both legs at once, one body, as sgl-model-gateway sends them.
  const std::vector<int64_t> prompt = Tokens(40, 7);  // two full blocks and 8 tokens
  const uint64_t room = (uint64_t{1} << 62) + 12345;  // past 2^53: no double on the way
  const Json body = RoomBody(prompt, *prefill, room, 3, /*stream=*/true);
  std::future<httplib::Result> prefill_leg =
      std::async(std::launch::async, [&] { return PostCompletion(*prefill, body); });
  std::future<httplib::Result> decode_leg =
      std::async(std::launch::async, [&] { return PostCompletion(*decode, body); });
  // The prompt's blocks are pinned while the decode engine waits its
  // pull_delay, and the prefill's answer waits with them.
  EXPECT_TRUE(Eventually([&] { return prefill->pinned_blocks() == 2; }));
  httplib::Result prefill_answer = prefill_leg.get();
  httplib::Result decode_answer = decode_leg.get();

  // The decode engine streams the answer; every prompt token came over.
  ASSERT_TRUE(decode_answer);
  ASSERT_EQ(decode_answer->status, 200) << decode_answer->body;
  EXPECT_EQ(decode_answer->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::string> events = EventData(decode_answer->body);
  ASSERT_EQ(events.size(), 6u) << decode_answer->body;  // 3 tokens, the finish, usage, [DONE]
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Json::parse(events[static_cast<size_t>(i)])["choices"][0]["text"],
              " tok" + std::to_string(i));
  }
  Json usage = Json::parse(events[4])["usage"];
  EXPECT_EQ(usage["prompt_tokens"], 40);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 40);
  EXPECT_EQ(events[5], "[DONE]");

  // The prefill engine answered once the push was done: one token, as the
  // body asked, streamed; it computed the whole prompt.
  ASSERT_TRUE(prefill_answer);
  ASSERT_EQ(prefill_answer->status, 200) << prefill_answer->body;
  events = EventData(prefill_answer->body);
  ASSERT_EQ(events.size(), 4u) << prefill_answer->body;  // 1 token, the finish, usage, [DONE]
  EXPECT_EQ(Json::parse(events[0])["choices"][0]["text"], " tok0");
  usage = Json::parse(events[2])["usage"];
  EXPECT_EQ(usage["completion_tokens"], 1);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 0);

  // The fetch ended the pin; the blocks stay in P's cache.
  EXPECT_EQ(prefill->pulls(), 1u);
  EXPECT_EQ(prefill->pinned_blocks(), 0u);
  EXPECT_EQ(prefill->resident_blocks(), 2u);
  EXPECT_EQ(decode->failed_pulls(), 0u);
  EXPECT_EQ(prefill->last_bootstrap_room(), room);
  EXPECT_EQ(decode->last_bootstrap_room(), room);
  // The room is gone: a second fetch of it is refused, naming it.
  httplib::Client p_client(prefill->control_url());
  httplib::Result again = p_client.Post("/kvgov_sim/bootstrap",
                                        Json{{"bootstrap_room", room}}.dump(), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 404);
  EXPECT_NE(again->body.find("bootstrap_room " + std::to_string(room)), std::string::npos)
      << again->body;

  // D published the pushed blocks as its own.
  bool published = false;
  while (!published) {
    std::vector<zmq::message_t> message = Receive(sub);
    ASSERT_EQ(message.size(), 3u) << "no BlockStored of the pushed prompt";
    Result<EngineEventBatch> batch = adapters::DecodeEngineBatch(message[2].to_string_view());
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    for (const EngineEvent& event : batch->events) {
      const auto* stored = std::get_if<BlockStored>(&event);
      if (stored != nullptr && stored->token_ids == Tokens(32, 7)) published = true;
    }
  }
  const Json plain = Complete(d_client, prompt);
  EXPECT_EQ(plain["kvgov_sim"]["hit_blocks"], 2);
}

TEST(LiveEngineSglangTest, ADecodeEngineThatAsksFirstWaitsForTheRoom) {
  std::unique_ptr<LiveEngine> prefill = StartSglang("sim-p", ingest::EngineRole::kPrefill);
  std::unique_ptr<LiveEngine> decode = StartSglang("sim-d", ingest::EngineRole::kDecode);
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  const std::vector<int64_t> prompt = Tokens(40, 7);
  const Json body = RoomBody(prompt, *prefill, 77, 2, /*stream=*/false);
  std::future<httplib::Result> decode_leg =
      std::async(std::launch::async, [&] { return PostCompletion(*decode, body); });
  // The decode leg is asking for a room the prefill engine has not seen.
  EXPECT_TRUE(Eventually([&] { return Waiting(*decode) == 1; }));
  httplib::Result prefill_answer = PostCompletion(*prefill, body);
  httplib::Result decode_answer = decode_leg.get();
  ASSERT_TRUE(prefill_answer);
  ASSERT_EQ(prefill_answer->status, 200) << prefill_answer->body;
  const Json prefilled = Json::parse(prefill_answer->body);
  EXPECT_EQ(prefilled["choices"][0]["text"], " tok0");  // one token, in one body
  EXPECT_EQ(prefilled["kvgov_sim"]["bootstrap_room"], 77);
  ASSERT_TRUE(decode_answer);
  ASSERT_EQ(decode_answer->status, 200) << decode_answer->body;
  const Json decoded = Json::parse(decode_answer->body);
  EXPECT_EQ(decoded["choices"][0]["text"], " tok0 tok1");
  EXPECT_EQ(decoded["kvgov_sim"]["pulled_tokens"], 40);  // D held none of it
  EXPECT_EQ(prefill->pulls(), 1u);
  EXPECT_EQ(prefill->pinned_blocks(), 0u);
}

TEST(LiveEngineSglangTest, ARoomNoDecodeEngineTakesLapses) {
  std::unique_ptr<LiveEngine> prefill =
      StartSglang("sim-p", ingest::EngineRole::kPrefill, std::chrono::milliseconds(100));
  ASSERT_NE(prefill, nullptr);
  const std::vector<int64_t> prompt = Tokens(40, 7);
  httplib::Result answer = PostCompletion(*prefill, RoomBody(prompt, *prefill, 5, 1, false));
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 500);
  EXPECT_EQ(Json::parse(answer->body)["error"]["message"],
            "bootstrap_room 5: no decode worker connected within 100 ms");
  EXPECT_EQ(prefill->pinned_blocks(), 0u);
  EXPECT_EQ(prefill->resident_blocks(), 2u);  // freed, still cached
  EXPECT_EQ(prefill->pulls(), 0u);
  httplib::Client client(prefill->control_url());
  answer = client.Post("/kvgov_sim/bootstrap", R"({"bootstrap_room":5})", "application/json");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 404);
  EXPECT_NE(answer->body.find("bootstrap_room 5 is unknown at engine sim-p"), std::string::npos)
      << answer->body;

  // SGLang's /flush_cache empties the pool, a room's pin with it.
  std::unique_ptr<LiveEngine> flushed = StartSglang("sim-f", ingest::EngineRole::kPrefill);
  ASSERT_NE(flushed, nullptr);
  std::future<httplib::Result> waiting = std::async(std::launch::async, [&] {
    return PostCompletion(*flushed, RoomBody(prompt, *flushed, 6, 1, false));
  });
  ASSERT_TRUE(Eventually([&] { return flushed->pinned_blocks() == 2; }));
  httplib::Client f_client(flushed->control_url());
  ASSERT_EQ(f_client.Post("/flush_cache", "", "application/json")->status, 200);
  answer = waiting.get();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 500);
  EXPECT_NE(answer->body.find("bootstrap_room 6: engine sim-f's cache was reset"),
            std::string::npos)
      << answer->body;
  EXPECT_EQ(flushed->resident_blocks(), 0u);
}

TEST(LiveEngineSglangTest, APrefillEngineTakesNoMoreRoomsThanItsThreadsServe) {
  LiveEngineOptions options;
  options.id = "sim-p";
  options.kind = ingest::EngineKind::kSglang;
  options.role = ingest::EngineRole::kPrefill;
  options.pool.capacity_blocks = 64;
  options.speedup = 1000;
  options.kv_lease = std::chrono::milliseconds(300);
  options.http_threads = 1;  // no thread left to serve a fetch
  EXPECT_FALSE(LiveEngine::Start(options).ok());
  options.http_threads = 3;  // two rooms, and a thread for their fetches
  Result<std::unique_ptr<LiveEngine>> started = LiveEngine::Start(options);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  LiveEngine& prefill = **started;
  std::vector<std::future<httplib::Result>> waiting;
  for (uint64_t room = 1; room <= 2; ++room) {
    const std::vector<int64_t> prompt = Tokens(32, 1000 * static_cast<int64_t>(room));
    waiting.push_back(std::async(std::launch::async, [&prefill, prompt, room] {
      return PostCompletion(prefill, RoomBody(prompt, prefill, room, 1, false));
    }));
  }
  ASSERT_TRUE(Eventually([&] { return prefill.pinned_blocks() == 4; }));
  httplib::Result busy = PostCompletion(prefill, RoomBody(Tokens(32, 5000), prefill, 3, 1, false));
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503);
  EXPECT_NE(busy->body.find("bootstrap_room 3: engine sim-p has 2 rooms waiting"),
            std::string::npos)
      << busy->body;
  for (std::future<httplib::Result>& leg : waiting) {
    httplib::Result lapsed = leg.get();
    ASSERT_TRUE(lapsed);
    EXPECT_EQ(lapsed->status, 500) << lapsed->body;
  }
}

TEST(LiveEngineSglangTest, ADecodeEngineWhoseRoomNeverComesFails) {
  std::unique_ptr<LiveEngine> prefill = StartSglang("sim-p", ingest::EngineRole::kPrefill);
  std::unique_ptr<LiveEngine> decode =
      StartSglang("sim-d", ingest::EngineRole::kDecode, std::chrono::milliseconds(100));
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  const std::vector<int64_t> prompt = Tokens(40, 7);
  httplib::Result answer = PostCompletion(*decode, RoomBody(prompt, *prefill, 9, 1, false));
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 503);
  EXPECT_NE(
      answer->body.find("bootstrap_room 9: the prefill engine at 127.0.0.1:" +
                        std::to_string(PortOf(*prefill)) + " did not hold the room within 100 ms"),
      std::string::npos)
      << answer->body;
  EXPECT_EQ(decode->failed_pulls(), 1u);
  // A prefill engine that cannot be reached fails at once.
  Json unreachable = RoomBody(prompt, *prefill, 10, 1, false);
  unreachable["bootstrap_port"] = 1;
  answer = PostCompletion(*decode, unreachable);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 503);
  EXPECT_NE(answer->body.find("bootstrap_room 10: the prefill engine at 127.0.0.1:1 is "
                              "unreachable"),
            std::string::npos)
      << answer->body;
  EXPECT_EQ(decode->failed_pulls(), 2u);
  EXPECT_EQ(decode->resident_blocks(), 0u);
}

TEST(LiveEngineSglangTest, BootstrapFieldsMissingOrMistypedAreRefusedNamingThem) {
  std::unique_ptr<LiveEngine> prefill = StartSglang("sim-p", ingest::EngineRole::kPrefill);
  std::unique_ptr<LiveEngine> decode = StartSglang("sim-d", ingest::EngineRole::kDecode);
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);
  const Json body = RoomBody(Tokens(40, 7), *prefill, 3, 1, false);
  struct Case {
    const char* field;
    Json value;  // null: the field left out
    const char* error;
  };
  const std::vector<Case> cases = {
      {"bootstrap_host", nullptr, "bootstrap_host: required"},
      {"bootstrap_host", 7, "bootstrap_host: want a string"},
      {"bootstrap_port", nullptr, "bootstrap_port: required"},
      {"bootstrap_port", "8998", "bootstrap_port: want an integer in 1-65535"},
      {"bootstrap_port", 70000, "bootstrap_port: want an integer in 1-65535"},
      {"bootstrap_room", nullptr, "bootstrap_room: required"},
      {"bootstrap_room", -1, "bootstrap_room: want an integer in 0..2^63-1"},
      {"bootstrap_room", Json::array({1, 2}), "bootstrap_room: want an integer"},
      {"bootstrap_room", 1.5, "bootstrap_room: want an integer"},
  };
  for (const LiveEngine* engine : {prefill.get(), decode.get()}) {
    for (const Case& c : cases) {
      Json partial = body;
      if (c.value.is_null()) {
        partial.erase(c.field);
      } else {
        partial[c.field] = c.value;
      }
      httplib::Result answer = PostCompletion(*engine, partial);
      ASSERT_TRUE(answer);
      EXPECT_EQ(answer->status, 400) << engine->id() << " " << c.field;
      EXPECT_NE(answer->body.find(c.error), std::string::npos) << answer->body;
    }
  }
  EXPECT_EQ(decode->failed_pulls(), 0u);  // refused before any fetch
  EXPECT_EQ(prefill->pinned_blocks(), 0u);
  EXPECT_TRUE(prefill->received_salts().empty());

  // The other protocol's handoff was routed to the wrong kind of engine.
  Json nixl = {{"prompt", Tokens(40, 7)}, {"kv_transfer_params", {{"do_remote_decode", true}}}};
  httplib::Result answer = PostCompletion(*prefill, nixl);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 400);
  EXPECT_NE(answer->body.find("kv_transfer_params: engine sim-p speaks SGLang's bootstrap rooms"),
            std::string::npos)
      << answer->body;
  std::unique_ptr<LiveEngine> vllm = StartRole("sim-v", ingest::EngineRole::kPrefill);
  ASSERT_NE(vllm, nullptr);
  answer = PostCompletion(*vllm, body);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 400);
  EXPECT_NE(answer->body.find("bootstrap_host: engine sim-v speaks vLLM's NixlConnector"),
            std::string::npos)
      << answer->body;
  // A bootstrap room asked for with no room in the body.
  httplib::Client client(prefill->control_url());
  answer = client.Post("/kvgov_sim/bootstrap", R"({"room":3})", "application/json");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 400);
  EXPECT_NE(answer->body.find("bootstrap_room: required"), std::string::npos) << answer->body;
}

// The body checks vLLM's OpenAI server makes (docs/formats/simulator.md,
// "HTTP control"), on a plain vLLM engine unless a test says otherwise.

std::unique_ptr<LiveEngine> StartChecked(int64_t max_model_len = 131072,
                                         ingest::EngineKind kind = ingest::EngineKind::kVllm) {
  LiveEngineOptions options;
  options.id = "sim-c";
  options.kind = kind;
  options.model = "sim-llama";
  options.pool.capacity_blocks = 64;
  options.pool.block_size = 16;
  options.speedup = 1000;
  options.token_interval = std::chrono::milliseconds(0);
  options.max_model_len = max_model_len;
  Result<std::unique_ptr<LiveEngine>> engine = LiveEngine::Start(options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

// Posts `body` (raw JSON text) to `path`; the status and the parsed answer
// (null when it is not JSON, as a stream is not).
std::pair<int, Json> PostRaw(const LiveEngine& engine, const std::string& path,
                             const std::string& body, const httplib::Headers& headers = {}) {
  httplib::Client client(engine.control_url());
  client.set_read_timeout(std::chrono::seconds(10));
  httplib::Result result = client.Post(path, headers, body, "application/json");
  if (!result) return {-1, Json()};
  return {result->status, Json::parse(result->body, nullptr, /*allow_exceptions=*/false)};
}

// A refusal in vLLM's error shape: {"error": {message, type, param, code}}.
void ExpectRefusal(const std::pair<int, Json>& answer, const std::string& in_message,
                   const std::string& type, const Json& param) {
  EXPECT_EQ(answer.first, 400) << answer.second.dump();
  ASSERT_TRUE(answer.second.is_object() && answer.second.contains("error")) << answer.second.dump();
  const Json& error = answer.second["error"];
  ASSERT_TRUE(error.is_object()) << error.dump();
  EXPECT_NE(error.value("message", "").find(in_message), std::string::npos) << error.dump();
  EXPECT_EQ(error.value("type", ""), type) << error.dump();
  EXPECT_TRUE(error.contains("param")) << error.dump();  // null when none
  EXPECT_EQ(error.value("param", Json()), param) << error.dump();
  EXPECT_EQ(error.value("code", 0), 400) << error.dump();
}

TEST(LiveEngineBadInputTest, AFieldOfTheWrongTypeIsRefusedWith400NamingItNever500) {
  std::unique_ptr<LiveEngine> engine = StartChecked();
  ASSERT_NE(engine, nullptr);
  // Each of these reached a nlohmann conversion that threw (a 500, which
  // kvgov's gateway retries on another engine) or was refused in another
  // shape; vLLM's pydantic models refuse them, 400 naming the field.
  const Json null;
  ExpectRefusal(PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2],"max_tokens":"four"})"),
                "max_tokens: Input should be a valid integer, unable to parse string",
                "Bad Request", null);
  ExpectRefusal(PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2],"max_tokens":2.5})"),
                "max_tokens: Input should be a valid integer, got a number with a fractional",
                "Bad Request", null);
  ExpectRefusal(PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2],"max_tokens":[4]})"),
                "max_tokens: Input should be a valid integer", "Bad Request", null);
  ExpectRefusal(PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2],"stream":"maybe"})"),
                "stream: Input should be a valid boolean", "Bad Request", null);
  ExpectRefusal(PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2],"stream":2})"),
                "stream: Input should be a valid boolean", "Bad Request", null);
  ExpectRefusal(PostRaw(*engine, "/v1/completions", R"({"prompt":5})"), "prompt", "Bad Request",
                null);
  ExpectRefusal(PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2],"cache_salt":3})"),
                "Parameter 'cache_salt' must be a non-empty string", "Bad Request", null);
  ExpectRefusal(PostRaw(*engine, "/v1/completions",
                        R"({"prompt":[1,2],"stream":true,"stream_options":{"include_usage":"x"}})"),
                "stream_options.include_usage: Input should be a valid boolean", "Bad Request",
                null);
  ExpectRefusal(PostRaw(*engine, "/v1/completions",
                        R"({"prompt":[1,2],"stream_options":{"include_usage":true}})"),
                "Stream options can only be defined when `stream=True`", "Bad Request",
                "stream_options");
  ExpectRefusal(PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2],"request_id":7})"),
                "request_id: Input should be a valid string", "Bad Request", null);
  ExpectRefusal(
      PostRaw(*engine, "/v1/chat/completions", R"({"messages":[{"role":5,"content":"hi"}]})"),
      "messages[0].role: Input should be a valid string", "Bad Request", null);
  ExpectRefusal(PostRaw(*engine, "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"hi"}],)"
                        R"("max_completion_tokens":"x"})"),
                "max_completion_tokens: Input should be a valid integer", "Bad Request", null);
  ExpectRefusal(PostRaw(*engine, "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"hi"}],)"
                        R"("add_generation_prompt":null})"),
                "add_generation_prompt: Input should be a valid boolean", "Bad Request", null);
  ExpectRefusal(PostRaw(*engine, "/tokenize",
                        R"({"messages":[{"role":"user","content":"hi"}],)"
                        R"("add_generation_prompt":"x"})"),
                "add_generation_prompt: Input should be a valid boolean", "Bad Request", null);
  // None of them reached the pool.
  EXPECT_EQ(engine->resident_blocks(), 0u);
  EXPECT_EQ(engine->next_seq(), 0u);
}

TEST(LiveEngineBadInputTest, ANearTypeIsConvertedAsVllmsPydanticModelsConvertIt) {
  std::unique_ptr<LiveEngine> engine = StartChecked();
  ASSERT_NE(engine, nullptr);
  // Pydantic's lax mode, which vLLM's request models use: a numeric string
  // or an integral float is an int, "yes" or 1 a bool, null is absent.
  std::pair<int, Json> answer =
      PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2,3],"max_tokens":" 1_0.0 "})");
  ASSERT_EQ(answer.first, 200) << answer.second.dump();
  EXPECT_EQ(answer.second["usage"]["completion_tokens"], 10);
  answer = PostRaw(*engine, "/v1/completions",
                   R"({"prompt":[1,2,3],"max_tokens":3.0,"stream":0,"cache_salt":null})");
  ASSERT_EQ(answer.first, 200) << answer.second.dump();
  EXPECT_EQ(answer.second["usage"]["completion_tokens"], 3);
  // "yes" streams: the answer is server-sent events, not one JSON body.
  httplib::Client client(engine->control_url());
  httplib::Result streamed =
      client.Post("/v1/completions", R"({"prompt":[1,2,3],"max_tokens":"2","stream":"yes"})",
                  "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  const std::vector<std::string> events = EventData(streamed->body);
  ASSERT_EQ(events.size(), 4u) << streamed->body;  // two tokens, the finish, [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
  // A chat's max_completion_tokens counts over its max_tokens, as in vLLM.
  answer = PostRaw(*engine, "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":9,)"
                   R"("max_completion_tokens":"2"})");
  ASSERT_EQ(answer.first, 200) << answer.second.dump();
  EXPECT_EQ(answer.second["usage"]["completion_tokens"], 2);
}

TEST(LiveEngineBadInputTest, RefusesWhatDoesNotFitInMaxModelLenInVllmsWords) {
  std::unique_ptr<LiveEngine> engine = StartChecked(/*max_model_len=*/64);
  ASSERT_NE(engine, nullptr);
  // 60 prompt tokens and 4 to generate fill the 64 exactly.
  std::pair<int, Json> answer = PostRaw(*engine, "/v1/completions",
                                        Json{{"prompt", Tokens(60, 1)}, {"max_tokens", 4}}.dump());
  ASSERT_EQ(answer.first, 200) << answer.second.dump();
  const uint64_t seq = engine->next_seq();
  const size_t resident = engine->resident_blocks();
  // One more prompt token does not fit (vLLM's renderer, TokenizeParams).
  answer = PostRaw(*engine, "/v1/completions",
                   Json{{"prompt", Tokens(61, 500)}, {"max_tokens", 4}}.dump());
  ExpectRefusal(answer,
                "You passed 61 input tokens and requested 4 output tokens. However, the model's "
                "context length is only 64 tokens, resulting in a maximum input length of 60 "
                "tokens. Please reduce the length of the input prompt. (parameter=input_tokens, "
                "value=61)",
                "BadRequestError", "input_tokens");
  // Nor does a prompt of 64 tokens with a streamed answer, or a text
  // prompt of 65 words; nor more tokens than the whole context.
  answer = PostRaw(*engine, "/v1/completions",
                   Json{{"prompt", Tokens(64, 500)}, {"max_tokens", 1}, {"stream", true}}.dump());
  ExpectRefusal(answer, "You passed 64 input tokens and requested 1 output tokens",
                "BadRequestError", "input_tokens");
  std::string words;
  for (int i = 0; i < 65; ++i) words += "w" + std::to_string(i) + " ";
  answer = PostRaw(*engine, "/v1/completions", Json{{"prompt", words}}.dump());
  ExpectRefusal(answer, "You passed 65 input tokens and requested 0 output tokens",
                "BadRequestError", "input_tokens");
  answer = PostRaw(*engine, "/v1/completions",
                   Json{{"prompt", Tokens(8, 500)}, {"max_tokens", "65"}}.dump());
  ExpectRefusal(answer,
                "max_tokens=65 cannot be greater than max_model_len=64. Please request fewer "
                "output tokens. (parameter=max_tokens, value=65)",
                "BadRequestError", "max_tokens");
  // A chat names the field it counted.
  answer = PostRaw(
      *engine, "/v1/chat/completions",
      Json{{"messages", {{{"role", "user"}, {"content", words}}}}, {"max_completion_tokens", 1}}
          .dump());
  ExpectRefusal(answer, "You passed 67 input tokens and requested 1 output tokens",
                "BadRequestError", "input_tokens");
  answer = PostRaw(
      *engine, "/v1/chat/completions",
      Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_completion_tokens", 100}}
          .dump());
  ExpectRefusal(answer, "max_completion_tokens=100 cannot be greater than max_model_len=64",
                "BadRequestError", "max_completion_tokens");
  // Refused before the pool: nothing cached, nothing published.
  EXPECT_EQ(engine->next_seq(), seq);
  EXPECT_EQ(engine->resident_blocks(), resident);
  // /tokenize reports the length, as vLLM's does.
  answer = PostRaw(*engine, "/tokenize", R"({"prompt":"a b"})");
  ASSERT_EQ(answer.first, 200);
  EXPECT_EQ(answer.second["max_model_len"], 64);

  // An SGLang engine refuses reaching the length, in its own words.
  std::unique_ptr<LiveEngine> sglang = StartChecked(64, ingest::EngineKind::kSglang);
  ASSERT_NE(sglang, nullptr);
  answer = PostRaw(*sglang, "/v1/completions",
                   Json{{"prompt", Tokens(60, 1)}, {"max_tokens", 3}}.dump());
  ASSERT_EQ(answer.first, 200) << answer.second.dump();
  answer = PostRaw(*sglang, "/v1/completions",
                   Json{{"prompt", Tokens(60, 1)}, {"max_tokens", 4}}.dump());
  ExpectRefusal(answer,
                "Requested token count exceeds the model's maximum context length of 64 tokens. "
                "You requested a total of 64 tokens: 60 tokens from the input messages and 4 "
                "tokens for the completion.",
                "BadRequestError", Json());
  answer = PostRaw(*sglang, "/v1/completions", Json{{"prompt", Tokens(64, 1)}}.dump());
  ExpectRefusal(answer,
                "The input (64 tokens) is longer than the model's context length (64 tokens).",
                "BadRequestError", Json());

  LiveEngineOptions options;
  options.max_model_len = 0;
  EXPECT_FALSE(LiveEngine::Start(options).ok());
}

bool IsUnixSecondsNear(const Json& created, int64_t before, int64_t after) {
  return created.is_number_integer() && created.get<int64_t>() >= before &&
         created.get<int64_t>() <= after;
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(LiveEngineAnswerTest, AnswersCarryVllmsIdCreatedObjectAndModel) {
  std::unique_ptr<LiveEngine> engine = StartChecked();
  ASSERT_NE(engine, nullptr);
  const int64_t before = UnixSeconds();
  std::pair<int, Json> answer =
      PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2,3],"max_tokens":1})");
  ASSERT_EQ(answer.first, 200) << answer.second.dump();
  const std::string id = answer.second.value("id", "");
  ASSERT_TRUE(id.starts_with("cmpl-")) << answer.second.dump();
  EXPECT_EQ(id.size(), 5u + 32u);
  EXPECT_TRUE(IsLowerHex(std::string_view(id).substr(5))) << id;
  EXPECT_EQ(answer.second["object"], "text_completion");
  EXPECT_EQ(answer.second["model"], "sim-llama");
  EXPECT_TRUE(IsUnixSecondsNear(answer.second["created"], before, UnixSeconds()))
      << answer.second.dump();
  // A second request gets another id.
  EXPECT_NE(PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2,3]})").second["id"], id);
  // X-Request-Id, else the body's request_id, names the request.
  answer = PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2,3],"request_id":"body-7"})",
                   {{"X-Request-Id", "req-42"}});
  EXPECT_EQ(answer.second["id"], "cmpl-req-42");
  answer = PostRaw(*engine, "/v1/completions", R"({"prompt":[1,2,3],"request_id":"body-7"})");
  EXPECT_EQ(answer.second["id"], "cmpl-body-7");
  answer = PostRaw(*engine, "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})");
  ASSERT_EQ(answer.first, 200) << answer.second.dump();
  EXPECT_TRUE(answer.second.value("id", "").starts_with("chatcmpl-")) << answer.second.dump();
  EXPECT_EQ(answer.second["object"], "chat.completion");
  EXPECT_TRUE(IsUnixSecondsNear(answer.second["created"], before, UnixSeconds()));

  // Streamed, every chunk carries the request's one id and created, the
  // usage chunk too.
  for (const bool chat : {false, true}) {
    const Json body = chat ? Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                  {"max_tokens", 2},
                                  {"stream", true},
                                  {"stream_options", {{"include_usage", true}}}}
                           : Json{{"prompt", Tokens(3, 1)},
                                  {"max_tokens", 2},
                                  {"stream", true},
                                  {"stream_options", {{"include_usage", true}}}};
    httplib::Client client(engine->control_url());
    httplib::Result streamed = client.Post(chat ? "/v1/chat/completions" : "/v1/completions",
                                           body.dump(), "application/json");
    ASSERT_TRUE(streamed);
    ASSERT_EQ(streamed->status, 200) << streamed->body;
    const std::vector<std::string> events = EventData(streamed->body);
    ASSERT_EQ(events.size(), 5u) << streamed->body;  // 2 tokens, finish, usage, [DONE]
    std::string first_id;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const Json chunk = Json::parse(events[i]);
      if (i == 0) first_id = chunk.value("id", "");
      EXPECT_TRUE(first_id.starts_with(chat ? "chatcmpl-" : "cmpl-")) << events[i];
      EXPECT_EQ(chunk["id"], first_id) << events[i];
      EXPECT_EQ(chunk["object"], chat ? "chat.completion.chunk" : "text_completion");
      EXPECT_EQ(chunk["model"], "sim-llama");
      EXPECT_TRUE(IsUnixSecondsNear(chunk["created"], before, UnixSeconds())) << events[i];
    }
    EXPECT_EQ(Json::parse(events[3])["usage"]["completion_tokens"], 2);
  }
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
