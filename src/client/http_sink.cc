#include "kvgov/client/http_sink.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

#include "client/http_connection.h"
#include "kvgov/core/mutex.h"

namespace kvgov::client {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// {"events":[ ... ]}: what a batch adds around its events, plus a comma
// per event.
constexpr size_t kBatchFraming = 13;

struct Queued {
  uint64_t seq;
  std::string json;
  Clock::time_point at;
};

// The number kvgov accepted from its answer, {"accepted":N,"rejected":[...]}.
// kvgov writes object keys in sorted order, so the first "accepted" key is
// the top-level one; an error string that mentions the word has its quotes
// escaped and cannot match the quoted key followed by a colon.
std::optional<uint64_t> AcceptedCount(std::string_view body) {
  constexpr std::string_view kKey = "\"accepted\"";
  size_t at = body.find(kKey);
  if (at == std::string_view::npos) return std::nullopt;
  at += kKey.size();
  while (at < body.size() &&
         (body[at] == ' ' || body[at] == '\n' || body[at] == '\t' || body[at] == '\r')) {
    ++at;
  }
  if (at >= body.size() || body[at] != ':') return std::nullopt;
  ++at;
  while (at < body.size() &&
         (body[at] == ' ' || body[at] == '\n' || body[at] == '\t' || body[at] == '\r')) {
    ++at;
  }
  uint64_t accepted = 0;
  auto [end, ec] = std::from_chars(body.data() + at, body.data() + body.size(), accepted);
  if (ec != std::errc() || end == body.data() + at) return std::nullopt;
  return accepted;
}

// For last_error: the start of an answer body, one line, printable bytes.
std::string Snippet(std::string_view body) {
  std::string out;
  for (char c : body.substr(0, 256)) out.push_back((c >= 0x20 && c < 0x7f) ? c : ' ');
  return out;
}

Status ValidateOptions(const HttpSinkOptions& o) {
  if (o.max_batch_events == 0 || o.max_queue_events == 0) {
    return Status::InvalidArgument("max_batch_events and max_queue_events must be > 0");
  }
  if (o.max_batch_bytes < 1024 || o.max_queue_bytes < o.max_batch_bytes) {
    return Status::InvalidArgument(
        "max_batch_bytes must be >= 1024 and max_queue_bytes >= max_batch_bytes");
  }
  if (o.max_attempts < 1) return Status::InvalidArgument("max_attempts must be >= 1");
  if (o.max_batch_age.count() < 0 || o.initial_backoff.count() < 0 ||
      o.max_backoff < o.initial_backoff || o.close_timeout.count() < 0) {
    return Status::InvalidArgument(
        "max_batch_age, initial_backoff and close_timeout must be >= 0, and max_backoff >= "
        "initial_backoff");
  }
  if (o.connect_timeout.count() <= 0 || o.request_timeout.count() <= 0) {
    return Status::InvalidArgument("connect_timeout and request_timeout must be > 0");
  }
  // The token goes into a header line: a CR or LF in it would let it
  // write headers of its own.
  for (char c : o.bearer_token) {
    if (c <= 0x20 || c >= 0x7f) {
      return Status::InvalidArgument("bearer_token: only visible ASCII is allowed");
    }
  }
  return Status::Ok();
}

}  // namespace

struct HttpSink::Impl {
  explicit Impl(HttpSinkOptions o, internal::HttpEndpoint e)
      : options(std::move(o)), endpoint(std::move(e)) {
    headers = "Content-Type: application/json\r\nUser-Agent: kvgov-client\r\n";
    if (!options.bearer_token.empty()) {
      headers += "Authorization: Bearer " + options.bearer_token + "\r\n";
    }
  }

  void Run();
  // Waits for a batch worth sending and moves it out of the queue; false
  // when the sender should exit. `lock` holds mu; waits release it.
  bool TakeBatch(MutexLock& lock, std::vector<Queued>& batch) KVGOV_REQUIRES(mu);
  // Posts one batch until it settles; counts the outcome under mu.
  void Deliver(internal::HttpConnection& connection, std::vector<Queued>& batch,
               std::minstd_rand& rng) KVGOV_EXCLUDES(mu);
  void Settle(const std::vector<Queued>& batch, uint64_t sent, uint64_t rejected, uint64_t failed,
              std::string error) KVGOV_EXCLUDES(mu);

