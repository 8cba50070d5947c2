#include "kvgov/simfleet/live_engine.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "kvgov/codec/messages_api.h"
#include "kvgov/core/hex.h"
#include "kvgov/core/mutex.h"
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

// An X-Request-Id longer than this is refused; the engine quotes it back.
constexpr size_t kMaxRequestIdBytes = 512;
// And a kv_transfer_params string (or a bootstrap_host) longer than this.
constexpr size_t kMaxParamBytes = 1024;
// How often an SGLang decode engine asks again for a room its prefill
// engine does not know yet.
constexpr std::chrono::milliseconds kBootstrapRetry{10};

// The error types vLLM's server writes: "BadRequestError" for what its
// serving layer refuses (create_error_response's default; a
// VLLMValidationError also names its param), "Bad Request" (the status
// phrase, param null) for a body its request models cannot parse, which
// FastAPI raises as a RequestValidationError.
constexpr const char* kBadRequestError = "BadRequestError";
constexpr const char* kRequestValidation = "Bad Request";

// OpenAI's error shape, which vLLM's server also uses. An empty `param` is
// null.
void SendError(httplib::Response& response, int status, const std::string& message,
               const char* type = kBadRequestError, std::string_view param = {}) {
  response.status = status;
  const Json param_json = param.empty() ? Json() : Json(std::string(param));
  response.set_content(
      Json{{"error",
            {{"message", message}, {"type", type}, {"param", param_json}, {"code", status}}}}
          .dump(),
      "application/json");
}

// vLLM reads a body with pydantic in lax mode (its OpenAIBaseModel sets no
// strict config), so a value of a near type is converted rather than
// refused: "4" or 4.0 for an int, "yes" or 1 for a bool. What cannot be
// converted is a RequestValidationError (400, kRequestValidation). These
// follow pydantic's lax rules for the fields the simulator reads; each
// error names the field, with pydantic's wording.

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Pydantic's lax int from a string: whitespace around, a sign, digits with
// single underscores between them, and a fraction of zeros ("1_000.0").
// nullopt when it is none, or outside int64.
std::optional<int64_t> ParseIntString(std::string_view text) {
  while (!text.empty() && IsAsciiSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsAsciiSpace(text.back())) text.remove_suffix(1);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (const size_t dot = text.find('.'); dot != std::string_view::npos) {
    const std::string_view fraction = text.substr(dot + 1);
    if (fraction.empty() || fraction.find_first_not_of('0') != std::string_view::npos) {
      return std::nullopt;
    }
    text = text.substr(0, dot);
  }
  if (text.empty() || text.front() == '_' || text.back() == '_') return std::nullopt;
  uint64_t magnitude = 0;
  char previous = 0;
  for (const char c : text) {
    if (c == '_') {
      if (previous == '_') return std::nullopt;
    } else if (c >= '0' && c <= '9') {
      const uint64_t digit = static_cast<uint64_t>(c - '0');
      if (magnitude > (uint64_t{1} << 63) / 10 || magnitude * 10 + digit > (uint64_t{1} << 63)) {
        return std::nullopt;
      }
      magnitude = magnitude * 10 + digit;
    } else {
      return std::nullopt;
    }
    previous = c;
  }
  if (!negative && magnitude > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
}

// An optional int field (`int | None`): nullopt when absent or null.
Result<std::optional<int64_t>> LaxInt(const Json& body, const char* name) {
  const auto value = body.find(name);
  if (value == body.end() || value->is_null()) return std::optional<int64_t>();
  const std::string field(name);
  if (value->is_boolean()) return std::optional<int64_t>(value->get<bool>() ? 1 : 0);
  if (value->is_number_unsigned()) {
    if (value->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Status::InvalidArgument(field +
                                     ": Input should be a valid integer, got a number "
                                     "out of range");
    }
    return std::optional<int64_t>(static_cast<int64_t>(value->get<uint64_t>()));
  }
  if (value->is_number_integer()) return std::optional<int64_t>(value->get<int64_t>());
  if (value->is_number_float()) {
    const double number = value->get<double>();
    if (!std::isfinite(number)) {
      return Status::InvalidArgument(field + ": Input should be a finite number");
    }
    if (number != std::trunc(number)) {
      return Status::InvalidArgument(field +
                                     ": Input should be a valid integer, got a number "
                                     "with a fractional part");
    }
    if (number < -9223372036854775808.0 || number >= 9223372036854775808.0) {
      return Status::InvalidArgument(field +
                                     ": Input should be a valid integer, got a number "
                                     "out of range");
    }
    return std::optional<int64_t>(static_cast<int64_t>(number));
  }
  if (value->is_string()) {
    if (std::optional<int64_t> parsed = ParseIntString(value->get_ref<const std::string&>())) {
      return std::optional<int64_t>(*parsed);
    }
    return Status::InvalidArgument(field +
                                   ": Input should be a valid integer, unable to parse "
                                   "string as an integer");
  }
  return Status::InvalidArgument(field + ": Input should be a valid integer");
}

// A bool field: nullopt when absent, or null for an optional one
// (`bool | None`); a null for a plain `bool` is refused, as pydantic does.
Result<std::optional<bool>> LaxBool(const Json& object, const char* name, std::string_view path,
                                    bool nullable = true) {
  const auto value = object.find(name);
  if (value == object.end()) return std::optional<bool>();
  const std::string field(path);
  if (value->is_null()) {
    if (nullable) return std::optional<bool>();
    return Status::InvalidArgument(field + ": Input should be a valid boolean");
  }
  if (value->is_boolean()) return std::optional<bool>(value->get<bool>());
  if (value->is_number()) {
    const double number = value->get<double>();
    if (number == 0 || number == 1) return std::optional<bool>(number == 1);
    return Status::InvalidArgument(
        field + (value->is_number_float()
                     ? ": Input should be a valid boolean"
                     : ": Input should be a valid boolean, unable to interpret input"));
  }
  if (value->is_string()) {
    std::string text = value->get<std::string>();
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    for (const char* yes : {"1", "on", "t", "true", "y", "yes"}) {
      if (text == yes) return std::optional<bool>(true);
    }
    for (const char* no : {"0", "off", "f", "false", "n", "no"}) {
      if (text == no) return std::optional<bool>(false);
    }
    return Status::InvalidArgument(field +
                                   ": Input should be a valid boolean, unable to interpret input");
  }
  return Status::InvalidArgument(field + ": Input should be a valid boolean");
}

// Python's truthiness of a raw JSON value, which some of vLLM's validators
// test before the fields are converted.
bool Truthy(const Json& value) {
  if (value.is_null()) return false;
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number()) return value.get<double>() != 0;
  if (value.is_string()) return !value.get_ref<const std::string&>().empty();
  return !value.empty();  // an array or an object
}

// The toy tokenizer: one id per whitespace-separated word (FNV-1a of its
// bytes), so equal texts give equal ids and a shared prefix of words a
// shared prefix of ids. Ids 1-3 are the chat template's markers.
constexpr int64_t kUserMarker = 1;
constexpr int64_t kAssistantMarker = 2;
constexpr int64_t kSystemMarker = 3;

// The words the toy tokenizer has met, by id: its vocabulary, learnt as it
// goes, so /detokenize answers as a real tokenizer would for ids it made.
// Bounded: past kMaxWords a new word is not kept, and an id it does not
// know reads as "<id>". Thread-safe: one mutex.
class Vocabulary {
 public:
  static constexpr size_t kMaxWords = size_t{1} << 20;

  void Remember(int64_t id, std::string_view word) {
    MutexLock lock(mutex_);
    if (words_.size() < kMaxWords) words_.try_emplace(id, word);
  }

  std::string Text(const std::vector<int64_t>& ids) const {
    std::string text;
    MutexLock lock(mutex_);
    for (const int64_t id : ids) {
      if (!text.empty()) text += ' ';
      const auto word = words_.find(id);
      text += word != words_.end() ? word->second : "<" + std::to_string(id) + ">";
    }
    return text;
  }

 private:
  mutable Mutex mutex_;
  std::unordered_map<int64_t, std::string> words_ KVGOV_GUARDED_BY(mutex_);
};

void TokenizeText(std::string_view text, std::vector<int64_t>& out, Vocabulary& vocabulary) {
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    if (i == text.size()) break;
    const size_t start = i;
    uint64_t hash = 1469598103934665603ULL;
    while (i < text.size() && text[i] != ' ') {
      hash = (hash ^ static_cast<unsigned char>(text[i++])) * 1099511628211ULL;
    }
    out.push_back(static_cast<int64_t>(100 + hash % 50000));
    vocabulary.Remember(out.back(), text.substr(start, i - start));
  }
}

// The fixed chat template: a role marker, then the content, for each
// message; then the assistant marker when a generation prompt is asked for.
Result<std::vector<int64_t>> ApplyChatTemplate(const Json& messages, bool generation_prompt,
                                               Vocabulary& vocabulary) {
  std::vector<int64_t> tokens;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& message = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    // Content is a string, content parts (text, image_url), or null beside
    // tool_calls, as OpenAI's chat allows.
    const auto content = message.is_object() ? message.find("content") : message.end();
    const bool has_tool_calls = message.is_object() && message.contains("tool_calls");
    if (!message.is_object() || content == message.end() ||
        !(content->is_string() || content->is_array() || (content->is_null() && has_tool_calls))) {
      return Status::InvalidArgument(where + ": want an object with a string content");
    }
    const auto role = message.find("role");
    if (role != message.end() && !role->is_string()) {
      return Status::InvalidArgument(where + ".role: Input should be a valid string");
    }
    const std::string_view name =
        role == message.end() ? "user" : std::string_view(role->get_ref<const std::string&>());
    tokens.push_back(name == "system"      ? kSystemMarker
                     : name == "assistant" ? kAssistantMarker
                                           : kUserMarker);
    if (content->is_string()) {
      TokenizeText(content->get_ref<const std::string&>(), tokens, vocabulary);
    } else if (content->is_array()) {
      for (const Json& part : *content) {
        if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
            part["text"].is_string()) {
          TokenizeText(part["text"].get_ref<const std::string&>(), tokens, vocabulary);
        } else {
          TokenizeText("<image>", tokens, vocabulary);  // one token for any other part
        }
      }
    }
    if (has_tool_calls && message["tool_calls"].is_array()) {
      for (const Json& call : message["tool_calls"]) {
        const Json function = call.is_object() ? call.value("function", Json::object()) : Json();
        if (!function.is_object()) continue;
        TokenizeText(function.value("name", "") + " " + function.value("arguments", ""), tokens,
                     vocabulary);
      }
    }
  }
  if (generation_prompt) tokens.push_back(kAssistantMarker);
  return tokens;
}

