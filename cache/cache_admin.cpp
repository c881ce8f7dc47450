// cache_admin.cpp — listing, verifying and pruning a cubin cache directory.
#include "cache/cache_admin.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <limits>
#include <optional>
#include <tuple>

#include "cache/cubin_cache.hpp"
#include "cache/sha256.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"

namespace nsajit {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kOrphanLockSeconds = 60;   // a lock file is created just before its flock
constexpr std::int64_t kOrphanTempSeconds = 600;  // a write takes milliseconds; ten minutes = dead writer

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "<name>.<32 hex>.cubin" -> name and key prefix; false for anything else.
bool split_entry_name(const std::string& file, std::string& name, std::string& key) {
  constexpr std::string_view suffix = ".cubin";
  if (!file.ends_with(suffix)) return false;
  const std::string stem = file.substr(0, file.size() - suffix.size());
  const std::size_t dot = stem.rfind('.');
  if (dot == std::string::npos || dot == 0 || stem.size() - dot - 1 != 32 || !is_hex(stem.substr(dot + 1)))
    return false;
  name = stem.substr(0, dot);
  key = stem.substr(dot + 1);
  return true;
}

// The value of "<field>=" in a key record (one field per line), "" if absent.
std::string record_field(std::string_view record, std::string_view field) {
  std::size_t pos = 0;
  while (pos < record.size()) {
    std::size_t end = record.find('\n', pos);
    if (end == std::string_view::npos) end = record.size();
    const std::string_view line = record.substr(pos, end - pos);
    if (line.size() > field.size() && line.starts_with(field) && line[field.size()] == '=')
      return std::string(line.substr(field.size() + 1));
    pos = end + 1;
  }
  return "";
}

std::int64_t now_seconds() { return std::int64_t(std::time(nullptr)); }

// A non-blocking exclusive flock on "<entry>.lock" (created if missing; open_entry_lock_file).
// held() is false when another process holds it (it is building the entry) or, with problem()
// saying why, when the lock file cannot be used.
class TryLock {
 public:
  explicit TryLock(const std::string& lock_path) {
    fd_ = open_entry_lock_file(lock_path, &problem_);
    if (fd_ < 0) return;
    int r;
    while ((r = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
    }
    held_ = r == 0;
  }
  ~TryLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  TryLock(const TryLock&) = delete;
  TryLock& operator=(const TryLock&) = delete;
  bool held() const { return held_; }
  const std::string& problem() const { return problem_; }

 private:
  int fd_ = -1;
  bool held_ = false;
  std::string problem_;
};

// Entries are removed only where the cache itself would read and write (a directory another
// user can write may hold planted lock files and links).
void refuse_untrusted(const std::string& dir) {
  if (const std::string why = cache_dir_distrust_reason(dir); !why.empty())
    throw InvalidArgument(fmt::format("not removing anything from the cache directory {}: {}; nsajit does not use "
                                      "such a path ({})",
                                      dir, why, cache_dir_remedy(why)));
}

struct FileStat {
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint64_t size = 0;
  std::int64_t atime = 0, mtime = 0;        // seconds since the epoch
  std::int64_t atime_ns = 0, mtime_ns = 0;  // nanoseconds, saturated outside 1678..2262
};

std::int64_t nanoseconds(const timespec& t) {
  constexpr std::int64_t kLimit = std::numeric_limits<std::int64_t>::max() / 1000000000 - 1;
  if (t.tv_sec > kLimit) return std::numeric_limits<std::int64_t>::max();
  if (t.tv_sec < -kLimit) return std::numeric_limits<std::int64_t>::min();
  return std::int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

std::optional<FileStat> stat_file(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileStat{st.st_dev,           st.st_ino,           std::uint64_t(st.st_size), std::int64_t(st.st_atime),
                  std::int64_t(st.st_mtime), nanoseconds(st.st_atim), nanoseconds(st.st_mtim)};
}

// Removes `path` if it still is the file `expected` describes (another process may have
// published a new entry under the name since it was looked at).
bool unlink_if_same(const std::string& path, const FileStat& expected) {
  const std::optional<FileStat> now = stat_file(path);
  if (!now || now->dev != expected.dev || now->ino != expected.ino) return false;
  return ::unlink(path.c_str()) == 0;
}

// Checks a read entry: intact (read_cache_entry verified the format and checksum) and its key
// record hashes to the key in the file name.
EntryCheck check_read(const CacheEntryInfo& entry, const CacheEntry& read) {
  EntryCheck c;
  if (read.status != CacheEntry::Status::ok) {
    c.problem = read.status == CacheEntry::Status::missing ? "missing" : read.problem;
    return c;
  }
  if (to_hex(sha256(read.record)).substr(0, 32) != entry.key_prefix) {
    c.problem = "key record does not hash to the key in the file name";
    return c;
  }
  c.nsajit_version = record_field(read.record, "nsajit");
  c.nvrtc_version = record_field(read.record, "nvrtc");
  c.arch = record_field(read.record, "arch");
  c.current = c.nsajit_version == version() && c.nvrtc_version == nvrtc_version();
  return c;
}

// Removes the orphan lock files (no entry, not held, older than a minute) and temporary files
// older than ten minutes.
void remove_orphans(const CacheScan& scan, PruneResult& result) {
  const std::int64_t now = now_seconds();
  for (const std::string& lock : scan.lock_files) {
    const std::string entry = lock.substr(0, lock.size() - std::string_view(".lock").size());
    const std::optional<FileStat> st = stat_file(lock);
    if (!st || now - st->mtime < kOrphanLockSeconds || stat_file(entry)) continue;
    TryLock held(lock);
    if (held.held() && !stat_file(entry) && ::unlink(lock.c_str()) == 0) ++result.removed_locks;
  }
  for (const std::string& temp : scan.temp_files) {
    const std::optional<FileStat> st = stat_file(temp);
    if (st && now - st->mtime >= kOrphanTempSeconds && ::unlink(temp.c_str()) == 0) ++result.removed_temps;
  }
}

}  // namespace

CacheScan scan_cache(const std::string& dir) {
  CacheScan scan;
  scan.dir = dir;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return scan;
  scan.exists = true;
  for (const fs::directory_entry& e : it) {
    const std::string file = e.path().filename().string();
    const std::string path = e.path().string();
    const std::optional<FileStat> st = stat_file(path);
    if (!st) {
      scan.other_files.push_back(path);
      continue;
    }
    scan.total_bytes += st->size;
    std::string name, key;
    if (split_entry_name(file, name, key)) {
      scan.entries.push_back(
          {path, name, key, st->size, std::max(st->atime, st->mtime), std::max(st->atime_ns, st->mtime_ns)});
      scan.entry_bytes += st->size;
    } else if (file.ends_with(".cubin.lock")) {
      scan.lock_files.push_back(path);
    } else if (file.find(".cubin.tmp.") != std::string::npos) {
      scan.temp_files.push_back(path);
    } else {
      scan.other_files.push_back(path);
    }
  }
  std::sort(scan.entries.begin(), scan.entries.end(),
            [](const CacheEntryInfo& a, const CacheEntryInfo& b) { return a.name != b.name ? a.name < b.name : a.path < b.path; });
  return scan;
}

EntryCheck check_entry(const CacheEntryInfo& entry) { return check_read(entry, read_cache_entry(entry.path)); }

VerifyResult verify_cache(const std::string& dir, bool fix) {
  if (fix) refuse_untrusted(dir);
  VerifyResult result;
  for (const CacheEntryInfo& entry : scan_cache(dir).entries) {
    const CacheEntry read = read_cache_entry(entry.path);
    if (read.status == CacheEntry::Status::missing) continue;  // removed by another process since the scan
    ++result.checked;
    const EntryCheck c = check_read(entry, read);
    if (c.problem.empty()) {
      result.stale += !c.current;
      continue;
    }
    result.corrupt.emplace_back(entry.path, c.problem);
    if (!fix) continue;
    TryLock lock(entry.path + ".lock");
    if (!lock.problem().empty()) {
      result.bad_lock.emplace_back(entry.path, lock.problem());
    } else if (!lock.held()) {
      result.in_use.push_back(entry.path);
    } else if (remove_cache_entry_if_unchanged(entry.path, read)) {
      result.removed.push_back(entry.path);
    }
  }
  return result;
}

PruneResult prune_cache(const std::string& dir, const PruneOptions& options) {
  refuse_untrusted(dir);
  PruneResult result;
  CacheScan scan = scan_cache(dir);
  std::vector<CacheEntryInfo> entries = scan.entries;
  std::sort(entries.begin(), entries.end(),
            [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
              return std::tie(a.last_used_ns, a.path) < std::tie(b.last_used_ns, b.path);  // ties: one order always
            });
  std::uint64_t bytes = scan.entry_bytes;
  const std::int64_t now = now_seconds();
  for (const CacheEntryInfo& entry : entries) {
    if (entry.path == options.keep) continue;
    bool evict = options.everything;
    if (!evict && options.older_than_days >= 0)
      evict = double(now - entry.last_used) >= options.older_than_days * 86400.0;
    if (!evict && options.max_bytes > 0) evict = bytes > options.max_bytes;
    if (!evict && options.stale) {
      const EntryCheck c = check_entry(entry);
      evict = c.problem.empty() && !c.current;
    }
    if (!evict) continue;
    const std::optional<FileStat> st = stat_file(entry.path);
    if (!st) {  // gone already
      bytes -= std::min(bytes, entry.bytes);
      continue;
    }
    TryLock lock(entry.path + ".lock");
    if (!lock.problem().empty()) {
      result.bad_lock.emplace_back(entry.path, lock.problem());
      continue;
    }
    if (!lock.held()) {
      result.in_use.push_back(entry.path);
      continue;
    }
    if (unlink_if_same(entry.path, *st)) {
      result.removed_entries.push_back(entry.path);
      result.removed_bytes += st->size;
      bytes -= std::min(bytes, st->size);
      // The lock file of a removed entry is an orphan; remove it while holding it.
      if (::unlink((entry.path + ".lock").c_str()) == 0) ++result.removed_locks;
    }
  }
  result.entry_bytes_after = bytes;
  remove_orphans(scan, result);
  return result;
}

std::uint64_t parse_byte_count(const std::string& text, const std::string& what) {
  std::size_t i = 0;
  std::uint64_t value = 0;
  bool overflow = false;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    overflow = overflow || value > (UINT64_MAX - 9) / 10;
    value = value * 10 + std::uint64_t(text[i++] - '0');
  }
  int shift = 0;
  if (i > 0 && i + 1 == text.size()) {
    switch (text[i]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: shift = -1;
    }
    ++i;
  }
  if (i == 0 || i != text.size() || shift < 0 || overflow || (shift > 0 && value > (UINT64_MAX >> shift)))
    throw InvalidArgument(fmt::format("{} = \"{}\": expected a byte count, optionally with a K, M, G or T suffix "
                                      "(powers of 1024, e.g. 2G)",
                                      what, text));
  return value << shift;
}

std::uint64_t cache_max_bytes_from_env() {
  const char* env = std::getenv("NSAJIT_CACHE_MAX_BYTES");
  if (env == nullptr || *env == '\0') return 0;
  return parse_byte_count(env, "environment variable NSAJIT_CACHE_MAX_BYTES");
}

void note_cache_entry_used(const std::string& path) {
  const timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  ::utimensat(AT_FDCWD, path.c_str(), times, 0);
}

void enforce_cache_size_bound(const std::string& dir, std::uint64_t max_bytes, const std::string& just_written) {
  if (max_bytes == 0) return;
  try {
    if (scan_cache(dir).entry_bytes <= max_bytes) return;
    prune_cache(dir, {.max_bytes = max_bytes, .keep = just_written});
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "nsajit: cannot apply NSAJIT_CACHE_MAX_BYTES to %s: %s\n", dir.c_str(), e.what());
  }
}

}  // namespace nsajit
