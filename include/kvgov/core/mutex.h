#pragma once

// Locks that Clang's thread-safety analysis (-Wthread-safety) can follow:
// libstdc++'s mutexes carry no annotations. A member read or written under
// a lock says so with KVGOV_GUARDED_BY(mu_), a function that expects a lock
// held with KVGOV_REQUIRES(mu_), and the analysis proves every access.
// tests/thread_safety_check.sh compiles the modules annotated so far with
// clang and the analysis as errors (docs/adr/0041). Under GCC the
// annotations are empty and these are std::mutex and std::shared_mutex.
//
// Thread-safety: these are the locks; a lock object belongs to one thread.

#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define KVGOV_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVGOV_THREAD_ANNOTATION(x)
#endif

#define KVGOV_CAPABILITY(name) KVGOV_THREAD_ANNOTATION(capability(name))
#define KVGOV_SCOPED_CAPABILITY KVGOV_THREAD_ANNOTATION(scoped_lockable)
#define KVGOV_GUARDED_BY(mu) KVGOV_THREAD_ANNOTATION(guarded_by(mu))
#define KVGOV_PT_GUARDED_BY(mu) KVGOV_THREAD_ANNOTATION(pt_guarded_by(mu))
#define KVGOV_REQUIRES(...) KVGOV_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define KVGOV_REQUIRES_SHARED(...) \
  KVGOV_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define KVGOV_ACQUIRE(...) KVGOV_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define KVGOV_ACQUIRE_SHARED(...) KVGOV_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define KVGOV_RELEASE(...) KVGOV_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define KVGOV_RELEASE_SHARED(...) KVGOV_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define KVGOV_TRY_ACQUIRE(...) KVGOV_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define KVGOV_EXCLUDES(...) KVGOV_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

namespace kvgov {

/// std::mutex, as a capability.
class KVGOV_CAPABILITY("mutex") Mutex {
 public:
  void lock() KVGOV_ACQUIRE() { mu_.lock(); }
  void unlock() KVGOV_RELEASE() { mu_.unlock(); }
  bool try_lock() KVGOV_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

/// std::shared_mutex, as a capability that readers share.
class KVGOV_CAPABILITY("shared mutex") SharedMutex {
 public:
  void lock() KVGOV_ACQUIRE() { mu_.lock(); }
  void unlock() KVGOV_RELEASE() { mu_.unlock(); }
  void lock_shared() KVGOV_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() KVGOV_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

/// Holds a Mutex for its scope. unlock() and lock() let work run between
/// (and std::condition_variable_any wait on it); the destructor releases it
/// only if held.
class KVGOV_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) KVGOV_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() KVGOV_RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() KVGOV_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  void unlock() KVGOV_RELEASE() {
    mu_.unlock();
    held_ = false;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

/// Holds a SharedMutex shared (a reader) for its scope.
class KVGOV_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) KVGOV_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() KVGOV_RELEASE() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

/// Holds a SharedMutex exclusively (a writer) for its scope.
class KVGOV_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) KVGOV_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() KVGOV_RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace kvgov
