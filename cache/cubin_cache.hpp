// cubin_cache.hpp — compiled kernels on disk, safe across threads and processes.
//
// Key: SHA-256 of a canonical record (key-schema version, nsajit version, NVRTC version, arch
// with suffix, NVRTC options, SHA-256 and length of the generated source). An entry is one file
//   <dir>/<readable name>.<first 32 hex digits of the key>.cubin
// holding a header (magic, format version, the key record, cubin size, SHA-256 of the cubin) and
// the cubin. Entries are published by writing a temporary file in the same directory, fsync, then
// rename(2), so a reader sees a whole entry or none. On load the record, size and checksum are
// verified; a corrupt or truncated entry is reported on stderr, removed and rebuilt. A per-entry
// flock(2) makes concurrent processes compile a key once (the kernel drops it if one dies); when
// the directory cannot be written, the cache degrades to compiling without storing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nsajit/spec.hpp"

namespace nsajit {

inline constexpr int kCacheKeySchema = 1;

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

// The parts of an entry file (views into the bytes given to parse_entry).
struct EntryContents {
  std::string_view record;  // the key record it was stored under
  std::string_view cubin;
};

// Checks the bytes of an entry file: magic, format, record, sizes and the cubin's checksum.
// Returns nullptr (and fills `out`) for an intact entry, else why it is not (e.g. "cubin checksum
// mismatch"). Does not check which key the record is for; the caller compares it.
const char* parse_entry(std::string_view file, EntryContents& out);

// Reads a whole entry file (a regular file) as the cache's loads do; dev and ino identify the file
// read (to remove it later only if the name still holds it). False if it cannot be read.
bool read_entry_file(const std::string& path, std::string& out, std::uint64_t& dev, std::uint64_t& ino);

struct CacheLookup {
  std::vector<char> cubin;
  bool hit = false;     // false: `build` ran
  bool stored = false;  // after a build: the entry was published (false: directory not writable)
  double build_ms = 0;
};

class CubinCache {
 public:
  explicit CubinCache(std::string dir);

  const std::string& dir() const { return dir_; }
  std::string entry_path(const std::string& name, const CacheKey& key) const;

  // Reads and verifies an entry. A missing entry gives nullopt; a corrupt one is reported,
  // removed, and gives nullopt.
  std::optional<std::vector<char>> load(const std::string& name, const CacheKey& key) const;

  // Publishes an entry atomically. Returns false (after a warning) if it could not be written.
  bool store(const std::string& name, const CacheKey& key, const std::vector<char>& cubin) const;

  // Load, else (under the entry's lock, re-checking first) build and store.
  CacheLookup get_or_build(const std::string& name, const CacheKey& key,
                           const std::function<std::vector<char>()>& build) const;

 private:
  // load(); lock_held: the caller holds the entry's lock (flock would block on a second one).
  std::optional<std::vector<char>> load_entry(const std::string& name, const CacheKey& key, bool lock_held) const;

  std::string dir_;
};

}  // namespace nsajit
