#include "gateway/request_path.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kvgov::gateway {
namespace {

using Json = nlohmann::json;

// An HTTP server of the test's own on a free port, with vLLM's /tokenize
// (eight tokens, whatever the prompt); Listen once the routes are added.
class TestServer {
 public:
  TestServer() {
    server_.Post("/tokenize", [](const httplib::Request&, httplib::Response& response) {
      response.set_content(R"({"count":8,"max_model_len":4096,"tokens":[1,2,3,4,5,6,7,8]})",
                           "application/json");
    });
  }
  virtual ~TestServer() { Stop(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 protected:
  // Bound and listening: a connection waits in the backlog until the
  // accept loop runs.
  void Listen() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  // Called by a subclass's destructor: its handlers use its members.
  void Stop() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  httplib::Server server_;

 private:
  int port_ = 0;
  std::thread thread_;
};

// An engine of the test's own (cpp-httplib): vLLM's /tokenize (eight
// tokens, whatever the prompt) and chat completions, whole or streamed,
// reporting 4 of 8 prompt tokens cached. `refuse_first` answers the first
// chat 503, as an engine that is going away does.
class Engine : public TestServer {
 public:
  explicit Engine(bool refuse_first = false) : refuse_next_(refuse_first) {
    server_.Post("/v1/chat/completions",
                 [this](const httplib::Request& request, httplib::Response& response) {
                   const Json body = Json::parse(request.body);
                   {
                     std::lock_guard lock(mu_);
                     chats_.push_back(body);
                   }
                   if (refuse_next_.exchange(false)) {
                     response.status = 503;
                     response.set_content(R"({"error":"draining"})", "application/json");
                     return;
                   }
                   const std::string usage =
                       R"("usage":{"prompt_tokens":8,"completion_tokens":2,"total_tokens":10,)"
                       R"("prompt_tokens_details":{"cached_tokens":4}})";
                   if (!body.value("stream", false)) {
                     response.set_content(R"({"id":"c1","object":"chat.completion","choices":[)"
                                          R"({"index":0,"message":{"role":"assistant",)"
                                          R"("content":"hi"}}],)" +
                                              usage + "}",
                                          "application/json");
                     return;
                   }
                   std::string events;
                   for (const char* piece : {"h", "i"}) {
                     events += std::string(R"(data: {"choices":[{"index":0,"delta":{"content":")") +
                               piece + "\"}}]}\n\n";
                   }
                   if (body.contains("stream_options")) {
                     events += "data: {\"choices\":[]," + usage + "}\n\n";
                   }
                   events += "data: [DONE]\n\n";
                   response.set_content(events, "text/event-stream");
                 });
    Listen();
  }
  ~Engine() override { Stop(); }
  std::vector<Json> chats() const {
    std::lock_guard lock(mu_);
    return chats_;
  }

 private:
  std::atomic<bool> refuse_next_;
  mutable std::mutex mu_;
  std::vector<Json> chats_;
};

// A vLLM pair for the handoff (NixlConnector): as a prefill worker it
// answers with kv_transfer_params; as a decode worker it sends its head at
// once and its first token only after `first_token_after`, watching its
// client meanwhile, as an engine that aborts a request whose client left.
class DisaggregatedEngine : public TestServer {
 public:
  explicit DisaggregatedEngine(std::chrono::milliseconds first_token_after)
      : first_token_after_(first_token_after) {
    server_.Post("/v1/chat/completions", [this](const httplib::Request& request,
                                                httplib::Response& response) {
      const Json body = Json::parse(request.body);
      const Json params = body.value("kv_transfer_params", Json::object());
      if (params.value("do_remote_decode", false)) {
        ++prefills_;
        response.set_content(R"({"id":"p1","object":"chat.completion","choices":[],)"
                             R"("kv_transfer_params":{"remote_block_ids":[1,2]}})",
                             "application/json");
        return;
      }
      ++decodes_;
      const auto start = std::chrono::steady_clock::now();
      response.set_chunked_content_provider(
          "text/event-stream", [this, start](size_t, httplib::DataSink& sink) {
            while (std::chrono::steady_clock::now() - start < first_token_after_) {
              if (!sink.is_writable()) {
                ++aborted_;
                return false;
              }
              std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
            const std::string event =
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
                "data: [DONE]\n\n";
            sink.write(event.data(), event.size());
            sink.done();
            return true;
          });
    });
    Listen();
  }
  ~DisaggregatedEngine() override { Stop(); }
  int prefills() const { return prefills_; }
  int decodes() const { return decodes_; }
  int aborted() const { return aborted_; }

 private:
  const std::chrono::milliseconds first_token_after_;
  std::atomic<int> prefills_{0};
  std::atomic<int> decodes_{0};
  std::atomic<int> aborted_{0};
};

// The pin of a handoff, as a test holds it: its span two blocks, every
// one creditable until the plane's Withdraw.
class TestPin final : public HandoffPin {
 public:
  TestPin(std::atomic<bool>& withdrawn, std::vector<NIXLLeaseEvent>& ended, std::mutex& mu)
      : withdrawn_(withdrawn), ended_(ended), mu_(mu) {}
  const std::string& lease_id() const override { return lease_id_; }
  PinView View() const override {
    PinView pin;
    pin.lease_id = lease_id_;
    pin.lease_state = NIXLLeaseState::kActive;
    pin.span_blocks = 2;
    pin.creditable_blocks = withdrawn_.load() ? 0 : 2;
    pin.limit = withdrawn_.load() ? "quarantine" : "";
    return pin;
  }
  void End(NIXLLeaseEvent event) override {
    std::lock_guard lock(mu_);
    ended_.push_back(event);
  }

 private:
  const std::string lease_id_ = "handoff-test";
  std::atomic<bool>& withdrawn_;
  std::vector<NIXLLeaseEvent>& ended_;
  std::mutex& mu_;
};

// The daemon's side of the door, recorded: a model "llama" served by the
// workers given, each on its engine; the router picks the first candidate.
// With ServeInTwoSteps, the model is served by prefill and decode pools.
class RecordingPlane final : public Plane {
 public:
  explicit RecordingPlane(std::map<std::string, std::string> engine_of)
      : engine_of_(std::move(engine_of)) {}

  GatewayLimits& mutable_limits() { return limits_; }
  const GatewayLimits& limits() const override { return limits_; }

  Result<auth::Principal> Authorize(std::string_view authorization,
                                    auth::Role role) const override {
    if (role != auth::Role::kInfer) return Status::PermissionDenied("not an infer route");
    if (authorization != "Bearer sk-test") return Status::Unauthenticated("unknown token");
    return auth::Principal{"test", ""};
  }
  std::set<std::string> KnownModels() const override { return {"llama"}; }
  std::vector<std::string> ServingWorkers(std::string_view model) const override {
    std::vector<std::string> out;
    if (model != "llama") return out;
    for (const auto& [worker, url] : engine_of_) out.push_back(worker);
    return out;
  }
  std::optional<EngineAddress> EngineOf(std::string_view worker) const override {
    const auto it = engine_of_.find(std::string(worker));
    if (it == engine_of_.end()) return std::nullopt;
    return EngineAddress{it->first, it->second, "/tokenize"};
  }
  int64_t BlockSize(std::string_view) const override { return 4; }
  uint64_t InFlight(std::string_view) const override { return 0; }
  std::optional<Pools> Disaggregated(const std::vector<std::string>&) const override {
    if (pools_.prefill.empty()) return std::nullopt;
    return pools_;
  }
  void ServeInTwoSteps(Pools pools) { pools_ = std::move(pools); }
  void ObservePrompt(std::string_view, std::string_view,
                     const std::vector<int64_t>& tokens) override {
    std::lock_guard lock(mu_);
    observed_tokens_ = tokens.size();
  }
  Result<Salted> Salt(router::RouteRequest&) override { return Salted{"salt-acme", false}; }
  Result<router::RouteDecision> Route(const router::RouteRequest& route, const Salted& salted,
                                      std::string decision_id, RouteCount) override {
    std::lock_guard lock(mu_);
    router::RouteDecision decision;
    decision.decision_id = std::move(decision_id);
    decision.worker = route.workers.front();
    decision.cache_salt = salted.salt;
    decision.overlap_blocks = 1;
    open_.insert(decision.decision_id);
    ++routed_;
    return decision;
  }
  void Prefilled(const std::string&) override { ++prefilled_; }
  void Done(const std::string& decision_id) override {
    std::lock_guard lock(mu_);
    EXPECT_EQ(open_.erase(decision_id), 1u) << "Done twice, or for no decision: " << decision_id;
  }
  void Account(const std::string& worker, const std::string&, const Prediction& prediction,
               const std::optional<EngineUsage>& usage) override {
    std::lock_guard lock(mu_);
    accounted_.push_back({worker, prediction, usage});
  }
  Result<std::unique_ptr<HandoffPin>> Pin(const HandoffRequest&, std::string_view, std::string_view,
                                          NIXLTransferRole) override {
    return std::unique_ptr<HandoffPin>(std::make_unique<TestPin>(withdrawn_, lease_ends_, mu_));
  }
  void RecordHandoff(HandoffRecord record, std::optional<double>) override {
    std::lock_guard lock(mu_);
    handoffs_.push_back(std::move(record));
  }
  void Withdraw() { withdrawn_ = true; }
  std::vector<HandoffRecord> handoffs() const {
    std::lock_guard lock(mu_);
    return handoffs_;
  }
  std::vector<NIXLLeaseEvent> lease_ends() const {
    std::lock_guard lock(mu_);
    return lease_ends_;
  }
  void CountRequest(std::string_view) override {}
  void CountTokenizeFailure(std::string_view) override {}
  void CountRetry() override { ++retries_; }
  void CountRelayed(size_t bytes) override { relayed_ += bytes; }

  struct Accounted {
    std::string worker;
    Prediction prediction;
    std::optional<EngineUsage> usage;
  };
  std::vector<Accounted> accounted() const {
    std::lock_guard lock(mu_);
    return accounted_;
  }
  size_t open_decisions() const {
    std::lock_guard lock(mu_);
    return open_.size();
  }
  int routed() const {
    std::lock_guard lock(mu_);
    return routed_;
  }
  size_t observed_tokens() const {
    std::lock_guard lock(mu_);
    return observed_tokens_;
  }
  int prefilled() const { return prefilled_; }
  int retries() const { return retries_; }
  size_t relayed() const { return relayed_; }

 private:
  const std::map<std::string, std::string> engine_of_;
  GatewayLimits limits_;
  Pools pools_;
  std::atomic<bool> withdrawn_{false};
  mutable std::mutex mu_;
  std::vector<HandoffRecord> handoffs_;
  std::vector<NIXLLeaseEvent> lease_ends_;
  std::set<std::string> open_;
  int routed_ = 0;
  size_t observed_tokens_ = 0;
  std::vector<Accounted> accounted_;
  std::atomic<int> prefilled_{0};
  std::atomic<int> retries_{0};
  std::atomic<size_t> relayed_{0};
};

class RequestPathTest : public ::testing::Test {
 protected:
  // Engines outlive the front door, whose pool keeps connections to them
  // (an httplib server waits for a kept connection's timeout to stop).
  Engine& AddEngine(bool refuse_first = false) {
    return *engines_.emplace_back(std::make_unique<Engine>(refuse_first));
  }
  DisaggregatedEngine& AddDisaggregatedEngine(std::chrono::milliseconds first_token_after) {
    return *disaggregated_engines_.emplace_back(
        std::make_unique<DisaggregatedEngine>(first_token_after));
  }
  // The plane outlives the front door too: a stream's usage is accounted
  // after its last byte has gone to the client.
  RecordingPlane& MakePlane(std::map<std::string, std::string> engine_of) {
    plane_ = std::make_unique<RecordingPlane>(std::move(engine_of));
    return *plane_;
  }
  void Serve(RecordingPlane& plane) {
    FrontDoorOptions options;
    options.loops = 2;
    options.error_body = [](int status, std::string_view message) {
      return Json{{"status", status}, {"message", message}}.dump();
    };
    Result<std::unique_ptr<FrontDoor>> door = FrontDoor::Start(options, GatewayHandler(plane));
    ASSERT_TRUE(door.ok()) << door.status().message();
    door_ = *std::move(door);
  }
  httplib::Result Post(std::string_view path, const Json& body,
                       std::string_view authorization = "Bearer sk-test") {
    httplib::Client client("127.0.0.1", door_->port());
    httplib::Headers headers;
    if (!authorization.empty()) headers.emplace("Authorization", std::string(authorization));
    return client.Post(std::string(path), headers, body.dump(), "application/json");
  }
  static Json Chat(bool stream = false) {
    return {{"model", "llama"},
            {"stream", stream},
            {"messages", Json::array({{{"role", "user"}, {"content", "hello"}}})}};
  }

  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::unique_ptr<DisaggregatedEngine>> disaggregated_engines_;
  std::unique_ptr<RecordingPlane> plane_;
  std::unique_ptr<FrontDoor> door_;
};

TEST_F(RequestPathTest, AChatIsTokenizedSaltedForwardedAndAccountedWithTheEnginesUsage) {
  Engine& engine = AddEngine();
  RecordingPlane& plane = MakePlane({{"w1", engine.url()}});
  Serve(plane);
  httplib::Result answer = Post("/v1/chat/completions", Chat());
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  EXPECT_EQ(Json::parse(answer->body)["choices"][0]["message"]["content"], "hi");

  EXPECT_EQ(plane.observed_tokens(), 8u) << "routed on the engine's own tokens";
  const std::vector<Json> chats = engine.chats();
  ASSERT_EQ(chats.size(), 1u);
  EXPECT_EQ(chats[0]["cache_salt"], "salt-acme");
  const std::vector<RecordingPlane::Accounted> accounted = plane.accounted();
  ASSERT_EQ(accounted.size(), 1u);
  EXPECT_EQ(accounted[0].worker, "w1");
  EXPECT_EQ(accounted[0].prediction.routed_tokens, 8);
  EXPECT_EQ(accounted[0].prediction.predicted_tokens, 4) << "one block of 4 credited";
  ASSERT_TRUE(accounted[0].usage.has_value());
  EXPECT_EQ(accounted[0].usage->prompt_tokens, 8);
  EXPECT_EQ(accounted[0].usage->cached_tokens, 4);
  EXPECT_EQ(plane.open_decisions(), 0u);
  EXPECT_EQ(plane.relayed(), answer->body.size());
}

TEST_F(RequestPathTest, AnEngineRefusingBeforeAnyByteIsRetriedOnTheNextCandidate) {
  Engine& refusing = AddEngine(/*refuse_first=*/true);
  Engine& healthy = AddEngine();
  RecordingPlane& plane = MakePlane({{"w1", refusing.url()}, {"w2", healthy.url()}});
  Serve(plane);
  httplib::Result answer = Post("/v1/chat/completions", Chat());
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200) << answer->body;
  EXPECT_EQ(refusing.chats().size(), 1u);
  EXPECT_EQ(healthy.chats().size(), 1u);
  EXPECT_EQ(plane.routed(), 2);
  EXPECT_EQ(plane.retries(), 1);
  EXPECT_EQ(plane.open_decisions(), 0u) << "the refused try was released too";
  ASSERT_EQ(plane.accounted().size(), 1u);
  EXPECT_EQ(plane.accounted()[0].worker, "w2");
}

TEST_F(RequestPathTest, AStreamTurnsToDecodeAtItsFirstEventAndHidesTheUsageItAskedFor) {
  Engine& engine = AddEngine();
  RecordingPlane& plane = MakePlane({{"w1", engine.url()}});
  Serve(plane);
  httplib::Result answer = Post("/v1/chat/completions", Chat(/*stream=*/true));
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  // The gateway asked for usage; the client did not, and does not see it.
  ASSERT_EQ(engine.chats().size(), 1u);
  EXPECT_EQ(engine.chats()[0]["stream_options"]["include_usage"], true);
  EXPECT_EQ(answer->body.find("usage"), std::string::npos) << answer->body;
  EXPECT_NE(answer->body.find("data: [DONE]"), std::string::npos) << answer->body;
  EXPECT_EQ(plane.prefilled(), 1);
  // Accounted once the stream has ended, after its last byte was sent.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (plane.accounted().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(plane.accounted().size(), 1u);
  ASSERT_TRUE(plane.accounted()[0].usage.has_value());
  EXPECT_EQ(plane.accounted()[0].usage->cached_tokens, 4);
  EXPECT_EQ(plane.open_decisions(), 0u);
}

TEST_F(RequestPathTest, RefusalsComeInTheWiresOwnShapeAndRouteNothing) {
  Engine& engine = AddEngine();
  RecordingPlane& plane = MakePlane({{"w1", engine.url()}});
  Serve(plane);

  httplib::Result anonymous = Post("/v1/chat/completions", Chat(), "");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(anonymous->get_header_value("WWW-Authenticate"), "Bearer realm=\"kvgov\"");
  EXPECT_EQ(Json::parse(anonymous->body)["error"]["code"], "invalid_api_key");

  Json unknown = Chat();
  unknown["model"] = "mistral";
  httplib::Result missing = Post("/v1/chat/completions", unknown);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(Json::parse(missing->body)["error"]["message"],
            "the model 'mistral' does not exist; this gateway serves 'llama'");

  plane.mutable_limits().max_requests = 0;
  httplib::Result busy = Post("/v1/chat/completions", Chat());
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 429);
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
  EXPECT_EQ(Json::parse(busy->body)["error"]["code"], "gateway_at_capacity");
  // Anthropic's clients know overload as 529, in their error shape.
  const Json message = {{"model", "llama"},
                        {"max_tokens", 8},
                        {"messages", Json::array({{{"role", "user"}, {"content", "hello"}}})}};
  httplib::Result overloaded = Post("/v1/messages", message);
  ASSERT_TRUE(overloaded);
  EXPECT_EQ(overloaded->status, 529);
  const Json error = Json::parse(overloaded->body);
  EXPECT_EQ(error["type"], "error");
  EXPECT_EQ(error["error"]["type"], "overloaded_error");

  EXPECT_EQ(plane.routed(), 0);
  EXPECT_TRUE(engine.chats().empty());
}

// A handoff is recorded when the last of its coroutines lets go of it: the
// pin's watchdog may do so a tick after the client has its answer. Waits
// (at most 10 s) for the first record.
std::vector<HandoffRecord> RecordedHandoffs(const RecordingPlane& plane) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (plane.handoffs().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return plane.handoffs();
}

// The handoff on the loop: a span withdrawn while the decode worker has
// not sent its first token fails the handoff within the watchdog's period,
// closes the decode request (the engine sees its client go), ends the pin
// with abort and answers the client 503, no byte of the stream sent.
TEST_F(RequestPathTest, AWithdrawalBeforeTheFirstTokenClosesTheDecodeRequestAndAnswers503) {
  DisaggregatedEngine& prefill = AddDisaggregatedEngine(std::chrono::milliseconds(0));
  DisaggregatedEngine& decode = AddDisaggregatedEngine(std::chrono::seconds(20));
  RecordingPlane& plane = MakePlane({{"p", prefill.url()}, {"d", decode.url()}});
  plane.ServeInTwoSteps({{"p"}, {"d"}});
  Serve(plane);
  std::optional<httplib::Result> answer;
  std::thread client([&] { answer.emplace(Post("/v1/chat/completions", Chat(/*stream=*/true))); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (decode.decodes() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(decode.decodes(), 1);
  plane.Withdraw();
  client.join();
  ASSERT_TRUE(answer.has_value() && *answer);
  EXPECT_EQ((*answer)->status, 503) << (*answer)->body;
  EXPECT_EQ(Json::parse((*answer)->body)["error"]["code"], "span_withdrawn");
  while (decode.aborted() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(decode.aborted(), 1) << "the decode engine saw its client go";
  EXPECT_EQ(prefill.prefills(), 1);
  EXPECT_EQ(plane.lease_ends(), std::vector<NIXLLeaseEvent>{NIXLLeaseEvent::kAbort});
  const std::vector<HandoffRecord> handoffs = RecordedHandoffs(plane);
  ASSERT_EQ(handoffs.size(), 1u);
  EXPECT_EQ(handoffs[0].outcome, HandoffOutcome::kWithdrawn);
  EXPECT_EQ(handoffs[0].prefill_worker, "p");
  EXPECT_EQ(handoffs[0].decode_worker, "d");
  EXPECT_EQ(plane.open_decisions(), 0u) << "both legs' loads released";
}

// The same handoff without a withdrawal: the first token reaches the client
// and the pin ends as completed.
TEST_F(RequestPathTest, AHandoffRelaysTheDecodeWorkersStreamAndCompletesThePin) {
  DisaggregatedEngine& prefill = AddDisaggregatedEngine(std::chrono::milliseconds(0));
  DisaggregatedEngine& decode = AddDisaggregatedEngine(std::chrono::milliseconds(30));
  RecordingPlane& plane = MakePlane({{"p", prefill.url()}, {"d", decode.url()}});
  plane.ServeInTwoSteps({{"p"}, {"d"}});
  Serve(plane);
  httplib::Result answer = Post("/v1/chat/completions", Chat(/*stream=*/true));
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  EXPECT_NE(answer->body.find("\"content\":\"hi\""), std::string::npos) << answer->body;
  EXPECT_EQ(decode.aborted(), 0);
  EXPECT_EQ(plane.lease_ends(), std::vector<NIXLLeaseEvent>{NIXLLeaseEvent::kTransferComplete});
  const std::vector<HandoffRecord> handoffs = RecordedHandoffs(plane);
  ASSERT_EQ(handoffs.size(), 1u);
  EXPECT_EQ(handoffs[0].outcome, HandoffOutcome::kCompleted);
  EXPECT_EQ(plane.open_decisions(), 0u);
}

}  // namespace
}  // namespace kvgov::gateway
