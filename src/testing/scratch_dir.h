#pragma once

// Test and benchmark support, never linked into kvgov: a directory of its
// own for one test or benchmark, removed with everything in it when it
// ends, unless KVGOV_KEEP_SCRATCH=1 (to look at a data dir and the daemons'
// logs afterwards, or to start kvgov on them again by hand).

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace kvgov::test_support {

/// Thread-compatible: made and removed by one thread; its path may be read
/// from any.
class ScratchDir {
 public:
  /// $TMPDIR/<name>_<pid>, emptied if it exists: two processes running the
  /// same test at once (ctest -j) never share one.
  explicit ScratchDir(std::string_view name)
      : path_(std::filesystem::temp_directory_path() /
              (std::string(name) + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    if (const char* keep = std::getenv("KVGOV_KEEP_SCRATCH"); keep != nullptr && *keep == '1') {
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string string() const { return path_.string(); }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvgov::test_support
