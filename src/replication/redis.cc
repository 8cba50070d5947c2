#include "kvgov/replication/redis.h"

#include <hiredis/hiredis.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <csignal>
#include <cstring>
#include <ctime>
#include <utility>

#include "kvgov/core/secret_file_mode.h"

namespace kvgov::replication {
namespace {

// One reply may hold at most this many bytes (strings plus a fixed cost
// per element), counted while hiredis builds it, so a misbehaving or hostile
// server cannot make us allocate without bound. A full XREAD batch of
// maximal governance entries stays well below it.
constexpr size_t kMaxReplyBytes = size_t{256} << 20;
// Per array; checked before hiredis allocates the element vector.
constexpr int kMaxArrayElements = 1 << 20;
// What one reply object costs besides its string (redisReply plus malloc
// overhead), so a reply of many tiny elements is bounded too.
constexpr size_t kReplyObjectCost = 64;
// hiredis frees its read buffer once it is empty and larger than this, so a
// large XREAD reply does not pin megabytes per connection afterwards.
constexpr size_t kReaderMaxBuf = size_t{64} << 10;
// Redis's error messages are short; a longer one is cut, not carried whole.
constexpr size_t kMaxErrorMessageBytes = 1024;

struct ReplyBudget {
  size_t bytes = 0;
  bool exceeded = false;

  bool Charge(size_t n) {
    if (n > kMaxReplyBytes - bytes) {
      exceeded = true;
      return false;
    }
    bytes += n;
    return true;
  }
};

// The budget of the reply being read on this thread. hiredis's object
// callbacks carry no per-call context we can rely on across versions, and a
// connection is used by one thread at a time, so a thread-local is exact.
thread_local ReplyBudget* t_budget = nullptr;

class BudgetScope {
 public:
  explicit BudgetScope(ReplyBudget* budget) : previous_(t_budget) { t_budget = budget; }
  ~BudgetScope() { t_budget = previous_; }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  ReplyBudget* previous_;
};

// hiredis's own object functions, which the bounded ones below wrap. They
// are one static table inside hiredis, the same for every context.
std::atomic<redisReplyObjectFunctions*> g_default_functions{nullptr};

bool Charge(size_t n) { return t_budget == nullptr || t_budget->Charge(n); }

// Returning NULL makes hiredis fail the read (as out of memory); the budget
// remembers why, so the error says so.
void* BoundedString(const redisReadTask* task, char* str, size_t len) {
  if (!Charge(len > SIZE_MAX - kReplyObjectCost ? SIZE_MAX : len + kReplyObjectCost)) {
    return nullptr;
  }
  return g_default_functions.load()->createString(task, str, len);
}

void* BoundedArray(const redisReadTask* task, int elements) {
  if (elements > kMaxArrayElements) {
    if (t_budget != nullptr) t_budget->exceeded = true;
    return nullptr;
  }
  const size_t count = elements > 0 ? static_cast<size_t>(elements) : 0;
  if (!Charge(kReplyObjectCost + count * sizeof(void*))) return nullptr;
  return g_default_functions.load()->createArray(task, elements);
}

void* BoundedInteger(const redisReadTask* task, long long value) {  // NOLINT(google-runtime-int)
  if (!Charge(kReplyObjectCost)) return nullptr;
  return g_default_functions.load()->createInteger(task, value);
}

void* BoundedNil(const redisReadTask* task) {
  if (!Charge(kReplyObjectCost)) return nullptr;
  return g_default_functions.load()->createNil(task);
}

void FreeObject(void* reply) { freeReplyObject(reply); }

redisReplyObjectFunctions g_bounded_functions = {BoundedString, BoundedArray, BoundedInteger,
                                                 BoundedNil, FreeObject};

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval ToTimeval(std::chrono::milliseconds timeout) {
  // A zero SO_RCVTIMEO means "wait forever": never pass one.
  const int64_t ms = std::max<int64_t>(timeout.count(), 1);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

// hiredis writes with write(2), so a peer that went away raises SIGPIPE,
// whose default action kills the process. The signal is blocked on this
// thread for the write and a SIGPIPE it raised is consumed, without
// touching the process-wide disposition (which is the application's).
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{};
        while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

std::string Truncated(const char* text, size_t len) {
  return std::string(text, std::min(len, kMaxErrorMessageBytes));
}

Result<RedisReply> Convert(const redisReply& raw, int depth) {
  // hiredis 0.14 refuses replies nested deeper than 7; this guards the
  // recursion should that ever change.
  if (depth > 16) return Status::FailedPrecondition("reply nested too deeply");
  RedisReply reply;
  switch (raw.type) {
    case REDIS_REPLY_STRING:
      reply.type = RedisReply::Type::kString;
      reply.text.assign(raw.str, raw.len);
      return reply;
    case REDIS_REPLY_STATUS:
      reply.type = RedisReply::Type::kStatus;
      reply.text.assign(raw.str, raw.len);
      return reply;
    case REDIS_REPLY_INTEGER:
      reply.type = RedisReply::Type::kInteger;
      reply.integer = raw.integer;
      return reply;
    case REDIS_REPLY_NIL:
      return reply;
    case REDIS_REPLY_ERROR:
      return Status::FailedPrecondition(Truncated(raw.str, raw.len));
    case REDIS_REPLY_ARRAY:
      reply.type = RedisReply::Type::kArray;
      reply.elements.reserve(raw.elements);
      for (size_t i = 0; i < raw.elements; ++i) {
        if (raw.element[i] == nullptr)
          return Status::FailedPrecondition("reply holds a null element");
        KVGOV_ASSIGN_OR_RETURN(RedisReply element, Convert(*raw.element[i], depth + 1));
        reply.elements.push_back(std::move(element));
      }
      return reply;
    default:
      return Status::FailedPrecondition("reply of unknown type " + std::to_string(raw.type));
  }
}

bool IsDigits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// URL userinfo is percent-encoded, so a password may hold ':', '@' or '/'.
// The error never shows the password.
Result<std::string> PercentDecode(std::string_view text, std::string_view what) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) {
      return Status::InvalidArgument(std::string(what) + ": '%' not followed by two hex digits");
    }
    const int high = HexValue(text[i + 1]);
    const int low = HexValue(text[i + 2]);
    if (high < 0 || low < 0) {
      return Status::InvalidArgument(std::string(what) + ": '%' not followed by two hex digits");
    }
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

// For messages: at most 64 bytes of the offending text, printable ASCII only.
std::string Quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 64)) {
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  if (text.size() > 64) out += "...";
  out += "'";
  return out;
}

}  // namespace

