#include "testing/redis_server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "kvgov/replication/redis.h"

namespace kvgov::test_support {
namespace {

using replication::RedisConnection;
using replication::RedisEndpoint;
using replication::RedisReply;

using Clock = std::chrono::steady_clock;

constexpr char kServerPath[] = "/usr/bin/redis-server";
constexpr auto kReadyTimeout = std::chrono::seconds(10);
constexpr int kStopGraceMs = 5000;
constexpr int kStartAttempts = 5;

Status Errno(std::string_view what) {
  return Status::Unavailable(std::string(what) + ": " + std::strerror(errno));
}

// The kernel picks a free port for a socket bound to port 0; closing it
// frees the port for redis-server. Another process may take it in between,
// which Start() handles by trying again.
Result<int> PickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Status status = Errno("bind 127.0.0.1:0");
    ::close(fd);
    return status;
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

// Waits for `pid` to exit for up to `grace_ms`; true when it has been reaped.
bool WaitFor(pid_t pid, int grace_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(grace_ms);
  while (true) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno == ECHILD)) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

RedisServerProcess::~RedisServerProcess() {
  Stop();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string RedisServerProcess::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

Status RedisServerProcess::EnsureDirectory() {
  if (!dir_.empty()) return Status::Ok();
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kvgov-redis-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return Errno("mkdtemp " + pattern);
  dir_ = pattern;
  return Status::Ok();
}

std::string RedisServerProcess::LogTail() const {
  std::ifstream log(dir_ + "/redis.log", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  return text.size() > 2048 ? text.substr(text.size() - 2048) : text;
}

Status RedisServerProcess::Start() {
  if (running()) return Status::FailedPrecondition("redis-server is already running");
  KVGOV_RETURN_IF_ERROR(EnsureDirectory());
  Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    KVGOV_ASSIGN_OR_RETURN(port_, PickFreePort());
    bool exited_early = false;
    last = Launch(&exited_early);
    if (last.ok() || !exited_early) return last;
  }
  return last;
}

Status RedisServerProcess::Restart() {
  if (running()) Stop();
  if (port_ == 0) return Start();
  Status last;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    bool exited_early = false;
    last = Launch(&exited_early);
    if (last.ok() || !exited_early) return last;
    // The old server's socket may linger for a moment; the port is ours to
    // wait for, since clients hold the URL.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last;
}

Status RedisServerProcess::Launch(bool* exited_early) {
  *exited_early = false;
  const std::string log_path = dir_ + "/redis.log";
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Errno("open " + log_path);

  // Everything the child needs is built before fork(): after it, only
  // async-signal-safe calls are allowed.
  std::vector<std::string> args = {kServerPath,
                                   "--port",
                                   std::to_string(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   append_only_ ? "yes" : "no",
                                   "--appendfsync",
                                   "always",
                                   "--daemonize",
                                   "no",
                                   "--dir",
                                   dir_};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    Status status = Errno("fork");
    ::close(log_fd);
    return status;
  }
  if (pid == 0) {
    // A crashed test must not leave a server behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::close_range(3, ~0U, 0);
    ::execv(kServerPath, argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  pid_ = pid;

  // Ready means it answers, it is this process answering (INFO's
  // process_id tells it from a server that won the race for the port), and
  // it has loaded its append-only file: until then it answers every write
  // with LOADING, which a test taking "restarted" to mean "back" would
  // trip on when the machine is slow.
  RedisEndpoint endpoint;
  endpoint.host = "127.0.0.1";
  endpoint.port = port_;
  const std::string own_pid = "process_id:" + std::to_string(pid) + "\r\n";
  const auto deadline = Clock::now() + kReadyTimeout;
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pid_ = -1;
      *exited_early = true;
      return Status::Unavailable("redis-server on port " + std::to_string(port_) +
                                 " exited before it was ready; its log ends:\n" + LogTail());
    }
    RedisConnection connection(endpoint, std::chrono::milliseconds(200));
    Result<RedisReply> info = connection.Command({"INFO"});  // server, persistence, ...
    if (info.ok() && info->type == RedisReply::Type::kString &&
        info->text.find(own_pid) != std::string::npos &&
        info->text.find("loading:0\r\n") != std::string::npos) {
      return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Kill();
  return Status::Unavailable("redis-server on port " + std::to_string(port_) +
                             " was not ready (answering, its file loaded) within 10 s; its log "
                             "ends:\n" +
                             LogTail());
}

void RedisServerProcess::Signal(int signal, int grace_ms) {
  if (!running()) return;
  ::kill(pid_, signal);
  if (!WaitFor(pid_, grace_ms)) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

void RedisServerProcess::Stop() { Signal(SIGTERM, kStopGraceMs); }

void RedisServerProcess::Kill() { Signal(SIGKILL, kStopGraceMs); }

}  // namespace kvgov::test_support
