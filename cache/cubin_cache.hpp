// cubin_cache.hpp — compiled kernels on disk, safe across threads and processes.
//
// Key: SHA-256 of a canonical record (key-schema version, nsajit version, NVRTC version, arch
// with suffix, NVRTC options, SHA-256 and length of the generated source). An entry is one file
//   <dir>/<readable name>.<first 32 hex digits of the key>.cubin
// holding a header (magic, format version, the key record, cubin size, SHA-256 of the cubin) and
// the cubin. Entries are published by writing a temporary file "<entry>.tmp.<pid>.<16 hex>" in the
// same directory, fsync, then rename(2), so a reader sees a whole entry or none; temporary files
// of dead processes older than an hour are swept when the directory is next written.
//
// Trust: the directory is used only if it is owned by the current user or root and neither group
// nor others can write it (directories nsajit creates are 0700). Otherwise one warning names the
// path and the reason and the cache is memory-only from then on: nothing is read or written there.
//
// Entries are read by read_cache_entry(): regular files only (opened O_NONBLOCK, fstat first),
// sizes checked from the header and fstat before anything large is read, record and checksum
// verified. A bad entry is reported on stderr, removed and rebuilt. A per-entry flock(2) makes
// concurrent processes compile a key once (the kernel drops it if one dies); a waiter names the
// entry after 5 s and, after $NSAJIT_CACHE_LOCK_TIMEOUT seconds (default 120), compiles without
// the lock. When the directory cannot be written, the cache degrades to compiling without storing.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nsajit/spec.hpp"

namespace nsajit {

inline constexpr int kCacheKeySchema = 1;

// A cubin larger than this is not one nsajit wrote: its entry is corrupt.
inline constexpr std::uint64_t kMaxCubinBytes = std::uint64_t(64) << 20;

struct CacheKeyFields {
  std::string nsajit_version;
  std::string nvrtc_version;
  std::string arch;                  // with suffix, e.g. "sm_90a"
  std::vector<std::string> options;  // NVRTC options, in order
  std::string source;                // the generated source
  int schema = kCacheKeySchema;
};

struct CacheKey {
  std::string record;  // canonical text of every field (stored in the entry, checked on load)
  std::string digest;  // 64 hex digits: SHA-256 of record
};

CacheKey make_cache_key(const CacheKeyFields& fields);

// The cache directory from the environment (see nsajit/jit.hpp cache_dir()).
std::string default_cache_dir();

// Why a directory may not be used as a cache: "" when it may (owned by the current user or root,
// not writable by group or others, a directory), else the reason, e.g. "owned by uid 65534, not
// by this user (uid 0) or root". A missing directory gives "" (nothing to trust or distrust yet).
std::string cache_dir_distrust_reason(const std::string& dir);
// What mends a path cache_dir_distrust_reason refused for `why`: "name a directory" or "fix its
// owner or mode".
std::string cache_dir_remedy(const std::string& why);

// One entry file as read by read_cache_entry().
struct CacheEntry {
  enum class Status { ok, missing, corrupt };
  Status status = Status::missing;
  std::string problem;      // corrupt: why, e.g. "not a regular file (a FIFO)"
  std::string record;       // ok: the key record stored in the entry
  std::vector<char> cubin;  // ok: the verified cubin
  std::uint64_t file_bytes = 0;
  dev_t device = 0;  // identity of the file read (remove_cache_entry_if_unchanged)
  ino_t inode = 0;
};

// Reads and verifies one entry file without trusting it: opens it with O_NOFOLLOW | O_NONBLOCK,
// accepts only a regular file owned by the current user or root (fstat before any read), checks
// the header's record and cubin sizes against fstat (a cubin over kMaxCubinBytes is corrupt)
// before reading the cubin, then the SHA-256 of the cubin and, when expected_record is given, that
// the stored key record equals it. A missing file gives Status::missing. Never throws, never
// blocks, never removes anything; memory use is bounded by kMaxCubinBytes.
CacheEntry read_cache_entry(const std::string& path, const std::string* expected_record = nullptr);

// Removes `path` only if it is still the file `entry` was read from (another process may have
// published a good entry under the name since). Returns true if it was removed.
bool remove_cache_entry_if_unchanged(const std::string& path, const CacheEntry& entry);

// Opens the lock file "<entry>.lock" of an entry for flock(2), creating it (mode 0644) if
// missing: never through a symbolic link (O_NOFOLLOW) nor waiting on a FIFO (O_NONBLOCK), and
// only a regular file owned by the current user is kept. Returns the descriptor (the caller closes
// it), or -1 with why in *why (e.g. "it is a symbolic link", "cannot open it: Permission denied").
int open_entry_lock_file(const std::string& lock_path, std::string* why = nullptr);

struct CacheLookup {
  std::vector<char> cubin;
  bool hit = false;     // false: `build` ran
  bool stored = false;  // after a build: the entry was published (false: directory not writable or not trusted)
};

class CubinCache {
 public:
  explicit CubinCache(std::string dir);

  const std::string& dir() const { return dir_; }
  std::string entry_path(const std::string& name, const CacheKey& key) const;

  // False once the directory was found untrusted (see above): memory-only for this object's life.
  bool trusted() const { return !untrusted_.load(); }

  // Reads and verifies an entry. A missing entry gives nullopt; a corrupt one is reported,
  // removed (under the entry's lock), and gives nullopt. `before_wait`, when set, runs before
  // waiting for a lock another process holds, and may throw to refuse the wait.
  std::optional<std::vector<char>> load(const std::string& name, const CacheKey& key,
                                        const std::function<void()>& before_wait = {}) const;

  // Publishes an entry atomically. Returns false (after a warning) if it could not be written, or
  // if the cubin is larger than kMaxCubinBytes (a reader would take the entry for a corrupt one).
  bool store(const std::string& name, const CacheKey& key, const std::vector<char>& cubin) const;

  // Load, else (under the entry's lock, re-checking first) build and store. `before_wait` as for
  // load(): it runs before any wait for another process's lock (not when the lock is free).
  CacheLookup get_or_build(const std::string& name, const CacheKey& key,
                           const std::function<std::vector<char>()>& build,
                           const std::function<void()>& before_wait = {}) const;

 private:
  // load(); lock_held: the caller holds the entry's lock (flock would block on a second one).
  std::optional<std::vector<char>> load_entry(const std::string& name, const CacheKey& key, bool lock_held,
                                              const std::function<void()>& before_wait) const;
  // Checks the directory (creating it 0700 when `create`; why that failed in *create_errno); false
  // when it is missing or untrusted.
  bool usable(bool create, int* create_errno = nullptr) const;
  void sweep_stale_temps() const;

  std::string dir_;
  mutable std::atomic<bool> untrusted_{false};
  mutable std::atomic<bool> create_warned_{false};  // a directory that cannot be made is reported once
  mutable std::once_flag swept_;
};

}  // namespace nsajit