std::string RedisEndpoint::Describe() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return "redis://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/" +
         std::to_string(db);
}

Result<RedisEndpoint> ParseRedisUrl(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return Status::InvalidArgument("scheme: want redis://[:PASSWORD@]HOST[:PORT][/DB]");
  }
  std::string scheme(url.substr(0, scheme_end));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "redis") {
    return Status::InvalidArgument("scheme: " + Quoted(scheme) +
                                   " is not supported (want redis://; TLS is not available)");
  }
  std::string_view rest = url.substr(kScheme.size());
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return Status::InvalidArgument("url: query and fragment are not supported");
  }

  RedisEndpoint endpoint;
  // The last '@' ends the userinfo: the host and db can hold none, while a
  // password might.
  const size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      // Read as a password, `redis://secret@host` would be a user name to
      // every other client; refusing it avoids the surprise.
      return Status::InvalidArgument(
          "password: want ':PASSWORD@' or 'USER:PASSWORD@' before the host");
    }
    // The user name is ignored: kvgov authenticates with AUTH <password>.
    KVGOV_ASSIGN_OR_RETURN(endpoint.password,
                           PercentDecode(userinfo.substr(colon + 1), "password"));
  }

  const size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  std::string_view db_text = slash == std::string_view::npos ? "" : rest.substr(slash + 1);

  std::string_view port_text;
  if (!hostport.empty() && hostport.front() == '[') {
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) return Status::InvalidArgument("host: '[' without ']'");
    endpoint.host = std::string(hostport.substr(1, close - 1));
    const std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Status::InvalidArgument("host: unexpected text after ']'");
      port_text = after.substr(1);
      if (port_text.empty()) return Status::InvalidArgument("port: empty after ':'");
    }
  } else {
    const size_t colon = hostport.find(':');
    endpoint.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = hostport.substr(colon + 1);
      if (port_text.empty()) return Status::InvalidArgument("port: empty after ':'");
    }
  }
  if (endpoint.host.empty()) return Status::InvalidArgument("host: missing");
  for (char c : endpoint.host) {
    if (c <= 0x20 || c >= 0x7f || c == '/' || c == '@' || c == '[' || c == ']') {
      return Status::InvalidArgument("host: " + Quoted(endpoint.host) +
                                     " holds a character not allowed in a host");
    }
  }

  if (!port_text.empty()) {
    int port = 0;
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (!IsDigits(port_text) || ec != std::errc() || end != port_text.data() + port_text.size() ||
        port < 1 || port > 65535) {
      return Status::InvalidArgument("port: " + Quoted(port_text) + " is not a number in 1..65535");
    }
    endpoint.port = port;
  }

  if (!db_text.empty()) {
    int db = 0;
    const auto [end, ec] = std::from_chars(db_text.data(), db_text.data() + db_text.size(), db);
    if (!IsDigits(db_text) || ec != std::errc() || end != db_text.data() + db_text.size()) {
      return Status::InvalidArgument("db: " + Quoted(db_text) + " is not a non-negative integer");
    }
    endpoint.db = db;
  }
  return endpoint;
}