// The prompt of a completions body (token ids or text) or of a chat or
// tokenize body (messages).
Result<std::vector<int64_t>> PromptTokens(const Json& body, Vocabulary& vocabulary) {
  if (const auto messages = body.find("messages"); messages != body.end()) {
    if (!messages->is_array()) return Status::InvalidArgument("messages: want an array");
    KVGOV_ASSIGN_OR_RETURN(const std::optional<bool> generation_prompt,
                           LaxBool(body, "add_generation_prompt", "add_generation_prompt",
                                   /*nullable=*/false));
    return ApplyChatTemplate(*messages, generation_prompt.value_or(true), vocabulary);
  }
  const auto prompt = body.find("prompt");
  if (prompt == body.end()) return Status::InvalidArgument("prompt: missing");
  std::vector<int64_t> tokens;
  if (prompt->is_string()) {
    TokenizeText(prompt->get_ref<const std::string&>(), tokens, vocabulary);
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

// Passes `chat`'s streamed answer on into `response` through `convert`
// (chat SSE bytes in, another wire's events out): how the simulated engine
// serves Messages and Responses streams over its chat completions. A client
// that goes away fails the chat stream's write, as it would its own.
template <typename Convert>
void RelayConverted(httplib::Response& chat, Convert convert, httplib::Response& response) {
  auto chat_stream = std::make_shared<httplib::ContentProvider>(std::move(chat.content_provider_));
  response.set_chunked_content_provider(
      "text/event-stream",
      [chat_stream, convert = std::move(convert)](size_t offset, httplib::DataSink& sink) mutable {
        httplib::DataSink proxy;
        proxy.write = [&](const char* data, size_t size) {
          const std::string out = convert(std::string_view(data, size));
          return out.empty() || sink.write(out.data(), out.size());
        };
        proxy.done = [&] { sink.done(); };
        proxy.is_writable = [&] { return sink.is_writable(); };
        return (*chat_stream)(offset, 0, proxy);
      });
}

// What a handoff asks of an engine, from a body's kv_transfer_params.
enum class Handoff {
  kNone,           // absent, null, or neither flag set: a plain completion
  kRemoteDecode,   // prefill here, hand the KV over (vLLM's do_remote_decode)
  kRemotePrefill,  // pull the KV a prefill engine holds, decode here
};

Result<bool> ParamFlag(const Json& params, const char* name) {
  const auto flag = params.find(name);
  if (flag == params.end() || flag->is_null()) return false;
  if (!flag->is_boolean()) {
    return Status::InvalidArgument(std::string("kv_transfer_params.") + name + ": want a boolean");
  }
  return flag->get<bool>();
}

Result<Handoff> ParseHandoff(const Json& body) {
  const auto params = body.find("kv_transfer_params");
  if (params == body.end() || params->is_null()) return Handoff::kNone;
  if (!params->is_object()) return Status::InvalidArgument("kv_transfer_params: want an object");
  KVGOV_ASSIGN_OR_RETURN(const bool remote_decode, ParamFlag(*params, "do_remote_decode"));
  KVGOV_ASSIGN_OR_RETURN(const bool remote_prefill, ParamFlag(*params, "do_remote_prefill"));
  if (remote_decode && remote_prefill) {
    return Status::InvalidArgument(
        "kv_transfer_params: do_remote_decode and do_remote_prefill are both true; want one");
  }
  return remote_decode    ? Handoff::kRemoteDecode
         : remote_prefill ? Handoff::kRemotePrefill
                          : Handoff::kNone;
}

// Where a decode engine pulls a handed-over prompt from: the fields of a
// prefill engine's kv_transfer_params that vLLM's decode scheduler
// requires (without any of them it does not transfer).
struct RemotePrefill {
  std::string engine_id;
  std::string request_id;
  std::string host;
  int port = 0;
};

Result<std::string> ParamString(const Json& params, const char* name) {
  const std::string field = std::string("kv_transfer_params.") + name;
  const auto value = params.find(name);
  if (value == params.end() || value->is_null()) {
    return Status::InvalidArgument(field + ": required");
  }
  if (!value->is_string() || value->get_ref<const std::string&>().empty() ||
      value->get_ref<const std::string&>().size() > kMaxParamBytes) {
    return Status::InvalidArgument(field + ": want a string of 1-" +
                                   std::to_string(kMaxParamBytes) + " bytes");
  }
  return value->get<std::string>();
}

// A TCP port in `object[name]`; an absent or null one is "required".
// `path` names the field in errors.
Result<int> PortField(const Json& object, const char* name, const std::string& path) {
  const auto port = object.find(name);
  if (port == object.end() || port->is_null()) {
    return Status::InvalidArgument(path + ": required");
  }
  if (!port->is_number_integer() || port->get<int64_t>() < 1 || port->get<int64_t>() > 65535) {
    return Status::InvalidArgument(path + ": want an integer in 1-65535");
  }
  return port->get<int>();
}

Result<RemotePrefill> ParseRemotePrefill(const Json& params) {
  RemotePrefill remote;
  KVGOV_ASSIGN_OR_RETURN(remote.engine_id, ParamString(params, "remote_engine_id"));
  KVGOV_ASSIGN_OR_RETURN(remote.request_id, ParamString(params, "remote_request_id"));
  KVGOV_ASSIGN_OR_RETURN(remote.host, ParamString(params, "remote_host"));
  KVGOV_ASSIGN_OR_RETURN(remote.port,
                         PortField(params, "remote_port", "kv_transfer_params.remote_port"));
  const auto block_ids = params.find("remote_block_ids");
  if (block_ids == params.end() || block_ids->is_null()) {
    return Status::InvalidArgument("kv_transfer_params.remote_block_ids: required");
  }
  // Opaque here: what the prefill engine holds, it says when pulled. The
  // shape changed across vLLM versions (a flat list, then one per group).
  if (!block_ids->is_array()) {
    return Status::InvalidArgument("kv_transfer_params.remote_block_ids: want an array");
  }
  return remote;
}

// The side channel's READ of a handed-over prompt (NIXL's READ plus the
// notification that frees the prefill engine's blocks): the tokens the
// prefill engine held. Unavailable, naming the remote request, when the
// prefill engine does not hold it or cannot be reached.
Result<int64_t> PullFrom(const RemotePrefill& remote) {
  const std::string where = "kv_transfer_params: remote request " + remote.request_id;
  try {
    httplib::Client client(remote.host, remote.port);
    // Loopback: a prefill engine that does not answer within these is gone.
    client.set_connection_timeout(1, 0);
    client.set_read_timeout(5, 0);
    client.set_write_timeout(5, 0);
    const Json read = {{"remote_request_id", remote.request_id},
                       {"remote_engine_id", remote.engine_id}};
    httplib::Result result = client.Post("/kvgov_sim/nixl_read", read.dump(), "application/json");
    if (!result) {
      return Status::Unavailable(where + ": engine " + remote.engine_id + " at " + remote.host +
                                 ":" + std::to_string(remote.port) + " is unreachable (" +
                                 httplib::to_string(result.error()) + ")");
    }
    if (result->status == 404) {
      return Status::Unavailable(where + " is unknown or expired at engine " + remote.engine_id);
    }
    const Json answer = Json::parse(result->body, nullptr, /*allow_exceptions=*/false);
    if (result->status != 200 || !answer.is_object() || !answer.contains("tokens") ||
        !answer["tokens"].is_number_integer()) {
      return Status::Unavailable(where + ": engine " + remote.engine_id +
                                 " answered the read with " + std::to_string(result->status) +
                                 " and no token count");
    }
    return answer["tokens"].get<int64_t>();
  } catch (const std::exception& error) {
    return Status::Unavailable(where + ": " + error.what());
  }
}

// SGLang's PD fields: the three sgl-model-gateway injects into the one
// body both legs get (docs/research/pd-disaggregation-wire.md, section 2).
constexpr std::array<const char*, 3> kBootstrapFields = {"bootstrap_host", "bootstrap_port",
                                                         "bootstrap_room"};

// Where a decode engine fetches a room's KV from, and which room.
struct Bootstrap {
  std::string host;
  int port = 0;
  uint64_t room = 0;
};

bool HasField(const Json& body, const char* name) {
  const auto value = body.find(name);
  return value != body.end() && !value->is_null();
}

// A room, as SGLang's router draws it: an integer in [0, 2^63).
Result<uint64_t> ReadRoom(const Json& body) {
  const auto room = body.find("bootstrap_room");
  if (room == body.end() || room->is_null()) {
    return Status::InvalidArgument("bootstrap_room: required");
  }
  const bool in_range = room->is_number_unsigned()
                            ? room->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)
                            : room->is_number_integer() && room->get<int64_t>() >= 0;
  if (!in_range) {
    // SGLang also takes one room per element of a batch; the simulator
    // serves no batches.
    return Status::InvalidArgument("bootstrap_room: want an integer in 0..2^63-1");
  }
  return room->get<uint64_t>();
}

// The bootstrap fields of a body; nullopt when it carries none of them (a
// plain completion). All three are required once one is there: SGLang's
// decode engine needs each to find its prefill engine and room.
Result<std::optional<Bootstrap>> ParseBootstrap(const Json& body) {
  if (std::none_of(kBootstrapFields.begin(), kBootstrapFields.end(),
                   [&](const char* field) { return HasField(body, field); })) {
    return std::optional<Bootstrap>();
  }
  Bootstrap bootstrap;
  const auto host = body.find("bootstrap_host");
  if (host == body.end() || host->is_null()) {
    return Status::InvalidArgument("bootstrap_host: required");
  }
  if (!host->is_string() || host->get_ref<const std::string&>().empty() ||
      host->get_ref<const std::string&>().size() > kMaxParamBytes) {
    return Status::InvalidArgument("bootstrap_host: want a string of 1-" +
                                   std::to_string(kMaxParamBytes) + " bytes");
  }
  bootstrap.host = host->get<std::string>();
  // Without one SGLang's decode engine fills in its own configured port;
  // the simulator has none to fill in, so it is required.
  KVGOV_ASSIGN_OR_RETURN(bootstrap.port, PortField(body, "bootstrap_port", "bootstrap_port"));
  KVGOV_ASSIGN_OR_RETURN(bootstrap.room, ReadRoom(body));
  return std::optional<Bootstrap>(std::move(bootstrap));
}

// Printable ASCII without spaces: an X-Request-Id goes back out in JSON
// and in error text, and nlohmann refuses to dump bytes that are not UTF-8.
bool PrintableId(std::string_view id) {
  for (const char c : id) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return !id.empty();
}

// The spec's role keys; a both engine (the default) has none, and only a
// prefill engine's pin length is kvgov's business (the parser's rule).
// An SGLang prefill engine's bootstrap server is its HTTP server here, so
// its bootstrap-port is its HTTP port.
std::string RoleSpec(const LiveEngineOptions& options, int http_port) {
  if (options.role == ingest::EngineRole::kBoth) return "";
  std::string spec = ",role=" + std::string(ToString(options.role));
  if (options.role == ingest::EngineRole::kPrefill) {
    spec += ",kv-lease-ms=" + std::to_string(options.kv_lease.count());
    if (options.kind == ingest::EngineKind::kSglang) {
      spec += ",bootstrap-port=" + std::to_string(http_port);
    }
  }
  return spec;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A decode request counted in vllm:num_requests_waiting while its KV has
// yet to arrive (vLLM's WAITING_FOR_REMOTE_KVS, SGLang's transfer queue).
class WaitingForKv {
 public:
  explicit WaitingForKv(std::atomic<int64_t>& count) : count_(count) { count_.fetch_add(1); }
  ~WaitingForKv() { count_.fetch_sub(1); }
  WaitingForKv(const WaitingForKv&) = delete;
  WaitingForKv& operator=(const WaitingForKv&) = delete;

 private:
  std::atomic<int64_t>& count_;
};

}  // namespace

struct LiveEngine::Impl {
  explicit Impl(const LiveEngineOptions& engine_options)
      : options(engine_options), pool(engine_options.pool), cost(engine_options.shape) {}

  // An SGLang room prefilled here and not yet taken by its decode engine:
  // its pinned blocks. Shared with the prefill request waiting on it, which
  // learns from it how the room ended.
  struct PendingRoom {
    std::vector<EngineHash> hashes;
    int64_t tokens = 0;
    Clock::time_point ready;    // the prefill's end: a fetch waits for it
    Clock::time_point expires;  // kv_lease after that
    bool fetched = false;       // taken by the decode engine
    bool ended = false;         // fetched, lapsed, reset or stopped: out of rooms
    bool reset = false;         // ended by a cache reset, its pin with it
  };

  // Prefills into the pool and publishes what changed.
  sim::PrefillOutcome PrefillLocked(std::span<const int64_t> tokens, std::string_view cache_salt)
      KVGOV_REQUIRES(mu) {
    sim::PrefillOutcome outcome = pool.Prefill(tokens, cache_salt);
    if (!outcome.events.empty()) PublishLocked(outcome.events);
    return outcome;
  }

  // Publishes one batch of the pool's events. Under mu, so seq order is
  // the order the pool changed in.
  void PublishLocked(std::vector<EngineEvent> events) KVGOV_REQUIRES(mu) {
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
      MutexLock history_lock(history_mu);
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
      if (pending_handoffs.load() > 0) {
        // The idle sweep: a lapsed pin is freed within a poll even when no
        // request comes to free it.
        MutexLock lock(mu);
        SweepLocked(Clock::now());
      }
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      std::optional<ReplayRequest> request = ReadReplayRequest(router);
      if (!request) continue;
      std::vector<std::pair<uint64_t, std::string>> batches;
      {
        MutexLock history_lock(history_mu);
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
      return SendError(response, 400, "body: not a JSON object", kRequestValidation);
    }
    Result<std::vector<int64_t>> tokens = PromptTokens(body, vocabulary);
    if (!tokens.ok()) {
      return SendError(response, 400, tokens.status().message(), kRequestValidation);
    }
    response.set_content(Json{{"count", tokens->size()},
                              {"max_model_len", options.max_model_len},
                              {"tokens", *tokens}}
                             .dump(),
                         "application/json");
  }

  // vLLM's POST /detokenize: {"model","tokens"} -> {"prompt"}.
  void HandleDetokenize(const httplib::Request& request, httplib::Response& response) {
    const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    const auto tokens = body.is_object() ? body.find("tokens") : body.end();
    if (tokens == body.end() || !tokens->is_array()) {
      return SendError(response, 400, "tokens: Field required", kRequestValidation);
    }
    std::vector<int64_t> ids;
    for (const Json& id : *tokens) {
      if (!id.is_number_integer()) {
        return SendError(response, 400, "tokens: Input should be a valid integer",
                         kRequestValidation);
      }
      ids.push_back(id.get<int64_t>());
    }
    response.set_content(Json{{"prompt", vocabulary.Text(ids)}}.dump(), "application/json");
  }

  // A completion body, parsed and checked.
  struct Completion {
    bool chat = false;
    std::vector<int64_t> tokens;
    std::string cache_salt;
    // Tokens to generate: max_tokens, or for a chat max_completion_tokens
    // when given (vLLM prefers it); the simulator's default is 0.
    int64_t max_tokens = 0;
    const char* max_tokens_field = "max_tokens";
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    std::string id;              // "cmpl-..." or "chatcmpl-..."
    int64_t created = 0;         // unix seconds
  };

  // Why a body's request model refused it, as vLLM words it (400,
  // kRequestValidation).
  struct Refusal {
    explicit Refusal(std::string text, std::string field = "")
        : message(std::move(text)), param(std::move(field)) {}
    std::string message;
    std::string param;  // "" for null
  };

  // The fields a completion body's request model holds, converted as
  // pydantic converts them; a refusal when one cannot be. REQUIRES: `body`
  // is an object.
  std::optional<Refusal> ParseCompletion(const Json& body, bool chat, Completion& completion) {
    completion.chat = chat;
    // vLLM's "before" validators run first: a salt that is not a string,
    // and stream_options without stream (tested on the raw values).
    const auto salt = body.find("cache_salt");
    if (salt != body.end() && !salt->is_null()) {
      // vLLM also refuses an empty salt; the simulator takes "" as none,
      // as kvgov's drivers send it for an unsalted decision.
      if (!salt->is_string()) {
        return Refusal{
            "cache_salt: Parameter 'cache_salt' must be a non-empty string if "
            "provided."};
      }
      completion.cache_salt = salt->get<std::string>();
    }
    const auto stream_options = body.find("stream_options");
    const auto stream = body.find("stream");
    if (stream_options != body.end() && Truthy(*stream_options) &&
        (stream == body.end() || !Truthy(*stream))) {
      // A VLLMValidationError: the handler names its param.
      return Refusal{"stream_options: Stream options can only be defined when `stream=True`.",
                     "stream_options"};
    }
    if (chat && !body.contains("messages")) return Refusal{"messages: Field required"};
    Result<std::vector<int64_t>> prompt = PromptTokens(body, vocabulary);
    if (!prompt.ok()) return Refusal{prompt.status().message()};
    completion.tokens = std::move(prompt).value();

    Result<std::optional<int64_t>> max_tokens = LaxInt(body, "max_tokens");
    if (!max_tokens.ok()) return Refusal{max_tokens.status().message()};
    completion.max_tokens = max_tokens->value_or(0);
    if (chat) {
      Result<std::optional<int64_t>> max_completion = LaxInt(body, "max_completion_tokens");
      if (!max_completion.ok()) return Refusal{max_completion.status().message()};
      if (max_completion->has_value()) {
        completion.max_tokens = **max_completion;
        completion.max_tokens_field = "max_completion_tokens";
      }
    }
    Result<std::optional<bool>> streamed = LaxBool(body, "stream", "stream");
    if (!streamed.ok()) return Refusal{streamed.status().message()};
    completion.stream = streamed->value_or(false);
    if (stream_options != body.end() && !stream_options->is_null()) {
      if (!stream_options->is_object()) {
        return Refusal{
            "stream_options: Input should be a valid dictionary or object to extract "
            "fields from"};
      }
      Result<std::optional<bool>> include_usage =
          LaxBool(*stream_options, "include_usage", "stream_options.include_usage");
      if (!include_usage.ok()) return Refusal{include_usage.status().message()};
      // StreamOptions.include_usage defaults to true once stream_options
      // is given.
      completion.include_usage = include_usage->value_or(true);
    }
    if (const auto request_id = body.find("request_id");
        request_id != body.end() && !request_id->is_null() && !request_id->is_string()) {
      return Refusal{"request_id: Input should be a valid string"};
    }
    return std::nullopt;
  }

  // vLLM's context check (its renderer's TokenizeParams): the requested
  // tokens may not exceed max_model_len, nor the prompt what they leave of
  // it; an SGLang engine's check (its tokenizer manager) counts the two
  // together and refuses reaching the limit. Answers 400 and returns true
  // when the completion does not fit.
  bool RefusedOverContext(httplib::Response& response, const Completion& completion) {
    const int64_t limit = options.max_model_len;
    const int64_t input = static_cast<int64_t>(completion.tokens.size());
    const int64_t output = completion.max_tokens;
    const std::string field = completion.max_tokens_field;
    if (options.kind == ingest::EngineKind::kSglang) {
      if (input >= limit) {
        SendError(response, 400,
                  "The input (" + std::to_string(input) +
                      " tokens) is longer than the model's context length (" +
                      std::to_string(limit) + " tokens).");
        return true;
      }
      if (output + input >= limit) {
        SendError(response, 400,
                  "Requested token count exceeds the model's maximum context length of " +
                      std::to_string(limit) + " tokens. You requested a total of " +
                      std::to_string(output + input) + " tokens: " + std::to_string(input) +
                      " tokens from the input messages and " + std::to_string(output) +
                      " tokens for the completion. Please reduce the number of tokens in the "
                      "input messages or the completion to fit within the limit.");
        return true;
      }
      return false;
    }
    // A VLLMValidationError's text ends with its parameter and value.
    if (output > limit) {
      const std::string asked = std::to_string(output);
      SendError(response, 400,
                field + "=" + asked +
                    " cannot be greater than max_model_len=" + std::to_string(limit) +
                    ". Please request fewer output tokens. (parameter=" + field +
                    ", value=" + asked + ")",
                kBadRequestError, field);
      return true;
    }
    if (input > limit - output) {
      const std::string passed = std::to_string(input);
      SendError(response, 400,
                "You passed " + passed + " input tokens and requested " + std::to_string(output) +
                    " output tokens. However, the model's context length is only " +
                    std::to_string(limit) + " tokens, resulting in a maximum input length of " +
                    std::to_string(limit - output) +
                    " tokens. Please reduce the length of the input prompt. "
                    "(parameter=input_tokens, value=" +
                    passed + ")",
                kBadRequestError, "input_tokens");
      return true;
    }
    return false;
  }

  // vLLM's POST /v1/messages: the Messages request made into the chat
  // completion vLLM makes of it (its stream asking for usage), served as
  // one, and answered in Anthropic's shape: a message, or its events
  // (message_start, content_block_*, message_delta, message_stop).
  void HandleMessages(const httplib::Request& request, httplib::Response& response) {
    auto refuse = [&response](int status, std::string_view message) {
      response.status = status;
      response.set_content(EncodeMessagesErrorJson(status, message), "application/json");
    };
    Result<std::string> lowered = MessagesChatRequestJson(request.body, JsonLimits{});
    if (!lowered.ok()) return refuse(400, lowered.status().message());
    Json chat = Json::parse(*lowered);
    const bool stream = chat.value("stream", false);
    if (stream) chat["stream_options"] = {{"include_usage", true}};
    Result<std::vector<int64_t>> prompt = PromptTokens(chat, vocabulary);
    const int64_t prompt_tokens = prompt.ok() ? static_cast<int64_t>(prompt->size()) : 0;
    httplib::Request as_chat = request;
    as_chat.body = chat.dump();
    httplib::Response answer;
    HandleCompletion(as_chat, answer, /*chat=*/true);
    // A handler that set no status answered 200 (cpp-httplib's default).
    if (answer.status != -1 && answer.status != 200) {
      const Json error = Json::parse(answer.body, nullptr, false);
      return refuse(answer.status, error.is_object() && error.contains("error")
                                       ? error["error"].value("message", answer.body)
                                       : answer.body);
    }
    const std::string model = options.model;
    // usage in Anthropic's words: the cached part apart from input_tokens.
    auto usage_of = [](const Json& usage) {
      const int64_t cached =
          usage.value(Json::json_pointer("/prompt_tokens_details/cached_tokens"), int64_t{0});
      return Json{{"input_tokens", usage.value("prompt_tokens", int64_t{0}) - cached},
                  {"output_tokens", usage.value("completion_tokens", int64_t{0})},
                  {"cache_read_input_tokens", cached},
                  {"cache_creation_input_tokens", 0}};
    };
    if (!stream) {
      const Json completion = Json::parse(answer.body);
      const Json& choice = completion["choices"][0];
      Json message = {
          {"id", "msg_" + completion.value("id", std::string())},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", Json::array({{{"type", "text"},
                                    {"text", choice["message"].value("content", std::string())}}})},
          {"stop_reason",
           choice.value("finish_reason", "") == "length" ? "max_tokens" : "end_turn"},
          {"stop_sequence", nullptr},
          {"usage", usage_of(completion["usage"])}};
      response.set_content(message.dump(), "application/json");
      return;
    }
    // Each chunk of the chat stream, as the Messages events it makes.
    auto event = [](const char* name, const Json& data) {
      return std::string("event: ") + name + "\ndata: " + data.dump() + "\n\n";
    };
    auto convert = [event, model, prompt_tokens, usage_of, started = false,
                    buffer = std::string()](std::string_view chunk) mutable {
      buffer.append(chunk);
      std::string out;
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
        const std::string line = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
        const Json data = Json::parse(line.substr(6), nullptr, false);
        if (!data.is_object()) continue;
        if (!started) {
          started = true;
          out += event("message_start",
                       {{"type", "message_start"},
                        {"message",
                         {{"id", "msg_" + data.value("id", std::string())},
                          {"type", "message"},
                          {"role", "assistant"},
                          {"model", model},
                          {"content", Json::array()},
                          {"stop_reason", nullptr},
                          {"stop_sequence", nullptr},
                          {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}}}});
          out +=
              event("content_block_start", {{"type", "content_block_start"},
                                            {"index", 0},
                                            {"content_block", {{"type", "text"}, {"text", ""}}}});
        }
        if (data.contains("usage") && data["usage"].is_object() && data["choices"].empty()) {
          out += event("message_delta",
                       {{"type", "message_delta"},
                        {"delta", {{"stop_reason", "max_tokens"}, {"stop_sequence", nullptr}}},
                        {"usage", usage_of(data["usage"])}});
          out += event("message_stop", {{"type", "message_stop"}});
          continue;
        }
        if (data["choices"].empty()) continue;
        const Json& choice = data["choices"][0];
        const std::string text = choice["delta"].value("content", std::string());
        if (!text.empty()) {
          out +=
              event("content_block_delta", {{"type", "content_block_delta"},
                                            {"index", 0},
                                            {"delta", {{"type", "text_delta"}, {"text", text}}}});
        }
        if (!choice["finish_reason"].is_null()) {
          out += event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}});
        }
      }
      return out;
    };
    RelayConverted(answer, std::move(convert), response);
  }

  // vLLM's POST /v1/responses: the request made into the chat completion
  // vLLM makes of it, with the conversation of previous_response_id (kept
  // here, in this engine only, as vLLM keeps it) before it; answered as a
  // response, or its events (response.created ... response.completed).
  void HandleResponses(const httplib::Request& request, httplib::Response& response) {
    auto refuse = [&response](int status, const std::string& message) {
      SendError(response, status, message);
    };
    Result<std::string> lowered = ResponsesChatRequestJson(request.body, JsonLimits{});
    if (!lowered.ok()) return refuse(400, lowered.status().message());
    Json chat = Json::parse(*lowered);
    const Json sent = Json::parse(request.body);
    if (sent.contains("previous_response_id") && sent["previous_response_id"].is_string()) {
      const std::string previous = sent["previous_response_id"].get<std::string>();
      Json before;
      {
        MutexLock lock(mu);
        const auto it = conversations.find(previous);
        if (it != conversations.end()) before = it->second;
      }
      if (before.is_null()) {
        return refuse(404, "Response with id '" + previous + "' not found.");
      }
      // The new input after the old conversation (its instructions do not
      // carry over: vLLM drops the previous system message).
      Json messages = Json::array();
      for (const Json& message : before) {
        if (message.value("role", "") != "system") messages.push_back(message);
      }
      for (const Json& message : chat["messages"]) {
        if (message.value("role", "") == "system") {
          messages.insert(messages.begin(), message);
        } else {
          messages.push_back(message);
        }
      }
      chat["messages"] = std::move(messages);
    }
    const bool stream = chat.value("stream", false);
    if (stream) chat["stream_options"] = {{"include_usage", true}};
    httplib::Request as_chat = request;
    as_chat.body = chat.dump();
    httplib::Response answer;
    HandleCompletion(as_chat, answer, /*chat=*/true);
    if (answer.status != -1 && answer.status != 200) {
      response.status = answer.status;
      response.set_content(answer.body, "application/json");
      return;
    }
    std::string id;
    {
      MutexLock lock(mu);
      id = "resp_" + RandomHexLocked(32);
    }
    const std::string item_id = "msg_" + id.substr(5);
    const std::string model = options.model;
    auto usage_of = [](const Json& usage) {
      const int64_t prompt = usage.value("prompt_tokens", int64_t{0});
      const int64_t output = usage.value("completion_tokens", int64_t{0});
      return Json{
          {"input_tokens", prompt},
          {"input_tokens_details",
           {{"cached_tokens",
             usage.value(Json::json_pointer("/prompt_tokens_details/cached_tokens"), int64_t{0})}}},
          {"output_tokens", output},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", prompt + output}};
    };
    auto item_of = [item_id](const std::string& text, const char* status) {
      return Json{
          {"type", "message"},
          {"id", item_id},
          {"status", status},
          {"role", "assistant"},
          {"content",
           Json::array(
               {{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}}})}};
    };
    auto response_of = [id, model](const char* status, Json output, Json usage) {
      Json out = {{"id", id},
                  {"object", "response"},
                  {"created_at", 0},
                  {"status", status},
                  {"model", model},
                  {"output", std::move(output)},
                  {"parallel_tool_calls", true},
                  {"tool_choice", "auto"},
                  {"tools", Json::array()}};
      if (!usage.is_null()) out["usage"] = std::move(usage);
      return out;
    };
    // The conversation so far, for the next request naming this one.
    auto remember = [this, id, messages = chat["messages"]](const std::string& text) {
      Json conversation = messages;
      conversation.push_back({{"role", "assistant"}, {"content", text}});
      MutexLock lock(mu);
      if (conversations.size() >= kMaxConversations) conversations.clear();
      conversations[id] = std::move(conversation);
    };
    if (!stream) {
      const Json completion = Json::parse(answer.body);
      const std::string text = completion["choices"][0]["message"].value("content", std::string());
      remember(text);
      response.set_content(response_of("completed", Json::array({item_of(text, "completed")}),
                                       usage_of(completion["usage"]))
                               .dump(),
                           "application/json");
      return;
    }
    auto convert = [response_of, item_of, usage_of, remember, item_id, sequence = int64_t{0},
                    started = false, text = std::string(),
                    buffer = std::string()](std::string_view chunk) mutable {
      auto event = [&sequence](const char* type, Json data) {
        data["type"] = type;
        data["sequence_number"] = sequence++;
        return std::string("event: ") + type + "\ndata: " + data.dump() + "\n\n";
      };
      buffer.append(chunk);
      std::string out;
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
        const std::string line = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (!line.starts_with("data: ") || line == "data: [DONE]") continue;
        const Json data = Json::parse(line.substr(6), nullptr, false);
        if (!data.is_object()) continue;
        const Json part = {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}};
        if (!started) {
          started = true;
          out += event("response.created",
                       {{"response", response_of("in_progress", Json::array(), nullptr)}});
          out += event("response.in_progress",
                       {{"response", response_of("in_progress", Json::array(), nullptr)}});
          out += event("response.output_item.added",
                       {{"output_index", 0}, {"item", item_of("", "in_progress")}});
          out += event(
              "response.content_part.added",
              {{"item_id", item_id}, {"output_index", 0}, {"content_index", 0}, {"part", part}});
        }
        if (data.contains("usage") && data["usage"].is_object() && data["choices"].empty()) {
          Json done_part = part;
          done_part["text"] = text;
          out += event(
              "response.output_text.done",
              {{"item_id", item_id}, {"output_index", 0}, {"content_index", 0}, {"text", text}});
          out += event("response.content_part.done", {{"item_id", item_id},
                                                      {"output_index", 0},
                                                      {"content_index", 0},
                                                      {"part", done_part}});
          out += event("response.output_item.done",
                       {{"output_index", 0}, {"item", item_of(text, "completed")}});
          out += event(
              "response.completed",
              {{"response", response_of("completed", Json::array({item_of(text, "completed")}),
                                        usage_of(data["usage"]))}});
          remember(text);
          continue;
        }
        if (data["choices"].empty()) continue;
        const std::string delta = data["choices"][0]["delta"].value("content", std::string());
        if (delta.empty()) continue;
        text += delta;
        out += event(
            "response.output_text.delta",
            {{"item_id", item_id}, {"output_index", 0}, {"content_index", 0}, {"delta", delta}});
      }
      return out;
    };
    RelayConverted(answer, std::move(convert), response);
  }

  void HandleCompletion(const httplib::Request& request, httplib::Response& response, bool chat) {
    const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return SendError(response, 400, "body: not a JSON object", kRequestValidation);
    }
    Completion completion;
    if (std::optional<Refusal> refusal = ParseCompletion(body, chat, completion)) {
      return SendError(response, 400, refusal->message, kRequestValidation, refusal->param);
    }
    if (RefusedOverContext(response, completion)) return;
    // The simulator's own bound: every token takes token_interval.
    if (completion.max_tokens < 0 || completion.max_tokens > 4096) {
      return SendError(response, 400, std::string(completion.max_tokens_field) + ": want 0..4096",
                       kBadRequestError, completion.max_tokens_field);
    }
    // vLLM's id: the X-Request-Id header, else the body's request_id, else
    // a random uuid's 32 hex digits. A header that could not be quoted back
    // in JSON (not printable ASCII) is passed over.
    std::string base = request.get_header_value("X-Request-Id");
    if (base.size() > kMaxRequestIdBytes || !PrintableId(base)) {
      const auto body_id = body.find("request_id");
      base = body_id != body.end() && body_id->is_string() ? body_id->get<std::string>() : "";
    }
    if (base.empty()) {
      MutexLock lock(mu);
      base = RandomHexLocked(32);
    }
    completion.id = (chat ? "chatcmpl-" : "cmpl-") + base;
    completion.created = static_cast<int64_t>(WallSeconds());

    if (options.kind == ingest::EngineKind::kSglang) {
      return HandleSglangCompletion(response, body, std::move(completion));
    }
    // A body of SGLang's handoff reaching a vLLM engine was routed by the
    // wrong protocol: refused, where vLLM would ignore the fields.
    for (const char* field : kBootstrapFields) {
      if (HasField(body, field)) {
        return SendError(response, 400,
                         std::string(field) + ": engine " + options.id +
                             " speaks vLLM's NixlConnector handoff (kind=vllm), not SGLang's "
                             "bootstrap rooms");
      }
    }
    Result<Handoff> handoff = ParseHandoff(body);
    if (!handoff.ok()) return SendError(response, 400, handoff.status().message());
    // A role refuses the half of a handoff it does not serve: the request
    // was routed to the wrong pool, which a test or kvgov wants to see.
    if (*handoff == Handoff::kRemoteDecode && options.role == ingest::EngineRole::kDecode) {
      return SendError(response, 400,
                       "kv_transfer_params.do_remote_decode: engine " + options.id +
                           " is a decode engine (role=decode) and prefills no handoff");
    }
    if (*handoff == Handoff::kRemotePrefill && options.role == ingest::EngineRole::kPrefill) {
      return SendError(response, 400,
                       "kv_transfer_params.do_remote_prefill: engine " + options.id +
                           " is a prefill engine (role=prefill) and pulls no handoff");
    }
    std::string request_id;
    if (*handoff == Handoff::kRemoteDecode) {
      // vLLM's streamed chunks carry no kv_transfer_params, which is why
      // its proxies ask the prefill leg for one body.
      if (completion.stream) {
        return SendError(response, 400, "stream: a remote-decode prefill answers in one body");
      }
      request_id = request.get_header_value("X-Request-Id");
      if (!request_id.empty() &&
          (request_id.size() > kMaxRequestIdBytes || !PrintableId(request_id))) {
        return SendError(response, 400,
                         "X-Request-Id: want 1-" + std::to_string(kMaxRequestIdBytes) +
                             " printable ASCII bytes");
      }
    }
    std::optional<RemotePrefill> remote;
    if (*handoff == Handoff::kRemotePrefill) {
      Result<RemotePrefill> parsed = ParseRemotePrefill(body["kv_transfer_params"]);
      if (!parsed.ok()) return SendError(response, 400, parsed.status().message());
      remote = std::move(parsed).value();
    }
    NoteReceived(completion, std::nullopt);
    if (remote) return DecodeHandedOver(response, completion, *remote);
    PrefillAndAnswer(response, completion, *handoff == Handoff::kRemoteDecode, request_id);
  }

  void NoteReceived(const Completion& completion, std::optional<uint64_t> room) {
    MutexLock lock(received_mu);
    received_salts.push_back(completion.cache_salt);
    last_bootstrap_room = room;
  }

  // A completion at an SGLang engine: with bootstrap fields, its half of
  // the handoff by role (a both engine, like SGLang without
  // --disaggregation-mode, ignores them); without, a plain completion.
  void HandleSglangCompletion(httplib::Response& response, const Json& body,
                              Completion completion) {
    if (HasField(body, "kv_transfer_params")) {
      return SendError(response, 400,
                       "kv_transfer_params: engine " + options.id +
                           " speaks SGLang's bootstrap rooms (kind=sglang), not vLLM's "
                           "NixlConnector handoff");
    }
    Result<std::optional<Bootstrap>> bootstrap = ParseBootstrap(body);
    if (!bootstrap.ok()) return SendError(response, 400, bootstrap.status().message());
    NoteReceived(completion,
                 *bootstrap ? std::optional<uint64_t>((*bootstrap)->room) : std::nullopt);
    if (!*bootstrap || options.role == ingest::EngineRole::kBoth) {
      return PrefillAndAnswer(response, completion, /*hand_over=*/false, "");
    }
    if (options.role == ingest::EngineRole::kPrefill) {
      return PrefillForRoom(response, std::move(completion), (*bootstrap)->room);
    }
    DecodeFromRoom(response, completion, **bootstrap);
  }

  // Prefills the prompt and answers; a handoff also pins the prompt's
  // blocks for a decode engine and answers with the kv_transfer_params it
  // pulls them by.
  void PrefillAndAnswer(httplib::Response& response, const Completion& completion, bool hand_over,
                        const std::string& request_id) {
    const std::vector<int64_t>& tokens = completion.tokens;
    sim::PrefillOutcome outcome;
    double prefill_s = 0;
    Clock::time_point arrived;
    Clock::time_point start;
    Clock::time_point finish;
    Json transfer_params;
    {
      MutexLock lock(mu);
      arrived = Clock::now();
      SweepLocked(arrived);
      outcome = PrefillLocked(tokens, completion.cache_salt);
      prefill_s = cost.PrefillSeconds(static_cast<int64_t>(tokens.size()), outcome.computed_tokens);
      start = std::max(arrived, busy_until);
      finish = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(prefill_s / options.speedup));
      busy_until = finish;
      queue.emplace_back(start, finish);
      // Pinned in the same hold as the prefill, so no other request can
      // evict the blocks between.
      if (hand_over) transfer_params = HandOverLocked(completion, request_id, finish);
    }
    std::this_thread::sleep_until(finish);
    const double queue_s = std::chrono::duration<double>(start - arrived).count() * options.speedup;
    const int64_t prompt_tokens = static_cast<int64_t>(tokens.size());
    Json sim = {{"engine", options.id},
                {"hit_blocks", outcome.hit_blocks},
                {"prompt_blocks", outcome.prompt_blocks},
                {"queue_s", queue_s},
                {"prefill_s", prefill_s},
                {"ttft_s", queue_s + prefill_s}};
    Answer(response, completion, prompt_tokens - outcome.computed_tokens, std::move(sim),
           std::move(transfer_params));
  }

  // Pins a just-prefilled prompt under a fresh remote_request_id until a
  // decode engine pulls it or kv_lease passes (from the end of the
  // prefill, as vLLM's lease starts when the request finishes); returns
  // the kv_transfer_params of vLLM's pull scheduler.
  Json HandOverLocked(const Completion& completion, const std::string& request_id,
                      Clock::time_point finish) KVGOV_REQUIRES(mu) {
    sim::PinnedBlocks pinned = pool.Pin(completion.tokens, completion.cache_salt);
    // vLLM's internal id: the external one (X-Request-Id, or a random
    // uuid) with 8 random hex digits, which is why only the prefill
    // engine's answer can say it.
    const std::string base = request_id.empty() ? RandomHexLocked(32) : request_id;
    std::string id;
    do {
      id = base + "-" + RandomHexLocked(8);
    } while (handoffs.contains(id));
    const Clock::time_point expires = finish + options.kv_lease;
    expiries.emplace_back(expires, id);
    Json block_ids = pinned.block_ids;
    handoffs.emplace(id, PendingHandoff{.hashes = std::move(pinned.hashes),
                                        .tokens = static_cast<int64_t>(completion.tokens.size()),
                                        .expires = expires});
    pending_handoffs.store(PendingLocked());
    return Json{{"do_remote_prefill", true},
                {"do_remote_decode", false},
                {"remote_engine_id", options.id},
                {"remote_request_id", id},
                // One list per KV-cache group; the simulator has one.
                {"remote_block_ids", Json::array({std::move(block_ids)})},
                {"remote_host", options.host},
                {"remote_port", http_port},
                {"tp_size", 1},
                {"remote_num_tokens", completion.tokens.size()},
                {"transfer_mode", "pull"}};
  }

  // Under mu: the generator is not thread-safe.
  std::string RandomHexLocked(size_t digits) KVGOV_REQUIRES(mu) {
    std::string out;
    while (out.size() < digits) out += Hex64(rng());
    out.resize(digits);
    return out;
  }

  // Frees the pins whose lease has passed. Expiries are in order (each
  // prefill finishes after the one before, and the lease is one length),
  // so this stops at the first live one.
  void SweepLocked(Clock::time_point now) KVGOV_REQUIRES(mu) {
    while (!expiries.empty() && expiries.front().first <= now) {
      const auto handoff = handoffs.find(expiries.front().second);
      // A pulled handoff left its expiry behind; only the one it names ends.
      if (handoff != handoffs.end() && handoff->second.expires == expiries.front().first) {
        pool.Unpin(handoff->second.hashes);
        handoffs.erase(handoff);
      }
      expiries.pop_front();
    }
    // Rooms likewise: each expires kv_lease after its prefill's end.
    while (!room_expiries.empty() && room_expiries.front().first <= now) {
      const auto room = rooms.find(room_expiries.front().second);
      if (room != rooms.end() && room->second->expires == room_expiries.front().first) {
        const std::shared_ptr<PendingRoom> lapsed = room->second;
        EndRoomLocked(room_expiries.front().second, *lapsed);
      }
      room_expiries.pop_front();
    }
    pending_handoffs.store(PendingLocked());
  }

  // The prefill side of a pull: ends the pin and says what it held.
  void HandleNixlRead(const httplib::Request& request, httplib::Response& response) {
    const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return SendError(response, 400, "body: not a JSON object");
    }
    const auto id = body.find("remote_request_id");
    if (id == body.end() || !id->is_string()) {
      return SendError(response, 400, "remote_request_id: required, a string");
    }
    const std::string& request_id = id->get_ref<const std::string&>();
    if (const auto engine = body.find("remote_engine_id");
        engine != body.end() && !engine->is_null()) {
      // NIXL's handshake checks the engine id: an address that reached the
      // wrong engine must not read another prompt's blocks.
      if (!engine->is_string() || engine->get_ref<const std::string&>() != options.id) {
        return SendError(response, 404,
                         "remote_engine_id: this is engine " + options.id + ", not " +
                             (engine->is_string() ? engine->get<std::string>() : engine->dump()),
                         "not_found_error");
      }
    }
    PendingHandoff pulled;
    {
      MutexLock lock(mu);
      SweepLocked(Clock::now());
      const auto handoff = handoffs.find(request_id);
      if (handoff == handoffs.end()) {
        return SendError(response, 404,
                         "remote_request_id: " + request_id + " is unknown at engine " +
                             options.id +
                             " (never handed over, already pulled, or its pin "
                             "lapsed)",
                         "not_found_error");
      }
      pulled = std::move(handoff->second);
      handoffs.erase(handoff);
      pending_handoffs.store(PendingLocked());
      // Unpinned, not removed: vLLM frees the blocks into its prefix cache,
      // where they stay cached until evicted, so nothing is published.
      pool.Unpin(pulled.hashes);
      pulls.fetch_add(1);
    }
    response.set_content(Json{{"tokens", pulled.tokens}, {"block_hashes", pulled.hashes}}.dump(),
                         "application/json");
  }

  // The decode side of a handoff: waits pull_delay, pulls, caches the
  // prompt without prefilling it (what it already held is not pulled),
  // waits the modeled transfer, then answers as a completion does.
  void DecodeHandedOver(httplib::Response& response, const Completion& completion,
                        const RemotePrefill& remote) {
    const Clock::time_point arrived = Clock::now();
    const WaitingForKv waiting(pulling);
    std::this_thread::sleep_for(options.pull_delay);
    Result<int64_t> read = PullFrom(remote);
    if (!read.ok()) {
      // vLLM's kv_load_failure_policy=fail: the request fails rather than
      // prefilling here what the router meant to be prefilled elsewhere.
      failed.fetch_add(1);
      return SendError(response, 503, read.status().message(), "server_error");
    }
    LandAndAnswer(response, completion, arrived);
  }

  // A decode engine's handed-over prompt, once its KV has come: cached
  // without prefilling it (what it already held did not move), the modeled
  // transfer waited out, then answered as a completion is.
  void LandAndAnswer(httplib::Response& response, const Completion& completion,
                     Clock::time_point arrived) {
    const std::vector<int64_t>& tokens = completion.tokens;
    sim::PrefillOutcome outcome;
    {
      MutexLock lock(mu);
      SweepLocked(Clock::now());
      // The pulled blocks land in the pool as a prefill's would, and are
      // published the same way; their cost is the transfer below.
      outcome = PrefillLocked(tokens, completion.cache_salt);
    }
    const int64_t pulled_tokens = outcome.computed_tokens;
    const double transfer_s =
        sim::TransferSeconds(options.shape, pulled_tokens, options.link_bytes_per_s);
    const Clock::time_point landed = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(transfer_s / options.speedup)));
    const double queue_s =
        std::chrono::duration<double>(landed - arrived).count() * options.speedup;
    const int64_t prompt_tokens = static_cast<int64_t>(tokens.size());
    Json sim = {{"engine", options.id},
                {"hit_blocks", outcome.hit_blocks},
                {"prompt_blocks", outcome.prompt_blocks},
                {"queue_s", queue_s},
                {"prefill_s", 0.0},
                {"pulled_tokens", pulled_tokens},
                {"transfer_s", transfer_s},
                {"ttft_s", queue_s + transfer_s}};
    // Every prompt token was either held or pulled: none was computed here.
    Answer(response, completion, prompt_tokens, std::move(sim), Json());
  }

  // SGLang's prefill half: the room registered, the prompt prefilled as
  // usual and pinned in the same hold (so no other request evicts it
  // between), then the answer held back until the room's decode engine has
  // taken the KV, as SGLang finishes a prefill request once its push is
  // done; a 500 once kv_lease has passed without one (SGLang's bootstrap
  // timeout, after which it frees the blocks).
  void PrefillForRoom(httplib::Response& response, Completion completion, uint64_t room) {
    const std::vector<int64_t>& tokens = completion.tokens;
    const std::string name = "bootstrap_room " + std::to_string(room);
    sim::PrefillOutcome outcome;
    double prefill_s = 0;
    Clock::time_point arrived;
    Clock::time_point start;
    std::shared_ptr<PendingRoom> pending;
    {
      MutexLock lock(mu);
      arrived = Clock::now();
      SweepLocked(arrived);
      if (rooms.contains(room)) {
        // A room is one request's: a second would take the first one's KV.
        return SendError(response, 400,
                         "bootstrap_room: " + std::to_string(room) +
                             " is already pending at engine " + options.id);
      }
      // Each pending room holds an HTTP thread until its fetch, which needs
      // one of its own: one more room than the threads leave for fetches
      // would wait out its lease for nothing. Refused as a busy engine.
      if (rooms.size() + 1 >= static_cast<size_t>(options.http_threads)) {
        return SendError(response, 503,
                         name + ": engine " + options.id + " has " + std::to_string(rooms.size()) +
                             " rooms waiting for their decode engines, as many as its " +
                             std::to_string(options.http_threads) + " HTTP threads leave room for",
                         "server_error");
      }
      outcome = PrefillLocked(tokens, completion.cache_salt);
      prefill_s = cost.PrefillSeconds(static_cast<int64_t>(tokens.size()), outcome.computed_tokens);
      start = std::max(arrived, busy_until);
      const Clock::time_point finish =
          start + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(prefill_s / options.speedup));
      busy_until = finish;
      queue.emplace_back(start, finish);
      sim::PinnedBlocks pinned = pool.Pin(tokens, completion.cache_salt);
      pending = std::make_shared<PendingRoom>();
      pending->hashes = std::move(pinned.hashes);
      pending->tokens = static_cast<int64_t>(tokens.size());
      pending->ready = finish;
      pending->expires = finish + options.kv_lease;
      rooms.emplace(room, pending);
      room_expiries.emplace_back(pending->expires, room);
      pending_handoffs.store(PendingLocked());
    }
    bool pushed = false;
    bool reset = false;
    {
      MutexLock lock(mu);
      while (!pending->ended && !closing.load() &&
             room_cv.wait_until(lock, pending->expires) != std::cv_status::timeout) {
        continue;
      }
      // Not taken: the lease has passed (or the engine is stopping), and
      // the pin ends here if the sweep has not ended it yet.
      if (!pending->ended) EndRoomLocked(room, *pending);
      pushed = pending->fetched;
      reset = pending->reset;
    }
    if (!pushed) {
      if (closing.load()) {
        return SendError(response, 503, name + ": engine " + options.id + " is stopping",
                         "server_error");
      }
      if (reset) {
        return SendError(
            response, 500,
            name + ": engine " + options.id + "'s cache was reset before a decode worker connected",
            "server_error");
      }
      return SendError(response, 500,
                       name + ": no decode worker connected within " +
                           std::to_string(options.kv_lease.count()) + " ms",
                       "server_error");
    }
    const double queue_s = std::chrono::duration<double>(start - arrived).count() * options.speedup;
    const int64_t prompt_tokens = static_cast<int64_t>(tokens.size());
    Json sim = {{"engine", options.id},
                {"hit_blocks", outcome.hit_blocks},
                {"prompt_blocks", outcome.prompt_blocks},
                {"queue_s", queue_s},
                {"prefill_s", prefill_s},
                {"ttft_s", queue_s + prefill_s},
                {"bootstrap_room", room}};
    // SGLang's prefill engine generates the first token only; the decode
    // engine generates the answer.
    completion.max_tokens = 1;
    Answer(response, completion, prompt_tokens - outcome.computed_tokens, std::move(sim), Json());
  }

  // Ends a room: its pin, and the wait of its prefill request. REQUIRES:
  // `pending` the room's own (a lapsed room's number may be reused).
  void EndRoomLocked(uint64_t room, PendingRoom& pending) KVGOV_REQUIRES(mu) {
    if (pending.ended) return;
    if (const auto found = rooms.find(room);
        found != rooms.end() && found->second.get() == &pending) {
      rooms.erase(found);
    }
    pool.Unpin(pending.hashes);
    pending.ended = true;
    pending_handoffs.store(PendingLocked());
    room_cv.notify_all();
  }

  size_t PendingLocked() const KVGOV_REQUIRES(mu) { return handoffs.size() + rooms.size(); }

  // The prefill side of SGLang's push, asked for by the room's decode
  // engine: held until the room's prefill is done (the decode engine may
  // ask while it runs: both legs are sent at once), then the pin ends and
  // the answer says what was held. 404 while the room is unknown, which
  // the decode engine takes as "ask again".
  void HandleBootstrap(const httplib::Request& request, httplib::Response& response) {
    const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return SendError(response, 400, "body: not a JSON object");
    }
    Result<uint64_t> room = ReadRoom(body);
    if (!room.ok()) return SendError(response, 400, room.status().message());
    const std::string name = "bootstrap_room " + std::to_string(*room);
    std::vector<EngineHash> hashes;
    int64_t tokens = 0;
    {
      MutexLock lock(mu);
      const Clock::time_point arrived = Clock::now();
      SweepLocked(arrived);
      const auto found = rooms.find(*room);
      if (found == rooms.end()) {
        return SendError(response, 404,
                         name + " is unknown at engine " + options.id +
                             " (not prefilled here yet, already fetched, or its pin lapsed)",
                         "not_found_error");
      }
      const std::shared_ptr<PendingRoom> pending = found->second;
      // The prefill's end is known from its start: waited for, not
      // signalled; a room that ends meanwhile (another fetch, the lease,
      // a reset) or an engine that stops wakes it.
      const Clock::time_point until = std::min(pending->ready, arrived + options.kv_lease);
      while (!pending->ended && !closing.load() &&
             room_cv.wait_until(lock, until) != std::cv_status::timeout) {
        continue;
      }
      if (pending->ended || closing.load() || Clock::now() < pending->ready) {
        return SendError(response, 404,
                         name + " is not ready at engine " + options.id +
                             " (fetched by another request, its pin lapsed, or its prefill "
                             "did not end within " +
                             std::to_string(options.kv_lease.count()) + " ms)",
                         "not_found_error");
      }
      hashes = pending->hashes;
      tokens = pending->tokens;
      pending->fetched = true;
      // Unpinned, not removed: SGLang's radix cache keeps the prefix.
      EndRoomLocked(*room, *pending);
      pulls.fetch_add(1);
    }
    response.set_content(Json{{"tokens", tokens}, {"block_hashes", hashes}}.dump(),
                         "application/json");
  }

  // The decode side of SGLang's push: the room's KV from the prefill engine
  // the body names, asked for again every kBootstrapRetry while that engine
  // does not know the room (its leg may not have arrived yet) until
  // `deadline`. Unavailable, naming the room, when it never comes, the
  // engine stops, or the prefill engine cannot be reached.
  Result<int64_t> FetchRoom(const Bootstrap& bootstrap, Clock::time_point deadline) {
    const std::string where = "bootstrap_room " + std::to_string(bootstrap.room);
    const std::string prefill =
        where + ": the prefill engine at " + bootstrap.host + ":" + std::to_string(bootstrap.port);
    try {
      httplib::Client client(bootstrap.host, bootstrap.port);
      // Loopback: a prefill engine that does not connect within this is gone.
      client.set_connection_timeout(1, 0);
      client.set_write_timeout(5, 0);
      const std::string ask = Json{{"bootstrap_room", bootstrap.room}}.dump();
      for (;;) {
        // The prefill engine holds a fetch until the room's prefill is
        // done, for up to its own kv_lease.
        const auto left = std::max(Clock::duration::zero(), deadline - Clock::now());
        client.set_read_timeout(std::chrono::duration_cast<std::chrono::milliseconds>(left) +
                                std::chrono::seconds(5));
        httplib::Result result = client.Post("/kvgov_sim/bootstrap", ask, "application/json");
        if (!result) {
          return Status::Unavailable(prefill + " is unreachable (" +
                                     httplib::to_string(result.error()) + ")");
        }
        if (result->status == 404) {
          if (closing.load() || Clock::now() + kBootstrapRetry >= deadline) {
            return Status::Unavailable(prefill + " did not hold the room within " +
                                       std::to_string(options.kv_lease.count()) + " ms");
          }
          std::this_thread::sleep_for(kBootstrapRetry);
          continue;
        }
        const Json answer = Json::parse(result->body, nullptr, /*allow_exceptions=*/false);
        if (result->status != 200 || !answer.is_object() || !answer.contains("tokens") ||
            !answer["tokens"].is_number_integer()) {
          return Status::Unavailable(prefill + " answered the fetch with " +
                                     std::to_string(result->status) + " and no token count");
        }
        return answer["tokens"].get<int64_t>();
      }
    } catch (const std::exception& error) {
      return Status::Unavailable(where + ": " + error.what());
    }
  }

  // SGLang's decode half: waits pull_delay (as if queued), takes the room's
  // KV from its prefill engine, then lands and answers it as a pulled
  // prompt is; a fetch that fails answers 503, as SGLang fails a request
  // whose transfer failed.
  void DecodeFromRoom(httplib::Response& response, const Completion& completion,
                      const Bootstrap& bootstrap) {
    const Clock::time_point arrived = Clock::now();
    const WaitingForKv waiting(pulling);
    std::this_thread::sleep_for(options.pull_delay);
    Result<int64_t> fetched = FetchRoom(bootstrap, Clock::now() + options.kv_lease);
    if (!fetched.ok()) {
      failed.fetch_add(1);
      return SendError(response, 503, fetched.status().message(), "server_error");
    }
    LandAndAnswer(response, completion, arrived);
  }

  // The answer of a completion once its prompt is in: max_tokens tokens,
  // streamed or in one body with the modeled times in `sim` and, for a
  // handoff's prefill, its kv_transfer_params.
  void Answer(httplib::Response& response, const Completion& completion, int64_t cached_tokens,
              Json sim, Json transfer_params) {
    const bool chat = completion.chat;
    const int64_t max_tokens = completion.max_tokens;
    const int64_t prompt_tokens = static_cast<int64_t>(completion.tokens.size());
    const Json usage = {{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", max_tokens},
                        {"total_tokens", prompt_tokens + max_tokens},
                        {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
    const char* object = chat ? "chat.completion" : "text_completion";
    if (completion.stream) return StreamAnswer(response, completion, usage);
    std::string text;
    for (int64_t i = 0; i < max_tokens; ++i) {
      std::this_thread::sleep_for(options.token_interval);
      text += " tok" + std::to_string(i);
    }
    const Json choice = chat ? Json{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", text}}},
                                    {"finish_reason", "length"}}
                             : Json{{"index", 0}, {"text", text}, {"finish_reason", "length"}};
    Json answer = {{"id", completion.id},
                   {"object", object},
                   {"created", completion.created},
                   {"model", options.model},
                   {"choices", Json::array({choice})},
                   {"usage", usage},
                   // Modeled times (not wall time): what the GPU would have taken.
                   {"kvgov_sim", std::move(sim)}};
    if (!transfer_params.is_null()) answer["kv_transfer_params"] = std::move(transfer_params);
    response.set_content(answer.dump(), "application/json");
  }

  // Server-sent events, one chunk a token every token_interval, then the
  // usage chunk when asked for, then [DONE]; every chunk carries the
  // completion's id, created and model, as vLLM's do. A client that goes
  // away ends the request (counted), as vLLM aborts it.
  void StreamAnswer(httplib::Response& response, const Completion& completion, const Json& usage) {
    const bool chat = completion.chat;
    const int64_t max_tokens = completion.max_tokens;
    const bool include_usage = completion.include_usage;
    const Json head = {{"id", completion.id},
                       {"object", chat ? "chat.completion.chunk" : "text_completion"},
                       {"created", completion.created},
                       {"model", options.model}};
    auto chunk = [chat, head](const std::string& text, const Json& finish) {
      const Json choice =
          chat ? Json{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", finish}}
               : Json{{"index", 0}, {"text", text}, {"finish_reason", finish}};
      Json event = head;
      event["choices"] = Json::array({choice});
      return "data: " + event.dump() + "\n\n";
    };
    response.set_chunked_content_provider(
        "text/event-stream", [this, chunk, max_tokens, include_usage, usage, head,
                              next = int64_t{0}](size_t, httplib::DataSink& sink) mutable {
          std::string event;
          if (next < max_tokens) {
            std::this_thread::sleep_for(options.token_interval);
            event = chunk(" tok" + std::to_string(next), nullptr);
            ++next;
          } else {
            event = chunk("", "length");
            if (include_usage) {
              Json last = head;
              last["choices"] = Json::array();
              last["usage"] = usage;
              event += "data: " + last.dump() + "\n\n";
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

  // Empties the pool (AllBlocksCleared). The pool's pins went with it: no
  // pending handoff can be pulled, nor room fetched, now.
  void Reset() {
    MutexLock lock(mu);
    PublishLocked({pool.Reset()});
    handoffs.clear();
    expiries.clear();
    for (auto& entry : rooms) {
      entry.second->ended = true;
      entry.second->reset = true;
    }
    rooms.clear();
    room_expiries.clear();
    pending_handoffs.store(0);
    room_cv.notify_all();
  }

  void HandleMetrics(httplib::Response& response) {
    size_t running = 0;
    size_t waiting = 0;
    double usage = 0;
    {
      MutexLock lock(mu);
      const Clock::time_point now = Clock::now();
      while (!queue.empty() && queue.front().second <= now) queue.pop_front();
      for (const auto& [start, finish] : queue) ++(start <= now ? running : waiting);
      waiting += static_cast<size_t>(std::max<int64_t>(pulling.load(), 0));
      SweepLocked(now);
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

  // A prompt handed over and not yet pulled: its pinned blocks.
  struct PendingHandoff {
    std::vector<EngineHash> hashes;
    int64_t tokens = 0;
    Clock::time_point expires;
  };

  // Also guards every PendingRoom's fields, unannotated: a nested struct's
  // member cannot name the mutex of the Impl that holds it.
  mutable Mutex mu;
  // Responses' conversations by response id (previous_response_id), newest
  // kMaxConversations.
  static constexpr size_t kMaxConversations = 4096;
  std::unordered_map<std::string, Json> conversations KVGOV_GUARDED_BY(mu);
  sim::BlockPool pool KVGOV_GUARDED_BY(mu);
  sim::PrefillCostModel cost;
  Clock::time_point busy_until KVGOV_GUARDED_BY(mu){};
  // Each modeled request's (start, finish).
  std::deque<std::pair<Clock::time_point, Clock::time_point>> queue KVGOV_GUARDED_BY(mu);
  uint64_t next_seq KVGOV_GUARDED_BY(mu) = 0;
  // By remote_request_id.
  std::unordered_map<std::string, PendingHandoff> handoffs KVGOV_GUARDED_BY(mu);
  // In expiry order.
  std::deque<std::pair<Clock::time_point, std::string>> expiries KVGOV_GUARDED_BY(mu);
  // By bootstrap_room.
  std::unordered_map<uint64_t, std::shared_ptr<PendingRoom>> rooms KVGOV_GUARDED_BY(mu);
  // In expiry order.
  std::deque<std::pair<Clock::time_point, uint64_t>> room_expiries KVGOV_GUARDED_BY(mu);
  std::condition_variable_any room_cv;  // with mu: a room ended, or the engine is stopping
  std::atomic<bool> closing{false};     // set under mu, so a room's waiter cannot miss it
  std::mt19937_64 rng KVGOV_GUARDED_BY(mu){std::random_device{}()};
  std::atomic<size_t> pending_handoffs{0};  // handoffs and rooms, for the idle sweep
  std::atomic<uint64_t> pulls{0};           // prefill side: handoffs pulled, rooms fetched
  std::atomic<uint64_t> failed{0};          // decode side: pulls (or room fetches) that failed
  std::atomic<int64_t> pulling{0};          // decode side: handoffs waiting for their KV

  Mutex received_mu;
  // The cache_salt of every completion, "" for none.
  std::vector<std::string> received_salts KVGOV_GUARDED_BY(received_mu);
  std::optional<uint64_t> last_bootstrap_room KVGOV_GUARDED_BY(received_mu);
  std::atomic<uint64_t> aborted{0};  // streams whose client went away

  Vocabulary vocabulary;  // what the toy tokenizer has met, for /detokenize

  Mutex history_mu;  // taken after mu; the replay thread reads history
  std::deque<std::pair<uint64_t, std::string>> history KVGOV_GUARDED_BY(history_mu);

  zmq::context_t context{1};
  zmq::socket_t pub KVGOV_GUARDED_BY(mu){context, zmq::socket_type::pub};
  zmq::socket_t router{context, zmq::socket_type::router};
  std::string events_endpoint;
  std::string replay_endpoint;
  std::thread replay_thread;
  std::atomic<bool> stopping{false};

  httplib::Server http;
  int http_port = 0;
  std::thread http_thread;
  Mutex stop_mu;
  bool stopped KVGOV_GUARDED_BY(stop_mu) = false;
};

Result<std::unique_ptr<LiveEngine>> LiveEngine::Start(const LiveEngineOptions& options) {
  if (options.kind != ingest::EngineKind::kVllm && options.kind != ingest::EngineKind::kSglang) {
    return Status::InvalidArgument("simulated engine " + options.id +
                                   ": kind must be vllm or sglang, got " +
                                   std::string(ToString(options.kind)));
  }
  if (options.kind == ingest::EngineKind::kSglang && options.role == ingest::EngineRole::kPrefill &&
      options.http_threads < 2) {
    return Status::InvalidArgument("simulated engine " + options.id +
                                   ": http_threads must be >= 2 for an SGLang prefill engine "
                                   "(a room's fetch is served beside the request waiting on it)");
  }
  if (!(options.speedup > 0)) {
    return Status::InvalidArgument("simulated engine " + options.id + ": speedup must be > 0");
  }
  // The engine spec's bounds for kv-lease-ms (a day at most).
  if (options.kv_lease <= std::chrono::milliseconds(0) ||
      options.kv_lease > std::chrono::hours(24)) {
    return Status::InvalidArgument("simulated engine " + options.id +
                                   ": kv_lease must be in 1 ms-24 h");
  }
  if (options.max_model_len < 1) {
    return Status::InvalidArgument("simulated engine " + options.id +
                                   ": max_model_len must be >= 1");
  }
  if (!(options.link_bytes_per_s > 0)) {
    return Status::InvalidArgument("simulated engine " + options.id +
                                   ": link_bytes_per_s must be > 0");
  }
  if (options.pull_delay < std::chrono::milliseconds(0)) {
    return Status::InvalidArgument("simulated engine " + options.id + ": pull_delay must be >= 0");
  }
  auto impl = std::make_unique<Impl>(options);
  try {
    // Nobody else has it yet; held so that every access to pub is under it.
    MutexLock lock(impl->mu);
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
  http.Get("/health",
           [](const httplib::Request&, httplib::Response& response) { response.status = 200; });
  http.Get("/metrics", [self](const httplib::Request&, httplib::Response& response) {
    self->HandleMetrics(response);
  });
  http.Post("/reset_prefix_cache", [self](const httplib::Request&, httplib::Response& response) {
    self->Reset();
    response.status = 200;
  });
  if (options.kind == ingest::EngineKind::kSglang) {
    // SGLang's whole-cache flush. The real one refuses (400) while requests
    // run; the simulator always flushes.
    http.Post("/flush_cache", [self](const httplib::Request&, httplib::Response& response) {
      self->Reset();
      response.status = 200;
    });
  }
  http.Post("/v1/completions",
            [self](const httplib::Request& request, httplib::Response& response) {
              self->HandleCompletion(request, response, /*chat=*/false);
            });
  http.Post("/v1/chat/completions",
            [self](const httplib::Request& request, httplib::Response& response) {
              self->HandleCompletion(request, response, /*chat=*/true);
            });
  http.Post("/v1/messages", [self](const httplib::Request& request, httplib::Response& response) {
    self->HandleMessages(request, response);
  });
  http.Post("/v1/responses", [self](const httplib::Request& request, httplib::Response& response) {
    self->HandleResponses(request, response);
  });
  http.Post("/tokenize", [self](const httplib::Request& request, httplib::Response& response) {
    self->HandleTokenize(request, response);
  });
  http.Post("/detokenize", [self](const httplib::Request& request, httplib::Response& response) {
    self->HandleDetokenize(request, response);
  });
  if (options.kind == ingest::EngineKind::kSglang) {
    // SGLang's path for the same shapes (connectors::TokenizePath).
    http.Post("/v1/tokenize", [self](const httplib::Request& request, httplib::Response& response) {
      self->HandleTokenize(request, response);
    });
  }
  http.Post("/kvgov_sim/bootstrap",
            [self](const httplib::Request& request, httplib::Response& response) {
              self->HandleBootstrap(request, response);
            });
  http.Post("/kvgov_sim/nixl_read",
            [self](const httplib::Request& request, httplib::Response& response) {
              self->HandleNixlRead(request, response);
            });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, const std::exception_ptr&) {
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
    MutexLock lock(impl_->stop_mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  {
    // A room's waiters (a prefill held for its push, a fetch held for its
    // prefill) end now, so the HTTP server's threads can be joined.
    MutexLock lock(impl_->mu);
    impl_->closing = true;
  }
  impl_->room_cv.notify_all();
  impl_->http.stop();
  if (impl_->http_thread.joinable()) impl_->http_thread.join();
  impl_->stopping = true;
  if (impl_->replay_thread.joinable()) impl_->replay_thread.join();
}

sim::PrefillOutcome LiveEngine::Prefill(std::span<const int64_t> tokens,
                                        std::string_view cache_salt) {
  MutexLock lock(impl_->mu);
  return impl_->PrefillLocked(tokens, cache_salt);
}

size_t LiveEngine::resident_blocks() const {
  MutexLock lock(impl_->mu);
  return impl_->pool.size();
}

std::vector<std::string> LiveEngine::received_salts() const {
  MutexLock lock(impl_->received_mu);
  return impl_->received_salts;
}

std::optional<uint64_t> LiveEngine::last_bootstrap_room() const {
  MutexLock lock(impl_->received_mu);
  return impl_->last_bootstrap_room;
}

uint64_t LiveEngine::aborted_streams() const { return impl_->aborted.load(); }

uint64_t LiveEngine::pulls() const { return impl_->pulls.load(); }
uint64_t LiveEngine::failed_pulls() const { return impl_->failed.load(); }

size_t LiveEngine::pinned_blocks() const {
  MutexLock lock(impl_->mu);
  impl_->SweepLocked(Clock::now());
  return impl_->pool.pinned_blocks();
}

uint64_t LiveEngine::next_seq() const {
  MutexLock lock(impl_->mu);
  return impl_->next_seq;
}

const std::string& LiveEngine::id() const { return impl_->options.id; }
std::string LiveEngine::events_endpoint() const { return impl_->events_endpoint; }
std::string LiveEngine::replay_endpoint() const { return impl_->replay_endpoint; }
std::string LiveEngine::control_url() const {
  return "http://" + impl_->options.host + ":" + std::to_string(impl_->http_port);
}

std::string LiveEngine::EngineSpec() const {
  return "id=" + impl_->options.id + ",kind=" + std::string(ToString(impl_->options.kind)) +
         ",events=" + events_endpoint() + ",replay=" + replay_endpoint() +
         ",model=" + impl_->options.model +
         ",block-size=" + std::to_string(impl_->options.pool.block_size) +
         ",control=" + control_url() + RoleSpec(impl_->options, impl_->http_port);
}

}  // namespace kvgov::simfleet