  const HttpSinkOptions options;
  const internal::HttpEndpoint endpoint;
  std::string headers;  // set once in the constructor
  internal::Interrupter interrupter;

  // Lock order: close_mu, then mu. close_mu only serialises Close calls,
  // so that one joins the sender and the others wait for it.
  Mutex close_mu;
  mutable Mutex mu;
  std::condition_variable_any work;     // wakes the sender: events, flush, close, abandon
  std::condition_variable_any settled;  // wakes Flush and Close
  std::deque<Queued> queue KVGOV_GUARDED_BY(mu);
  size_t queue_bytes KVGOV_GUARDED_BY(mu) = 0;
  // queue.size(), written under mu, read without it.
  std::atomic<size_t> queue_size{0};
  uint64_t next_seq KVGOV_GUARDED_BY(mu) = 1;         // the seq the next queued event gets
  uint64_t settled_through KVGOV_GUARDED_BY(mu) = 0;  // every seq up to here is settled
  uint64_t flush_through KVGOV_GUARDED_BY(mu) = 0;    // send partial batches until settled here
  bool closing KVGOV_GUARDED_BY(mu) = false;          // Emit refuses; the sender drains
  bool abandon KVGOV_GUARDED_BY(mu) = false;          // the close deadline passed
  bool joined KVGOV_GUARDED_BY(mu) = false;
  SinkStats counters KVGOV_GUARDED_BY(mu);  // `pending` is derived in stats()
  std::thread sender;  // started by Create, joined by the Close that holds close_mu
};

void HttpSink::Impl::Run() {
  internal::HttpConnection connection(endpoint, {options.connect_timeout, options.request_timeout},
                                      &interrupter);
  // Jitter only needs to decorrelate senders, not to be unpredictable; a
  // clock seed also cannot throw as std::random_device can.
  std::minstd_rand rng(
      static_cast<uint32_t>(Clock::now().time_since_epoch().count()) ^
      static_cast<uint32_t>(std::hash<std::thread::id>()(std::this_thread::get_id())));
  std::vector<Queued> batch;
  for (;;) {
    {
      MutexLock lock(mu);
      if (!TakeBatch(lock, batch)) return;
    }
    Deliver(connection, batch, rng);
    batch.clear();
  }
}

bool HttpSink::Impl::TakeBatch(MutexLock& lock, std::vector<Queued>& batch) {
  for (;;) {
    if (abandon) return false;
    if (queue.empty()) {
      if (closing) return false;
      work.wait(lock);
      continue;
    }
    if (closing || flush_through > settled_through || queue.size() >= options.max_batch_events ||
        queue_bytes >= options.max_batch_bytes) {
      break;
    }
    const Clock::time_point due = queue.front().at + options.max_batch_age;
    if (Clock::now() >= due) break;
    work.wait_until(lock, due);
  }
  size_t bytes = kBatchFraming;
  while (!queue.empty() && batch.size() < options.max_batch_events) {
    const size_t size = queue.front().json.size() + 1;
    // Emit refused events over max_batch_bytes, so the first always fits.
    if (!batch.empty() && bytes + size > options.max_batch_bytes) break;
    bytes += size;
    queue_bytes -= queue.front().json.size();
    batch.push_back(std::move(queue.front()));
    queue.pop_front();
  }
  queue_size.store(queue.size(), std::memory_order_relaxed);
  return true;
}

