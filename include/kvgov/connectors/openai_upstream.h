#pragma once

// The gateway's client of an engine's own OpenAI server
// (docs/formats/gateway.md): its tokenizer and the forwarded request.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kvgov/core/status.h"
#include "kvgov/ingest/engine_spec.h"

namespace kvgov::connectors {

struct UpstreamTimeouts {
  int64_t connect_ms = 2000;       // > 0
  int64_t first_byte_ms = 60000;   // > 0; also the longest pause between chunks
};

/// Where an engine of `kind` tokenizes: vLLM's POST /tokenize, SGLang's
/// POST /v1/tokenize. Both take {"model","prompt"} or {"model","messages",
/// ...} and answer {"tokens","count","max_model_len"}.
std::string_view TokenizePath(ingest::EngineKind kind);

/// POSTs `body` to the engine's tokenizer (TokenizePath) and returns its
/// tokens, read with limits. Unavailable when the engine cannot be reached
/// or does not answer 200 (the status and the start of its body named),
/// InvalidArgument for an answer that is not a tokenize answer,
/// ResourceExhausted for one over 64 MiB. Never throws.
Result<std::vector<int64_t>> Tokenize(const std::string& base_url, ingest::EngineKind kind,
                                      std::string_view body, const UpstreamTimeouts& timeouts);

/// What reached the gateway of one forwarded request.
struct UpstreamAnswer {
  bool head_seen = false;  // the engine answered with a status line
  int status = 0;
  std::string content_type;
};

/// Forwards `body` to `base_url` + `path` and streams the answer:
/// `on_head(status, content_type)` once, then `on_chunk` for every piece of
/// the body as it arrives. Either returning false stops reading and closes
/// the connection (the engine sees the client go and aborts the request).
/// Returns OK when the body ended; Unavailable when the connection failed
/// (before the head: `answer.head_seen` is false, and the request may be
/// retried elsewhere), DeadlineExceeded when no byte came within the
/// first-byte timeout, Cancelled when a callback stopped it. Thread-safe:
/// each call has its own connection.
Status Forward(const std::string& base_url, const std::string& path, std::string body,
               const UpstreamTimeouts& timeouts,
               const std::function<bool(int status, std::string_view content_type)>& on_head,
               const std::function<bool(std::string_view chunk)>& on_chunk,
               UpstreamAnswer* answer);

}  // namespace kvgov::connectors