struct RedisConnection::Context {
  redisContext* c = nullptr;

  Context() = default;
  ~Context() {
    if (c != nullptr) redisFree(c);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
};

RedisConnection::RedisConnection(RedisEndpoint endpoint, std::chrono::milliseconds timeout)
    : endpoint_(std::move(endpoint)), timeout_(timeout) {}

RedisConnection::~RedisConnection() = default;

bool RedisConnection::connected() const { return context_ != nullptr; }

Result<RedisReply> RedisConnection::Command(std::span<const std::string> args) {
  return Run(args, timeout_);
}

Result<RedisReply> RedisConnection::Command(std::initializer_list<std::string_view> args) {
  std::vector<std::string> owned(args.begin(), args.end());
  return Run(owned, timeout_);
}

Result<RedisReply> RedisConnection::BlockingCommand(std::span<const std::string> args,
                                                    std::chrono::milliseconds timeout) {
  return Run(args, timeout);
}

namespace {

// The message of a broken connection: where, in which step, what hiredis
// says, and whether it was our timeout (hiredis reports that as EAGAIN).
Status BrokenConnection(const RedisEndpoint& endpoint, std::string_view step, const redisContext* c,
                        int saved_errno, std::chrono::milliseconds timeout,
                        const ReplyBudget* budget) {
  std::string message = endpoint.Describe() + ": " + std::string(step) + ": ";
  if (budget != nullptr && budget->exceeded) {
    return Status::ResourceExhausted(
        message + "reply over the limit of " + std::to_string(kMaxReplyBytes) + " bytes or " +
        std::to_string(kMaxArrayElements) + " elements per array; connection dropped");
  }
  if (c == nullptr) return Status::Unavailable(message + "connection lost");
  if (c->err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)) {
    message += "timed out after " + std::to_string(timeout.count()) + " ms: ";
  }
  message += c->errstr[0] != '\0' ? std::string(c->errstr) : "connection failed";
  return Status::Unavailable(std::move(message));
}

// One command and its reply on `c`. Sets *broken when the connection must
// be dropped: after any failure but an error reply, the protocol stream is
// in an unknown state.
Result<RedisReply> RoundTrip(redisContext* c, const RedisEndpoint& endpoint,
                             std::span<const std::string> args, std::chrono::milliseconds timeout,
                             std::chrono::milliseconds default_timeout, bool* broken) {
  if (args.size() > static_cast<size_t>(INT_MAX)) {
    return Status::InvalidArgument("redis: too many arguments");
  }
  // Errors name the command (ours, never user data), not its arguments,
  // which may carry a password or large values.
  const std::string& name = args.front();
  const bool plain_name =
      !name.empty() && name.size() <= 16 && std::all_of(name.begin(), name.end(), [](char ch) {
        return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
      });
  const std::string step = plain_name ? name : "command";
  auto fail = [&](int saved_errno, const ReplyBudget* budget) {
    *broken = true;
    return BrokenConnection(endpoint, step, c, saved_errno, timeout, budget);
  };

  const bool own_timeout = timeout != default_timeout;
  if (own_timeout && redisSetTimeout(c, ToTimeval(timeout)) != REDIS_OK)
    return fail(errno, nullptr);

  std::vector<const char*> argv;
  std::vector<size_t> argvlen;
  argv.reserve(args.size());
  argvlen.reserve(args.size());
  for (const std::string& arg : args) {
    argv.push_back(arg.data());
    argvlen.push_back(arg.size());
  }
  if (redisAppendCommandArgv(c, static_cast<int>(args.size()), argv.data(), argvlen.data()) !=
      REDIS_OK) {
    return fail(errno, nullptr);
  }
  {
    SigpipeGuard guard;
    int done = 0;
    do {
      if (redisBufferWrite(c, &done) != REDIS_OK) return fail(errno, nullptr);
    } while (done == 0);
  }

  // redisGetReply's loop, with the unparsed buffer checked after every read:
  // hiredis builds a string only once all of it has arrived, so the object
  // budget alone would not bound one huge bulk string in flight.
  ReplyBudget budget;
  void* raw = nullptr;
  {
    BudgetScope scope(&budget);
    if (redisGetReplyFromReader(c, &raw) != REDIS_OK) return fail(errno, &budget);
    while (raw == nullptr) {
      if (redisBufferRead(c) != REDIS_OK) return fail(errno, &budget);
      if (c->reader->len - c->reader->pos > kMaxReplyBytes) {
        budget.exceeded = true;
        return fail(0, &budget);
      }
      if (redisGetReplyFromReader(c, &raw) != REDIS_OK) return fail(errno, &budget);
    }
  }
  ReplyPtr reply(static_cast<redisReply*>(raw));

  if (own_timeout && redisSetTimeout(c, ToTimeval(default_timeout)) != REDIS_OK) {
    return fail(errno, nullptr);
  }
  return Convert(*reply, 0);
}

// A connection Redis closed while it sat idle (Redis restarted, or timed
// the client out) looks usable until a command on it fails, and that
// command's caller would see the failure though Redis is back. Nothing
// arrives unasked on these connections (no pub/sub), so a socket with
// anything to read, or a hang-up, is one the peer closed: it is dropped
// before a command is sent on it.
bool PeerClosed(const redisContext* c) {
  pollfd socket{.fd = c->fd, .events = POLLIN | POLLRDHUP, .revents = 0};
  return poll(&socket, 1, 0) != 0;  // ready, hung up, or poll failed: not usable
}

}  // namespace

