// cache_admin.hpp — listing, verifying and pruning a cubin cache directory (cache/cubin_cache.hpp),
// safe while other processes use it.
//
// Files of a cache directory: entries "<readable name>.<32 hex digits of the key>.cubin", their
// lock files "<entry>.lock" (flock(2): held while a process compiles and publishes the entry),
// and temporary files "<entry>.tmp.<pid>.<16 hex digits>" of writes in flight. Everything that
// removes a file here takes the entry's lock without waiting (LOCK_NB) and skips an entry whose
// lock is held (a process is building it); an open entry stays readable after its name is
// removed (POSIX), so a reader never loses an entry it is reading. At worst a process that
// found an entry gone compiles it again.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nsajit {

struct CacheEntryInfo {
  std::string path;
  std::string name;           // readable name, e.g. "sparse_mla_decode.h16.topk2048.kv_bf16.sm_90a"
  std::string key_prefix;     // the 32 hex digits of the key in the file name
  std::uint64_t bytes = 0;    // file size (header + cubin)
  std::int64_t last_used = 0; // seconds since the epoch: max(atime, mtime)
  std::int64_t last_used_ns = 0;  // the same in nanoseconds (saturated past 2262): the eviction order
};

struct CacheScan {
  std::string dir;
  bool exists = false;
  std::vector<CacheEntryInfo> entries;  // by name
  std::vector<std::string> lock_files;
  std::vector<std::string> temp_files;
  std::vector<std::string> other_files;  // anything else (left alone)
  std::uint64_t entry_bytes = 0;
  std::uint64_t total_bytes = 0;          // entries, locks, temporaries and other files
};

// Lists a cache directory without reading the entries. A missing directory is an empty cache.
CacheScan scan_cache(const std::string& dir);

struct EntryCheck {
  std::string problem;  // "" = intact; else why not (e.g. "cubin checksum mismatch")
  std::string nsajit_version, nvrtc_version, arch;  // from the entry's key record (intact entries)
  bool current = false;  // made by this nsajit and NVRTC version (other entries are never hit)
};

// Reads and checks one entry: the format, the cubin's checksum, and that the key record hashes
// to the key in the file name.
EntryCheck check_entry(const CacheEntryInfo& entry);

struct VerifyResult {
  std::vector<std::pair<std::string, std::string>> corrupt;  // path, problem
  std::vector<std::string> removed;  // corrupt entries removed (fix)
  std::vector<std::string> in_use;   // corrupt entries not removed: a process holds their lock
  std::vector<std::pair<std::string, std::string>> bad_lock;  // not removed: their lock file cannot be used (why)
  int checked = 0;
  int stale = 0;  // intact entries of another nsajit or NVRTC version
};

// Checks every entry; with fix, removes the corrupt ones (under their lock, only if the name
// still holds the file that was checked). With fix, a directory the cache would not trust
// (cache_dir_distrust_reason) is refused: InvalidArgument naming it and the reason.
VerifyResult verify_cache(const std::string& dir, bool fix);

struct PruneOptions {
  std::uint64_t max_bytes = 0;       // > 0: evict least recently used entries until entries fit
  double older_than_days = -1;       // >= 0: evict entries not used for this many days
  bool stale = false;                // evict entries of another nsajit or NVRTC version
  bool everything = false;           // evict every entry (`nsajit cache clear`)
  std::string keep;                  // an entry path never evicted (the one just written)
};

struct PruneResult {
  std::vector<std::string> removed_entries;
  std::uint64_t removed_bytes = 0;
  int removed_locks = 0;  // orphan lock files (no entry, not held, older than a minute)
  int removed_temps = 0;  // temporary files older than ten minutes (their writer died)
  std::vector<std::string> in_use;  // entries to evict whose lock is held
  std::vector<std::pair<std::string, std::string>> bad_lock;  // entries to evict whose lock file cannot be used (why)
  std::uint64_t entry_bytes_after = 0;
};

// Evicts entries as the options say, least recently used first, then orphan lock and temporary
// files. A directory the cache would not trust (cache_dir_distrust_reason) is refused:
// InvalidArgument naming it and the reason, nothing removed.
PruneResult prune_cache(const std::string& dir, const PruneOptions& options);

// "1048576", "512M", "2G": a byte count with an optional K, M, G or T suffix (powers of 1024).
// Throws InvalidArgument naming `what` (e.g. "--max-size") and the text otherwise.
std::uint64_t parse_byte_count(const std::string& text, const std::string& what);

// NSAJIT_CACHE_MAX_BYTES: a byte count, optionally with a K, M, G or T suffix (powers of 1024);
// 0 or unset = no bound. Throws InvalidArgument naming the variable for anything else.
std::uint64_t cache_max_bytes_from_env();

// Records a use of an entry for LRU eviction: sets its access time to now (mounts with noatime
// or relatime would not). Silently does nothing where the file cannot be changed (read-only).
void note_cache_entry_used(const std::string& path);

// After a write: evicts least recently used entries (never `just_written`) until the entries
// fit max_bytes. Never throws (a failure is reported on stderr).
void enforce_cache_size_bound(const std::string& dir, std::uint64_t max_bytes, const std::string& just_written = "");

}  // namespace nsajit
