#include "kvgov/simfleet/live_engine.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "kvgov/server/http_listener.h"
#include "simfleet/replay_responder.h"

namespace kvgov::simfleet {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// A prompt longer than this is refused: the simulator's pools are small and
// its bodies are untrusted like any other.
constexpr size_t kMaxPromptTokens = 1 << 20;
constexpr size_t kMaxBodyBytes = 32 << 20;

void SendError(httplib::Response& response, int status, const std::string& message) {
  // OpenAI's error shape, which vLLM's server also uses.
  response.status = status;
  response.set_content(
      Json{{"error", {{"message", message}, {"type", "invalid_request_error"}, {"code", status}}}}
          .dump(),
      "application/json");
}

// The toy tokenizer: one id per whitespace-separated word (FNV-1a of its
// bytes), so equal texts give equal ids and a shared prefix of words a
// shared prefix of ids. Ids 1-3 are the chat template's markers.
constexpr int64_t kUserMarker = 1;
constexpr int64_t kAssistantMarker = 2;
constexpr int64_t kSystemMarker = 3;

void TokenizeText(std::string_view text, std::vector<int64_t>& out) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    if (i == text.size()) break;
    uint64_t hash = 1469598103934665603ULL;
    while (i < text.size() && text[i] != ' ') {
      hash = (hash ^ static_cast<unsigned char>(text[i++])) * 1099511628211ULL;
    }
    out.push_back(static_cast<int64_t>(100 + hash % 50000));
  }
}

// The fixed chat template: a role marker, then the content, for each
// message; then the assistant marker when a generation prompt is asked for.
Result<std::vector<int64_t>> ApplyChatTemplate(const Json& messages, bool generation_prompt) {
  std::vector<int64_t> tokens;
  for (const Json& message : messages) {
    if (!message.is_object() || !message.contains("content") || !message["content"].is_string()) {
      return Status::InvalidArgument("messages: want objects with a string content");
    }
    const std::string role = message.value("role", "user");
    tokens.push_back(role == "system" ? kSystemMarker
                                      : role == "assistant" ? kAssistantMarker : kUserMarker);
    TokenizeText(message["content"].get_ref<const std::string&>(), tokens);
  }
  if (generation_prompt) tokens.push_back(kAssistantMarker);
  return tokens;
}

