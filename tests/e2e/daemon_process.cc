#include "e2e/daemon_process.h"

#include <atomic>
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

// `kvgov ARGS...`, stdout and stderr to `output_path`.
Result<simfleet::ChildProcess> SpawnKvgov(std::vector<std::string> args,
                                          const std::filesystem::path& output_path) {
  args.insert(args.begin(), KVGOV_BINARY);
  return simfleet::ChildProcess::Spawn(args, output_path.string());
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// One scratch directory per daemon: a test may run several.
std::string NextScratchName() {
  static std::atomic<int> counter = 0;
  return "kvgov_e2e_" + std::to_string(counter++);
}

}  // namespace

DaemonProcess::DaemonProcess() : scratch_(NextScratchName()) {}

// Stopped before its scratch directory (a member) is removed.
DaemonProcess::~DaemonProcess() { Stop(); }

std::string DaemonProcess::Stderr() const { return ReadFile(scratch_ / "output.log"); }

Status DaemonProcess::Start(const std::vector<std::string>& extra_args, const std::string& listen) {
  const std::filesystem::path ready = scratch_ / "ready";
  std::filesystem::remove(ready);
  std::vector<std::string> args = {
      "serve",        "--listen",    listen, "--data-dir", (scratch_ / "data").string(),
      "--ready-file", ready.string()};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  KVGOV_ASSIGN_OR_RETURN(child_, SpawnKvgov(args, scratch_ / "output.log"));

  const auto deadline = steady_clock::now() + kReadyTimeout;
  while (steady_clock::now() < deadline) {
    if (!child_.Running()) {
      return Status::Unavailable("kvgov exited with " + std::to_string(child_.exit_code()) +
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

void DaemonProcess::Kill() { child_.Kill(); }

int DaemonProcess::Stop() {
  if (child_.pid() <= 0) return 0;
  return child_.Terminate(kStopGrace);
}

int DaemonProcess::RunToExit(const std::vector<std::string>& args, std::string* output) {
  const test_support::ScratchDir scratch(NextScratchName());
  const std::filesystem::path log = scratch / "output.log";
  Result<simfleet::ChildProcess> child = SpawnKvgov(args, log);
  if (!child.ok()) {
    *output = child.status().ToString();
    return -1;
  }
  const int code = child->Wait();
  *output = ReadFile(log);
  return code;
}

}  // namespace kvgov::testing