void HttpSink::Impl::Deliver(internal::HttpConnection& connection, std::vector<Queued>& batch,
                             std::minstd_rand& rng) {
  size_t size = kBatchFraming;
  for (const Queued& event : batch) size += event.json.size() + 1;
  std::string body;
  body.reserve(size);
  body += "{\"events\":[";
  for (size_t i = 0; i < batch.size(); ++i) {
    if (i > 0) body.push_back(',');
    body += batch[i].json;
  }
  body += "]}";

  const uint64_t n = batch.size();
  milliseconds backoff = options.initial_backoff;
  std::string error;
  for (int attempt = 1;; ++attempt) {
    Result<internal::HttpResponse> answer = connection.Post("/v1/events", headers, body);
    if (answer.ok() && answer->status >= 200 && answer->status < 300) {
      const std::optional<uint64_t> accepted = AcceptedCount(answer->body);
      // A 2xx kvgov did not word as expected (a proxy's?) is taken as
      // accepted whole: it is not a refusal, and resending would repeat it.
      const uint64_t sent = accepted ? std::min(*accepted, n) : n;
      std::string why;
      if (sent < n) {
        why = "kvgov rejected " + std::to_string(n - sent) + " of " + std::to_string(n) +
              " events: " + Snippet(answer->body);
      }
      return Settle(batch, sent, n - sent, 0, std::move(why));
    }
    if (answer.ok() && answer->status < 500) {
      // A 4xx means this body will never be accepted as it is: resending
      // it would only repeat the refusal (and a 401/403 is a config error).
      // kvgov sends no 1xx-3xx answer here; one from a proxy in between is
      // a refusal just the same.
      return Settle(batch, 0, n, 0,
                    "HTTP " + std::to_string(answer->status) + ": " + Snippet(answer->body));
    }
    error = answer.ok() ? "HTTP " + std::to_string(answer->status) + ": " + Snippet(answer->body)
                        : answer.status().message();
    if (attempt >= options.max_attempts) {
      return Settle(batch, 0, 0, n,
                    "gave up after " + std::to_string(attempt) + " attempts: " + error);
    }
    // A delay drawn from the upper half of an exponentially growing
    // ceiling: senders that failed together do not retry together, and
    // none retries at once.
    const auto ceiling = std::max<int64_t>(1, backoff.count());
    const milliseconds delay(std::uniform_int_distribution<int64_t>(ceiling / 2, ceiling)(rng));
    backoff = std::min(options.max_backoff, backoff * 2);
    MutexLock lock(mu);
    ++counters.retries;
    counters.last_error = error;
    // Until the delay is over or Close abandons the batch (a loop, not a
    // predicate: the thread-safety analysis cannot see a lambda run under
    // the lock).
    const Clock::time_point due = Clock::now() + delay;
    while (!abandon && work.wait_until(lock, due) != std::cv_status::timeout) continue;
    if (abandon) {
      lock.unlock();
      return Settle(batch, 0, 0, n, "abandoned at close: " + error);
    }
  }
}

void HttpSink::Impl::Settle(const std::vector<Queued>& batch, uint64_t sent, uint64_t rejected,
                            uint64_t failed, std::string error) {
  {
    MutexLock lock(mu);
    counters.sent += sent;
    counters.rejected += rejected;
    counters.failed += failed;
    if (failed == 0) ++counters.batches;
    if (!error.empty()) counters.last_error = std::move(error);
    settled_through = batch.back().seq;
  }
  settled.notify_all();
}

Result<std::unique_ptr<HttpSink>> HttpSink::Create(HttpSinkOptions options) {
  KVGOV_RETURN_IF_ERROR(ValidateOptions(options));
  KVGOV_ASSIGN_OR_RETURN(internal::HttpEndpoint endpoint, internal::ParseHttpUrl(options.url));
  auto impl = std::make_unique<Impl>(std::move(options), std::move(endpoint));
  try {
    impl->sender = std::thread([raw = impl.get()] { raw->Run(); });
  } catch (const std::system_error& error) {
    return Status::ResourceExhausted(std::string("cannot start the sender thread: ") +
                                     error.what());
  }
  return std::unique_ptr<HttpSink>(new HttpSink(std::move(impl)));
}

HttpSink::HttpSink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpSink::~HttpSink() { (void)Close(impl_->options.close_timeout); }

