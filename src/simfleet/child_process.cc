#include "kvgov/simfleet/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <utility>

extern char** environ;

namespace kvgov::simfleet {

Result<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& args,
                                         const std::string& log) {
  if (args.empty()) return Status::InvalidArgument("child process: no program");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int error = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) return Status::IOError("cannot start " + args[0] + ": " + std::strerror(error));
  return ChildProcess(pid);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), exit_code_(other.exit_code_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    Kill();
    pid_ = std::exchange(other.pid_, -1);
    exit_code_ = other.exit_code_;
  }
  return *this;
}

ChildProcess::~ChildProcess() { Kill(); }

void ChildProcess::Reaped(int wait_status) {
  pid_ = -1;
  exit_code_ = WIFEXITED(wait_status)     ? WEXITSTATUS(wait_status)
               : WIFSIGNALED(wait_status) ? -WTERMSIG(wait_status)
                                          : -1;
}

bool ChildProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
  Reaped(status);
  return false;
}

int ChildProcess::Terminate(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return exit_code_;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!Running()) return exit_code_;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
  return exit_code_;
}

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  Reaped(status);
}

int ChildProcess::Wait() {
  if (pid_ <= 0) return exit_code_;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  Reaped(status);
  return exit_code_;
}

}  // namespace kvgov::simfleet