Status RedisConnection::EnsureConnected() {
  if (context_ != nullptr) return Status::Ok();
  auto context = std::make_unique<Context>();
  context->c = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, ToTimeval(timeout_));
  const int connect_errno = errno;
  if (context->c == nullptr) {
    return Status::Unavailable(endpoint_.Describe() + ": connect: cannot allocate a connection");
  }
  if (context->c->err != 0) {
    return BrokenConnection(endpoint_, "connect", context->c, connect_errno, timeout_, nullptr);
  }
  if (redisSetTimeout(context->c, ToTimeval(timeout_)) != REDIS_OK) {
    return BrokenConnection(endpoint_, "connect", context->c, errno, timeout_, nullptr);
  }
  // Best effort: keepalive only shortens how long a dead peer goes unnoticed
  // between commands.
  (void)redisEnableKeepAlive(context->c);
  context->c->reader->maxbuf = kReaderMaxBuf;
  if (context->c->reader->fn != &g_bounded_functions) {
    redisReplyObjectFunctions* expected = nullptr;
    g_default_functions.compare_exchange_strong(expected, context->c->reader->fn);
    context->c->reader->fn = &g_bounded_functions;
  }

  // Connections that failed AUTH or SELECT are not kept: the next call
  // starts over. Redis's messages for these never echo the password.
  if (!endpoint_.password.empty()) {
    const std::string args[] = {"AUTH", endpoint_.password};
    bool broken = false;
    Result<RedisReply> reply = RoundTrip(context->c, endpoint_, args, timeout_, timeout_, &broken);
    if (!reply.ok()) {
      if (broken) return reply.status();
      return reply.status().WithContext(endpoint_.Describe() + ": AUTH refused");
    }
  }
  if (endpoint_.db != 0) {
    const std::string args[] = {"SELECT", std::to_string(endpoint_.db)};
    bool broken = false;
    Result<RedisReply> reply = RoundTrip(context->c, endpoint_, args, timeout_, timeout_, &broken);
    if (!reply.ok()) {
      if (broken) return reply.status();
      return reply.status().WithContext(endpoint_.Describe() + ": SELECT refused");
    }
  }
  context_ = std::move(context);
  return Status::Ok();
}

