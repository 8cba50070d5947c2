#include "e2e/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace kvgov::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr auto kReadyTimeout = std::chrono::seconds(20);
constexpr auto kStopGrace = std::chrono::seconds(10);
constexpr auto kPollInterval = milliseconds(10);

// fork + exec with stdout/stderr sent to `output_path`.
pid_t Spawn(const std::vector<std::string>& args, const std::filesystem::path& output_path) {
  std::vector<char*> argv;
  std::string binary = KVGOV_BINARY;
  argv.push_back(binary.data());
  std::vector<std::string> copies = args;
  for (std::string& arg : copies) argv.push_back(arg.data());
  argv.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

DaemonProcess::DaemonProcess() {
  static int counter = 0;
  dir_ = std::filesystem::temp_directory_path() /
         ("kvgov_e2e_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
}

DaemonProcess::~DaemonProcess() {
  Stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string DaemonProcess::Stderr() const { return ReadFile(dir_ / "output.log"); }

Status DaemonProcess::Start(const std::vector<std::string>& extra_args,
                            const std::string& listen) {
  const std::filesystem::path ready = dir_ / "ready";
  std::filesystem::remove(ready);
  std::vector<std::string> args = {"serve",       "--listen",           listen,
                                   "--data-dir",  (dir_ / "data").string(),
                                   "--ready-file", ready.string()};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_ = Spawn(args, dir_ / "output.log");
  if (pid_ < 0) return Status::Unavailable("fork failed");

  const auto deadline = steady_clock::now() + kReadyTimeout;
  while (steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable("kvgov exited with " + std::to_string(DecodeWaitStatus(status)) +
                                 " before it was ready: " + Stderr());
    }
    std::ifstream in(ready);
    int port = 0;
    if (in >> port && port > 0) {
      port_ = static_cast<uint16_t>(port);
      return Status::Ok();
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  return Status::Unavailable("kvgov did not become ready in time: " + Stderr());
}

void DaemonProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

int DaemonProcess::Stop() {
  if (pid_ <= 0) return 0;
  ::kill(pid_, SIGTERM);
  const auto deadline = steady_clock::now() + kStopGrace;
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (steady_clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  pid_ = -1;
  return DecodeWaitStatus(status);
}

int DaemonProcess::RunToExit(const std::vector<std::string>& args, std::string* output) {
  DaemonProcess scratch;  // for its directory only
  const std::filesystem::path log = scratch.dir_ / "output.log";
  pid_t pid = Spawn(args, log);
  int status = 0;
  ::waitpid(pid, &status, 0);
  *output = ReadFile(log);
  return DecodeWaitStatus(status);
}

}  // namespace kvgov::testing
