#include "simfleet/instant_engine.h"

#include <utility>  // before Asio: see gateway/front_door.h

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "gateway/front_door.h"
#include "gateway/routes.h"
#include "kvgov/core/mutex.h"

namespace kvgov::simfleet {

namespace asio = boost::asio;
using gateway::Exchange;
using Json = nlohmann::json;

// Named values for every awaited call: see src/server/gateway.cc on GCC 12.
constexpr std::string_view kJson = "application/json";
constexpr std::string_view kEventStream = "text/event-stream";

struct InstantEngine::Impl {
  InstantEngineOptions options;
  std::unique_ptr<gateway::FrontDoor> door;
  // Whole answers by request body (path and body): a benchmark sends the
  // same request again and again, and the engine must cost next to
  // nothing. Cleared when full.
  static constexpr size_t kMaxAnswers = 4096;
  struct Kept {
    std::string body;
    std::chrono::milliseconds wait{0};  // the answer's tokens' time
  };
  Mutex answers_mu;
  std::unordered_map<std::string, Kept> answers KVGOV_GUARDED_BY(answers_mu);

  std::optional<Kept> Answer(const std::string& key) {
    MutexLock lock(answers_mu);
    const auto it = answers.find(key);
    if (it == answers.end()) return std::nullopt;
    return it->second;
  }
  void Keep(std::string key, Kept answer) {
    MutexLock lock(answers_mu);
    if (answers.size() >= kMaxAnswers) answers.clear();
    answers.emplace(std::move(key), std::move(answer));
  }
  std::atomic<uint64_t> completions{0};
  std::atomic<uint64_t> aborted{0};
  std::atomic<int64_t> open{0};
};

namespace {

// A token per whitespace-separated word of every text in `request`.
std::vector<int64_t> Tokens(const Json& request) {
  std::string text;
  if (const auto prompt = request.find("prompt"); prompt != request.end() && prompt->is_string()) {
    text = prompt->get<std::string>();
  }
  if (const auto messages = request.find("messages");
      messages != request.end() && messages->is_array()) {
    for (const Json& message : *messages) {
      if (message.contains("content") && message["content"].is_string()) {
        text += " " + message["content"].get<std::string>();
      }
    }
  }
  std::vector<int64_t> tokens;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    tokens.push_back(static_cast<int64_t>(std::hash<std::string>{}(word) % 50000));
  }
  if (const auto ids = request.find("prompt"); ids != request.end() && ids->is_array()) {
    for (const Json& id : *ids) tokens.push_back(id.get<int64_t>());
  }
  return tokens;
}

asio::awaitable<void> Refuse(Exchange& exchange, int status, std::string message) {
  std::string body = Json{{"error", {{"message", std::move(message)}}}}.dump();
  co_await exchange.Respond(status, kJson, std::move(body), {});
}

asio::awaitable<void> Tokenize(InstantEngine::Impl& engine, Exchange& exchange) {
  const std::string key = "/tokenize " + exchange.request().body();
  if (std::optional<InstantEngine::Impl::Kept> known = engine.Answer(key)) {
    co_await exchange.Respond(200, kJson, std::move(known->body), {});
    co_return;
  }
  const Json request = Json::parse(exchange.request().body(), nullptr, false);
  if (!request.is_object()) {
    co_await Refuse(exchange, 400, "not a JSON object");
    co_return;
  }
  const std::vector<int64_t> tokens = Tokens(request);
  std::string body =
      Json{{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", 131072}}.dump();
  engine.Keep(key, {body, std::chrono::milliseconds(0)});
  co_await exchange.Respond(200, kJson, std::move(body), {});
}

asio::awaitable<void> Complete(InstantEngine::Impl& engine, Exchange& exchange, bool chat) {
  engine.completions.fetch_add(1);
  struct Open {
    std::atomic<int64_t>& n;
    explicit Open(std::atomic<int64_t>& count) : n(count) { n.fetch_add(1); }
    ~Open() { n.fetch_sub(1); }
  } open(engine.open);
  asio::steady_timer next_token(co_await asio::this_coro::executor);
  bool gone = false;
  exchange.OnClientGone([&] {
    gone = true;
    next_token.cancel();
  });
  // Only non-streamed answers are kept: the same one again, in its time.
  const std::string key =
      std::string(exchange.request().target()) + " " + exchange.request().body();
  if (std::optional<InstantEngine::Impl::Kept> known = engine.Answer(key)) {
    if (known->wait.count() > 0) {
      next_token.expires_after(known->wait);
      boost::system::error_code ec;
      co_await next_token.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (gone) {
      engine.aborted.fetch_add(1);
      co_return;
    }
    co_await exchange.Respond(200, kJson, std::move(known->body), {});
    co_return;
  }
  const Json request = Json::parse(exchange.request().body(), nullptr, false);
  if (!request.is_object()) {
    co_await Refuse(exchange, 400, "not a JSON object");
    co_return;
  }
  const int64_t prompt_tokens = static_cast<int64_t>(Tokens(request).size());
  const int64_t max_tokens = request.value("max_tokens", int64_t{16});
  const bool stream = request.value("stream", false);
  const bool include_usage = stream && request.contains("stream_options") &&
                             request["stream_options"].value("include_usage", false);
  const Json usage = {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", max_tokens},
                      {"total_tokens", prompt_tokens + max_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", 0}}}};
  const Json head = {
      {"id", "cmpl-instant"},
      {"object", chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", 0},
      {"model", engine.options.model}};
  // A request may pace itself ("sim_token_interval_ms"): benchmarks hold
  // slow streams open and time fast ones on the same engine.
  const std::chrono::milliseconds interval(request.value(
      "sim_token_interval_ms", static_cast<int64_t>(engine.options.token_interval.count())));
  // Waits one token's time; false when the client went away meanwhile.
  auto token = [&]() -> asio::awaitable<bool> {
    if (interval.count() > 0) {
      next_token.expires_after(interval);
      boost::system::error_code ec;
      co_await next_token.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    co_return !gone;
  };
  if (!stream) {
    std::string text;
    for (int64_t i = 0; i < max_tokens; ++i) {
      if (!co_await token()) {
        engine.aborted.fetch_add(1);
        co_return;
      }
      text += " tok" + std::to_string(i);
    }
    Json answer = head;
    answer["choices"] =
        Json::array({chat ? Json{{"index", 0},
                                 {"message", {{"role", "assistant"}, {"content", text}}},
                                 {"finish_reason", "length"}}
                          : Json{{"index", 0}, {"text", text}, {"finish_reason", "length"}}});
    answer["usage"] = usage;
    std::string body = answer.dump();
    engine.Keep(key, {body, interval * max_tokens});
    co_await exchange.Respond(200, kJson, std::move(body), {});
    co_return;
  }
  if (!co_await exchange.StartStream(200, kEventStream)) {
    engine.aborted.fetch_add(1);
    co_return;
  }
  for (int64_t i = 0; i <= max_tokens; ++i) {
    if (i < max_tokens && !co_await token()) {
      engine.aborted.fetch_add(1);
      co_return;
    }
    Json event = head;
    const std::string text = i < max_tokens ? " tok" + std::to_string(i) : "";
    const Json finish = i < max_tokens ? Json(nullptr) : Json("length");
    event["choices"] = Json::array(
        {chat ? Json{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", finish}}
              : Json{{"index", 0}, {"text", text}, {"finish_reason", finish}}});
    std::string out = "data: " + event.dump() + "\n\n";
    if (i == max_tokens) {
      if (include_usage) {
        Json last = head;
        last["choices"] = Json::array();
        last["usage"] = usage;
        out += "data: " + last.dump() + "\n\n";
      }
      out += "data: [DONE]\n\n";
    }
    if (!co_await exchange.Send(out)) {
      engine.aborted.fetch_add(1);
      co_return;
    }
  }
  co_await exchange.EndStream();
}

}  // namespace

Result<std::unique_ptr<InstantEngine>> InstantEngine::Start(InstantEngineOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl* engine = impl.get();
  gateway::Routes http;
  http.Get("/health", [](Exchange& exchange) -> asio::awaitable<void> {
    std::string body = "{}";
    co_await exchange.Respond(200, kJson, std::move(body), {});
  });
  http.Post("/tokenize", [engine](Exchange& exchange) { return Tokenize(*engine, exchange); });
  http.Post("/v1/completions",
            [engine](Exchange& exchange) { return Complete(*engine, exchange, false); });
  http.Post("/v1/chat/completions",
            [engine](Exchange& exchange) { return Complete(*engine, exchange, true); });
  gateway::FrontDoorOptions door;
  door.loops = impl->options.loops;
  door.max_body_bytes = size_t{64} << 20;
  KVGOV_ASSIGN_OR_RETURN(
      impl->door,
      gateway::FrontDoor::Start(std::move(door), std::move(http).Dispatch([](Exchange& exchange) {
        return Refuse(exchange, 404, "no such route");
      })));
  return std::unique_ptr<InstantEngine>(new InstantEngine(std::move(impl)));
}

InstantEngine::InstantEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InstantEngine::~InstantEngine() = default;

std::string InstantEngine::url() const {
  return "http://127.0.0.1:" + std::to_string(impl_->door->port());
}
uint64_t InstantEngine::completions() const { return impl_->completions.load(); }
uint64_t InstantEngine::aborted() const { return impl_->aborted.load(); }
int64_t InstantEngine::open_answers() const { return impl_->open.load(); }

}  // namespace kvgov::simfleet
