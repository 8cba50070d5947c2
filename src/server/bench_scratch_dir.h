#pragma once

// Benchmark support, never linked into kvgov: the scratch directory a
// server benchmark runs kvgov in, removed with everything in it when the
// benchmark ends, unless KVGOV_BENCH_KEEP_DIR=1 (to look at the data dir and
// the daemons' logs afterwards, or to start kvgov on them again by hand).

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace kvgov::bench {

class ScratchDir {
 public:
  /// $TMPDIR/<name>_<pid>, emptied if it exists.
  explicit ScratchDir(std::string_view name)
      : path_(std::filesystem::temp_directory_path() /
              (std::string(name) + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    if (const char* keep = std::getenv("KVGOV_BENCH_KEEP_DIR"); keep != nullptr && *keep == '1') {
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvgov::bench