Result<RedisReply> RedisConnection::Run(std::span<const std::string> args,
                                        std::chrono::milliseconds timeout) {
  if (args.empty()) return Status::InvalidArgument("redis: empty command");
  if (context_ != nullptr && PeerClosed(context_->c)) context_.reset();
  KVGOV_RETURN_IF_ERROR(EnsureConnected());
  bool broken = false;
  Result<RedisReply> reply = RoundTrip(context_->c, endpoint_, args, timeout, timeout_, &broken);
  if (broken) context_.reset();
  return reply;
}

Result<std::string> RedisUrlWithPassword(std::string_view url, std::string_view password) {
  KVGOV_ASSIGN_OR_RETURN(RedisEndpoint endpoint, ParseRedisUrl(url));
  if (!endpoint.password.empty() || url.find('@') != std::string_view::npos) {
    return Status::InvalidArgument(
        "password: the URL carries one and a password file gives another; keep it in one place "
        "(the file: the URL then shows in process listings without it)");
  }
  const size_t host_start = url.find("://") + 3;
  std::string encoded;
  for (const unsigned char c : password) {
    if (std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
      encoded.push_back(static_cast<char>(c));
    } else {
      constexpr char kHex[] = "0123456789ABCDEF";
      encoded += {'%', kHex[c >> 4], kHex[c & 0xF]};
    }
  }
  return std::string(url.substr(0, host_start)) + ":" + encoded + "@" +
         std::string(url.substr(host_start));
}

Result<std::string> ReadRedisPasswordFile(const std::string& path) {
  const std::string what = "redis password file '" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(what + ": " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return Status::IOError(what + ": " + std::strerror(error));
  }
  if (Status private_enough = CheckSecretFileMode(what, info.st_mode, info.st_uid);
      !private_enough.ok()) {
    ::close(fd);
    return private_enough;
  }
  constexpr size_t kMaxBytes = 1024;
  std::string password(kMaxBytes + 1, '\0');
  const ssize_t got = ::read(fd, password.data(), password.size());
  ::close(fd);
  if (got < 0) return Status::IOError(what + ": " + std::strerror(errno));
  if (static_cast<size_t>(got) > kMaxBytes) {
    return Status::InvalidArgument(what + ": longer than 1024 bytes");
  }
  password.resize(static_cast<size_t>(got));
  while (!password.empty() && std::isspace(static_cast<unsigned char>(password.back())) != 0) {
    password.pop_back();
  }
  if (password.empty()) return Status::InvalidArgument(what + ": empty");
  return password;
}

}  // namespace kvgov::replication