Status HttpSink::Emit(const Event& event) noexcept {
  Impl& s = *impl_;
  // While kvgov is down the queue stays full and most events are dropped:
  // this look, without the lock, spares them the encoding. The check under
  // the lock below is the one that counts.
  if (s.queue_size.load(std::memory_order_relaxed) >= s.options.max_queue_events) {
    MutexLock lock(s.mu);
    if (s.queue.size() >= s.options.max_queue_events) {
      ++s.counters.dropped;
      return s.closing ? Status::FailedPrecondition("sink is closed")
                       : Status::ResourceExhausted("queue full");
    }
  }
  Result<std::string> json = EncodeEvent(event);
  if (json.ok() && json->size() + kBatchFraming + 1 > s.options.max_batch_bytes) {
    json = Status::InvalidArgument("event is " + std::to_string(json->size()) +
                                   " bytes, over max_batch_bytes " +
                                   std::to_string(s.options.max_batch_bytes));
  }
  if (!json.ok()) {
    MutexLock lock(s.mu);
    ++s.counters.invalid;
    s.counters.last_error = json.status().message();
    return json.status();
  }
  const size_t size = json->size();
  bool wake = false;
  {
    MutexLock lock(s.mu);
    if (s.closing) {
      ++s.counters.dropped;
      return Status::FailedPrecondition("sink is closed");
    }
    if (s.queue.size() >= s.options.max_queue_events ||
        s.queue_bytes + size > s.options.max_queue_bytes) {
      ++s.counters.dropped;
      return Status::ResourceExhausted("queue full");
    }
    // The sender sleeps on an empty queue and on a partial batch's age; it
    // needs a wake-up only when either of those changes.
    wake = s.queue.empty() || s.queue.size() + 1 == s.options.max_batch_events ||
           (s.queue_bytes < s.options.max_batch_bytes &&
            s.queue_bytes + size >= s.options.max_batch_bytes);
    s.queue.push_back(Queued{s.next_seq++, std::move(json).value(), Clock::now()});
    s.queue_bytes += size;
    s.queue_size.store(s.queue.size(), std::memory_order_relaxed);
    ++s.counters.queued;
  }
  if (wake) s.work.notify_one();
  return Status::Ok();
}

Status HttpSink::Flush(milliseconds timeout) noexcept {
  Impl& s = *impl_;
  MutexLock lock(s.mu);
  const uint64_t target = s.next_seq - 1;
  if (s.settled_through >= target) return Status::Ok();
  s.flush_through = std::max(s.flush_through, target);
  s.work.notify_one();
  // A loop, not a predicate: the thread-safety analysis cannot see a
  // lambda run under the lock.
  const Clock::time_point due = Clock::now() + timeout;
  while (s.settled_through < target) {
    if (s.settled.wait_until(lock, due) == std::cv_status::timeout) break;
  }
  if (s.settled_through >= target) return Status::Ok();
  return Status::Unavailable("flush: " + std::to_string(target - s.settled_through) +
                             " events still pending after " + std::to_string(timeout.count()) +
                             " ms");
}

SinkStats HttpSink::stats() const noexcept {
  MutexLock lock(impl_->mu);
  SinkStats out = impl_->counters;
  out.pending = out.queued - out.sent - out.rejected - out.failed;
  return out;
}

Status HttpSink::Close(milliseconds timeout) noexcept {
  Impl& s = *impl_;
  MutexLock close_lock(s.close_mu);
  MutexLock lock(s.mu);
  if (s.joined) return Status::Ok();
  s.closing = true;
  s.work.notify_one();
  const uint64_t target = s.next_seq - 1;
  const uint64_t failed_before = s.counters.failed;
  const Clock::time_point due = Clock::now() + timeout;
  while (s.settled_through < target) {
    if (s.settled.wait_until(lock, due) == std::cv_status::timeout) break;
  }
  const bool drained = s.settled_through >= target;
  if (!drained) {
    s.abandon = true;
    // The sender may be inside a request: the interrupter ends its wait on
    // the socket, the flag its backoff.
    s.interrupter.Interrupt();
    s.work.notify_one();
  }
  lock.unlock();
  if (s.sender.joinable()) s.sender.join();
  lock.lock();
  s.joined = true;
  // What the sender never took out of the queue.
  s.counters.failed += s.queue.size();
  s.queue.clear();
  s.queue_bytes = 0;
  s.queue_size.store(0, std::memory_order_relaxed);
  s.settled_through = target;
  const uint64_t given_up = s.counters.failed - failed_before;
  if (given_up == 0) return Status::Ok();
  std::string why = "close: " + std::to_string(given_up) + " events undelivered";
  if (!drained) why += " at the " + std::to_string(timeout.count()) + " ms deadline";
  s.counters.last_error = why;
  return Status::Unavailable(std::move(why));
}

}  // namespace kvgov::client
