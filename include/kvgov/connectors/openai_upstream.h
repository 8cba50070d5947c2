#pragma once

// The gateway's client of an engine's own OpenAI server
// (docs/formats/gateway.md): its tokenizer and the forwarded request.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/mutex.h"
#include "kvgov/core/status.h"
#include "kvgov/ingest/engine_spec.h"

namespace kvgov::connectors {

struct UpstreamTimeouts {
  int64_t connect_ms = 2000;      // > 0
  int64_t first_byte_ms = 60000;  // > 0; also the longest pause between chunks
};

/// Where an engine of `kind` tokenizes: vLLM's POST /tokenize, SGLang's
/// POST /v1/tokenize. Both take {"model","prompt"} or {"model","messages",
/// ...} and answer {"tokens","count","max_model_len"}.
std::string_view TokenizePath(ingest::EngineKind kind);

/// Where an engine of `kind` turns token ids back into text: vLLM's POST
/// /detokenize, SGLang's POST /v1/detokenize. Both take {"model","tokens"}.
std::string_view DetokenizePath(ingest::EngineKind kind);

/// What reached the gateway of one forwarded request.
struct UpstreamAnswer {
  bool head_seen = false;  // the engine answered with a status line
  int status = 0;
  std::string content_type;
};

/// The gateway's connections to the engines' OpenAI servers. A connection
/// whose answer was read to its end is kept for the next request to the
/// same engine (at most kMaxIdlePerEngine of them, each for at most
/// kMaxIdle, below the engines' own keep-alive timeouts), so a forwarded
/// request costs no connect. The cap is small because a thread-per-
/// connection server (cpp-httplib, as the simulated engines) holds a thread
/// for every open connection; vLLM's and SGLang's asyncio servers do not. A
/// kept connection the engine has closed meanwhile fails before any answer;
/// the request is then sent once more on a new connection.
///
/// Thread-safe: one mutex guards the idle connections; each connection is
/// used by one request at a time.
class UpstreamConnections {
 public:
  static constexpr std::chrono::milliseconds kMaxIdle{2000};
  static constexpr size_t kMaxIdlePerEngine = 8;

  explicit UpstreamConnections(UpstreamTimeouts timeouts);
  ~UpstreamConnections();
  UpstreamConnections(const UpstreamConnections&) = delete;
  UpstreamConnections& operator=(const UpstreamConnections&) = delete;

  /// POSTs `body` to the engine's tokenizer (TokenizePath) and returns its
  /// tokens, read with limits. Unavailable when the engine cannot be
  /// reached or does not answer 200 (the status and the start of its body
  /// named), InvalidArgument for an answer that is not a tokenize answer,
  /// ResourceExhausted for one over 64 MiB. Never throws.
  Result<std::vector<int64_t>> Tokenize(const std::string& base_url, ingest::EngineKind kind,
                                        std::string_view body);

  /// POSTs `body` ({"model","tokens"}) to the engine's detokenizer
  /// (DetokenizePath) and returns the text; errors as Tokenize.
  Result<std::string> Detokenize(const std::string& base_url, ingest::EngineKind kind,
                                 std::string_view body);

  /// Forwards `body` to `base_url` + `path` and streams the answer:
  /// `on_head(status, content_type)` once, then `on_chunk` for every piece
  /// of the body as it arrives. Either returning false stops reading and
  /// closes the connection (the engine sees the client go and aborts the
  /// request). Returns OK when the body ended; Unavailable when the
  /// connection failed (before the head: `answer.head_seen` is false, and
  /// the request may be retried elsewhere), DeadlineExceeded when no byte
  /// came within the first-byte timeout, Cancelled when a callback stopped
  /// it. `request_id`, when not empty, is sent as X-Request-Id (the id
  /// vLLM's engine takes for the request).
  Status Forward(const std::string& base_url, const std::string& path, const std::string& body,
                 const std::function<bool(int status, std::string_view content_type)>& on_head,
                 const std::function<bool(std::string_view chunk)>& on_chunk,
                 UpstreamAnswer* answer, std::string_view request_id = "");

  /// Closes every kept connection (an engine stopping waits for its open
  /// connections). Requests in flight keep theirs.
  void CloseIdle();

 private:
  struct Connection;
  // POSTs a small JSON body and returns the 200 answer's body, read up to
  // a bound; `what` names the call in errors.
  Result<std::string> PostForAnswer(const std::string& base_url, const std::string& path,
                                    std::string_view body, std::string_view what);
  // A kept connection to `base_url` (`*kept` true) or a new one.
  Result<std::unique_ptr<Connection>> Take(const std::string& base_url, bool* kept);
  void Keep(const std::string& base_url, std::unique_ptr<Connection> connection);
  // No answer within the first-byte timeout of `sent`.
  bool TimedOut(std::chrono::steady_clock::time_point sent) const;
  // A first try on a kept connection that failed before its timeout: the
  // engine had closed the connection while it sat idle, so nothing was
  // answered and the request may go once more on a new connection.
  bool ClosedWhileKept(bool kept, int attempt, std::chrono::steady_clock::time_point sent) const;

  const UpstreamTimeouts timeouts_;
  Mutex mu_;
  // Per engine URL, oldest first.
  std::map<std::string, std::deque<std::unique_ptr<Connection>>, std::less<>> idle_
      KVGOV_GUARDED_BY(mu_);
};

}  // namespace kvgov::connectors
