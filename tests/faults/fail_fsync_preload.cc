// LD_PRELOAD shim for the fault matrix's fsync row (fsync_error_test.py):
// while the file named by KVGOV_FAIL_FSYNC_WHEN exists, fsync and fdatasync
// fail with EIO without syncing, as a disk that lost a write reports it.
// Everything else, and every call while the file is absent, goes to libc.
//
// A real failing disk (dm-flakey, a yanked device) needs privileges and
// devices these machines do not have; the shim fails the same calls the
// kernel would, in the real process.

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace {

using SyncFn = int (*)(int);

bool FailNow() {
  const char* trigger = std::getenv("KVGOV_FAIL_FSYNC_WHEN");
  return trigger != nullptr && *trigger != '\0' && ::access(trigger, F_OK) == 0;
}

int Forward(const char* name, int fd) {
  // dlsym is thread-safe; the lookup is cheap next to a sync.
  auto real = reinterpret_cast<SyncFn>(::dlsym(RTLD_NEXT, name));
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return real(fd);
}

}  // namespace

extern "C" int fsync(int fd) {
  if (FailNow()) {
    errno = EIO;
    return -1;
  }
  return Forward("fsync", fd);
}

extern "C" int fdatasync(int fd) {
  if (FailNow()) {
    errno = EIO;
    return -1;
  }
  return Forward("fdatasync", fd);
}