// The prompt of a completions body (token ids or text) or of a chat or
// tokenize body (messages).
Result<std::vector<int64_t>> PromptTokens(const Json& body) {
  if (const auto messages = body.find("messages"); messages != body.end()) {
    if (!messages->is_array()) return Status::InvalidArgument("messages: want an array");
    return ApplyChatTemplate(*messages, body.value("add_generation_prompt", true));
  }
  const auto prompt = body.find("prompt");
  if (prompt == body.end()) return Status::InvalidArgument("prompt: missing");
  std::vector<int64_t> tokens;
  if (prompt->is_string()) {
    TokenizeText(prompt->get_ref<const std::string&>(), tokens);
    return tokens;
  }
  if (!prompt->is_array()) return Status::InvalidArgument("prompt: want token ids or a string");
  if (prompt->size() > kMaxPromptTokens) {
    return Status::InvalidArgument("prompt: more than " + std::to_string(kMaxPromptTokens) +
                                   " tokens");
  }
  tokens.reserve(prompt->size());
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& token = (*prompt)[i];
    if (!token.is_number_integer()) {
      return Status::InvalidArgument("prompt[" + std::to_string(i) + "]: want an integer");
    }
    tokens.push_back(token.get<int64_t>());
  }
  return tokens;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct LiveEngine::Impl {
  explicit Impl(const LiveEngineOptions& engine_options)
      : options(engine_options), pool(engine_options.pool), cost(engine_options.shape) {}

  // Prefills into the pool and publishes what changed. REQUIRES: mu held.
  sim::PrefillOutcome PrefillLocked(std::span<const int64_t> tokens, std::string_view cache_salt) {
    sim::PrefillOutcome outcome = pool.Prefill(tokens, cache_salt);
    if (!outcome.events.empty()) PublishLocked(outcome.events);
    return outcome;
  }

  // Publishes one batch of the pool's events. REQUIRES: mu held, so seq
  // order is the order the pool changed in.
  void PublishLocked(std::vector<EngineEvent> events) {
    EngineEventBatch batch;
    batch.ts = WallSeconds();
    batch.dp_rank = 0;
    batch.events = std::move(events);
    if (!options.publishes_extra_keys) {
      for (EngineEvent& event : batch.events) {
        if (auto* stored = std::get_if<BlockStored>(&event)) stored->extra_keys.clear();
      }
    }
    // The simulator encodes only what its own pool produced, which always
    // encodes; a failure here is a bug worth seeing.
    Result<std::string> payload = sim::EncodeEventBatch(batch, options.encoding);
    if (!payload.ok()) {
      std::fprintf(stderr, "simulated engine %s: %s\n", options.id.c_str(),
                   payload.status().ToString().c_str());
      return;
    }
    const uint64_t seq = next_seq++;
    {
      std::lock_guard history_lock(history_mu);
      history.emplace_back(seq, *payload);
      while (history.size() > options.replay_batches) history.pop_front();
    }
    const std::string seq_bytes = BigEndian64(seq);
    std::array<zmq::const_buffer, 3> frames = {zmq::buffer(topic), zmq::buffer(seq_bytes),
                                               zmq::buffer(*payload)};
    (void)zmq::send_multipart(pub, frames, zmq::send_flags::dontwait);
  }

  void ServeReplay() {
    while (!stopping.load()) {
      std::array<zmq::pollitem_t, 1> items = {{{router.handle(), 0, ZMQ_POLLIN, 0}}};
      zmq::poll(items, std::chrono::milliseconds(50));
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      std::optional<ReplayRequest> request = ReadReplayRequest(router);
      if (!request) continue;
      std::vector<std::pair<uint64_t, std::string>> batches;
      {
        std::lock_guard history_lock(history_mu);
        for (const auto& entry : history) {
          if (entry.first >= request->start_seq) batches.push_back(entry);
        }
      }
      AnswerReplay(router, *request, topic, batches);
    }
  }

  void HandleTokenize(const httplib::Request& request, httplib::Response& response) {
    const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return SendError(response, 400, "body: not a JSON object");
    }
    Result<std::vector<int64_t>> tokens = PromptTokens(body);
    if (!tokens.ok()) return SendError(response, 400, tokens.status().message());
    response.set_content(
        Json{{"count", tokens->size()}, {"max_model_len", 131072}, {"tokens", *tokens}}.dump(),
        "application/json");
  }

  void HandleCompletion(const httplib::Request& request, httplib::Response& response,
                        bool chat) {
    const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return SendError(response, 400, "body: not a JSON object");
    }
    if (chat && !body.contains("messages")) return SendError(response, 400, "messages: missing");
    Result<std::vector<int64_t>> prompt = PromptTokens(body);
    if (!prompt.ok()) return SendError(response, 400, prompt.status().message());
    const std::vector<int64_t>& tokens = *prompt;
    std::string cache_salt;
    if (const auto salt = body.find("cache_salt"); salt != body.end()) {
      if (!salt->is_string()) return SendError(response, 400, "cache_salt: want a string");
      cache_salt = salt->get<std::string>();
    }
    const int64_t max_tokens = body.value("max_tokens", int64_t{0});
    if (max_tokens < 0 || max_tokens > 4096) {
      return SendError(response, 400, "max_tokens: want 0..4096");
    }
    const bool stream = body.value("stream", false);
    {
      std::lock_guard lock(received_mu);
      received_salts.push_back(cache_salt);
    }

    sim::PrefillOutcome outcome;
    double prefill_s = 0;
    Clock::time_point arrived;
    Clock::time_point start;
    Clock::time_point finish;
    {
      std::lock_guard lock(mu);
      outcome = PrefillLocked(tokens, cache_salt);
      prefill_s = cost.PrefillSeconds(static_cast<int64_t>(tokens.size()), outcome.computed_tokens);
      arrived = Clock::now();
      start = std::max(arrived, busy_until);
      finish = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(prefill_s / options.speedup));
      busy_until = finish;
      queue.emplace_back(start, finish);
    }
    std::this_thread::sleep_until(finish);
    const double queue_s =
        std::chrono::duration<double>(start - arrived).count() * options.speedup;
    const int64_t prompt_tokens = static_cast<int64_t>(tokens.size());
    const int64_t cached_tokens = prompt_tokens - outcome.computed_tokens;
    const Json usage = {{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", max_tokens},
                        {"total_tokens", prompt_tokens + max_tokens},
                        {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
    const char* object = chat ? "chat.completion" : "text_completion";
    if (stream) return StreamAnswer(response, body, chat, max_tokens, usage);
    std::string text;
    for (int64_t i = 0; i < max_tokens; ++i) {
      std::this_thread::sleep_for(options.token_interval);
      text += " tok" + std::to_string(i);
    }
    const Json choice = chat ? Json{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", text}}},
                                    {"finish_reason", "length"}}
                             : Json{{"index", 0}, {"text", text}, {"finish_reason", "length"}};
    response.set_content(
        Json{{"object", object},
             {"model", options.model},
             {"choices", Json::array({choice})},
             {"usage", usage},
             // Modeled times (not wall time): what the GPU would have taken.
             {"kvgov_sim",
              {{"engine", options.id},
               {"hit_blocks", outcome.hit_blocks},
               {"prompt_blocks", outcome.prompt_blocks},
               {"queue_s", queue_s},
               {"prefill_s", prefill_s},
               {"ttft_s", queue_s + prefill_s}}}}
            .dump(),
        "application/json");
  }

  // Server-sent events, one chunk a token every token_interval, then the
  // usage chunk when asked for, then [DONE]. A client that goes away ends
  // the request (counted), as vLLM aborts it.
  void StreamAnswer(httplib::Response& response, const Json& body, bool chat, int64_t max_tokens,
                    const Json& usage) {
    const bool include_usage =
        body.contains("stream_options") && body["stream_options"].is_object() &&
        body["stream_options"].value("include_usage", false);
    const char* object = chat ? "chat.completion.chunk" : "text_completion";
    auto chunk = [this, chat, object](const std::string& text, const Json& finish) {
      const Json choice =
          chat ? Json{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", finish}}
               : Json{{"index", 0}, {"text", text}, {"finish_reason", finish}};
      return "data: " +
             Json{{"object", object}, {"model", options.model}, {"choices", {choice}}}.dump() +
             "\n\n";
    };
    response.set_chunked_content_provider(
        "text/event-stream",
        [this, chunk, max_tokens, include_usage, usage, object, next = int64_t{0}](
            size_t, httplib::DataSink& sink) mutable {
          std::string event;
          if (next < max_tokens) {
            std::this_thread::sleep_for(options.token_interval);
            event = chunk(" tok" + std::to_string(next), nullptr);
            ++next;
          } else {
            event = chunk("", "length");
            if (include_usage) {
              event += "data: " +
                       Json{{"object", object}, {"choices", Json::array()}, {"usage", usage}}
                           .dump() +
                       "\n\n";
            }
            event += "data: [DONE]\n\n";
          }
          if (!sink.write(event.data(), event.size())) {
            aborted.fetch_add(1);
            return false;
          }
          if (next >= max_tokens && event.ends_with("[DONE]\n\n")) sink.done();
          return true;
        });
  }

  void HandleMetrics(httplib::Response& response) {
    size_t running = 0;
    size_t waiting = 0;
    double usage = 0;
    {
      std::lock_guard lock(mu);
      const Clock::time_point now = Clock::now();
      while (!queue.empty() && queue.front().second <= now) queue.pop_front();
      for (const auto& [start, finish] : queue) ++(start <= now ? running : waiting);
      usage = static_cast<double>(pool.size()) /
              static_cast<double>(std::max<size_t>(options.pool.capacity_blocks, 1));
    }
    const std::string labels = "{model_name=\"" + options.model + "\",engine=\"0\"}";
    std::string text;
    text += "# HELP vllm:num_requests_running Number of requests in model execution batches.\n";
    text += "# TYPE vllm:num_requests_running gauge\n";
    text += "vllm:num_requests_running" + labels + " " + std::to_string(running) + "\n";
    text += "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n";
    text += "# TYPE vllm:num_requests_waiting gauge\n";
    text += "vllm:num_requests_waiting" + labels + " " + std::to_string(waiting) + "\n";
    text += "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n";
    text += "# TYPE vllm:kv_cache_usage_perc gauge\n";
    text += "vllm:kv_cache_usage_perc" + labels + " " + std::to_string(usage) + "\n";
    response.set_content(text, "text/plain; version=0.0.4");
  }

  LiveEngineOptions options;
  std::string topic = "kv@" + options.id;

  mutable std::mutex mu;  // guards pool, busy_until, queue, next_seq, pub
  sim::BlockPool pool;
  sim::PrefillCostModel cost;
  Clock::time_point busy_until{};
  std::deque<std::pair<Clock::time_point, Clock::time_point>> queue;  // (start, finish)
  uint64_t next_seq = 0;

  std::mutex received_mu;  // guards received_salts
  std::vector<std::string> received_salts;  // the cache_salt of every completion, "" for none
  std::atomic<uint64_t> aborted{0};  // streams whose client went away

  std::mutex history_mu;  // guards history; the replay thread reads it
  std::deque<std::pair<uint64_t, std::string>> history;

  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  zmq::socket_t router{context, zmq::socket_type::router};
  std::string events_endpoint;
  std::string replay_endpoint;
  std::thread replay_thread;
  std::atomic<bool> stopping{false};

  httplib::Server http;
  int http_port = 0;
  std::thread http_thread;
  std::mutex stop_mu;
  bool stopped = false;
};

Result<std::unique_ptr<LiveEngine>> LiveEngine::Start(const LiveEngineOptions& options) {
  if (!(options.speedup > 0)) {
    return Status::InvalidArgument("simulated engine " + options.id + ": speedup must be > 0");
  }
  auto impl = std::make_unique<Impl>(options);
  try {
    impl->pub.set(zmq::sockopt::linger, 0);
    impl->pub.set(zmq::sockopt::sndhwm, 100000);  // vLLM's hwm
    impl->pub.bind("tcp://" + options.host + ":0");
    impl->events_endpoint = impl->pub.get(zmq::sockopt::last_endpoint);
    impl->router.set(zmq::sockopt::linger, 0);
    impl->router.bind("tcp://" + options.host + ":0");
    impl->replay_endpoint = impl->router.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& error) {
    return Status::IOError("simulated engine " + options.id + ": cannot bind on " + options.host +
                           ": " + error.what());
  }

  Impl* self = impl.get();
  httplib::Server& http = impl->http;
  const int threads = std::max(1, options.http_threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(kMaxBodyBytes);
  http.set_tcp_nodelay(true);
  http.Get("/health", [](const httplib::Request&, httplib::Response& response) {
    response.status = 200;
  });
  http.Get("/metrics", [self](const httplib::Request&, httplib::Response& response) {
    self->HandleMetrics(response);
  });
  http.Post("/reset_prefix_cache", [self](const httplib::Request&, httplib::Response& response) {
    std::lock_guard lock(self->mu);
    self->PublishLocked({self->pool.Reset()});
    response.status = 200;
  });
  http.Post("/v1/completions", [self](const httplib::Request& request,
                                      httplib::Response& response) {
    self->HandleCompletion(request, response, /*chat=*/false);
  });
  http.Post("/v1/chat/completions", [self](const httplib::Request& request,
                                           httplib::Response& response) {
    self->HandleCompletion(request, response, /*chat=*/true);
  });
  http.Post("/tokenize", [self](const httplib::Request& request, httplib::Response& response) {
    self->HandleTokenize(request, response);
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, std::exception_ptr) {
        SendError(response, 500, "internal error");
      });
  Result<uint16_t> bound = server::BindListener(http, options.host, 0);
  if (!bound.ok()) {
    return Status::IOError("simulated engine " + options.id + ": " + bound.status().message());
  }
  impl->http_port = *bound;
  impl->http_thread = std::thread([&http] { http.listen_after_bind(); });
  while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl->replay_thread = std::thread([self] { self->ServeReplay(); });
  return std::unique_ptr<LiveEngine>(new LiveEngine(std::move(impl)));
}

LiveEngine::LiveEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LiveEngine::~LiveEngine() { Stop(); }

void LiveEngine::Stop() {
  {
    std::lock_guard lock(impl_->stop_mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  impl_->http.stop();
  if (impl_->http_thread.joinable()) impl_->http_thread.join();
  impl_->stopping = true;
  if (impl_->replay_thread.joinable()) impl_->replay_thread.join();
}

sim::PrefillOutcome LiveEngine::Prefill(std::span<const int64_t> tokens,
                                        std::string_view cache_salt) {
  std::lock_guard lock(impl_->mu);
  return impl_->PrefillLocked(tokens, cache_salt);
}

size_t LiveEngine::resident_blocks() const {
  std::lock_guard lock(impl_->mu);
  return impl_->pool.size();
}

std::vector<std::string> LiveEngine::received_salts() const {
  std::lock_guard lock(impl_->received_mu);
  return impl_->received_salts;
}

uint64_t LiveEngine::aborted_streams() const { return impl_->aborted.load(); }

uint64_t LiveEngine::next_seq() const {
  std::lock_guard lock(impl_->mu);
  return impl_->next_seq;
}

const std::string& LiveEngine::id() const { return impl_->options.id; }
std::string LiveEngine::events_endpoint() const { return impl_->events_endpoint; }
std::string LiveEngine::replay_endpoint() const { return impl_->replay_endpoint; }
std::string LiveEngine::control_url() const {
  return "http://" + impl_->options.host + ":" + std::to_string(impl_->http_port);
}

std::string LiveEngine::EngineSpec() const {
  return "id=" + impl_->options.id + ",kind=vllm,events=" + events_endpoint() +
         ",replay=" + replay_endpoint() + ",model=" + impl_->options.model +
         ",block-size=" + std::to_string(impl_->options.pool.block_size) +
         ",control=" + control_url();
}

}  // namespace kvgov::simfleet
