// cubin_cache.cpp — on-disk cubin entries: key, format, trust, atomic publish, verification.
#include "cache/cubin_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

#include "cache/sha256.hpp"
#include "nsajit/errors.hpp"
#include "runtime/env.hpp"
#include "runtime/small_file.hpp"

namespace nsajit {
namespace {

constexpr char kMagic[8] = {'N', 'S', 'A', 'J', 'I', 'T', 'C', 'B'};
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::uint32_t kMaxRecordBytes = 1 << 16;  // key records are a few hundred bytes
constexpr std::size_t kFixedHeaderBytes = sizeof(kMagic) + 4 + 4 + 8 + 32;  // without the record
constexpr int kLockNoticeSeconds = 5;
constexpr int kStaleTempSeconds = 3600;

void warn(const std::string& message) {
  std::fflush(stdout);  // keep the order of the tool's output when both streams go to one place
  std::fprintf(stderr, "nsajit: %s\n", message.c_str());
}

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= std::size_t(n);
  }
  return true;
}

// Reads exactly `size` bytes at `offset`; false on error or end of file.
bool read_exact(int fd, void* out, std::size_t size, std::uint64_t offset) {
  char* p = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= std::size_t(n);
    offset += std::uint64_t(n);
  }
  return true;
}

bool owned_by_us_or_root(uid_t uid) { return uid == ::geteuid() || uid == 0; }

// Creates the missing components of `dir` with mode 0700 (existing ones are left as they are).
// Returns the errno of the last mkdir that failed other than with EEXIST, else 0.
int make_private_dirs(const std::string& dir) {
  int error = 0;
  for (std::size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string part = dir.substr(0, slash);
    if (!part.empty() && ::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) error = errno;
    if (slash == std::string::npos) break;
  }
  return error;
}

// A unique temporary name next to the final one (same directory, so rename is atomic).
std::string temp_path_for(const std::string& path) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}.tmp.{}.{:016x}", path, ::getpid(), rng());
}

// The pid in a temporary file's name "<entry>.tmp.<pid>.<16 hex digits>", or 0 if it is not one.
pid_t temp_file_pid(const std::string& name) {
  const std::size_t tmp = name.rfind(".tmp.");
  if (tmp == std::string::npos) return 0;
  const std::size_t dot = name.find('.', tmp + 5);
  if (dot == std::string::npos || dot == tmp + 5 || name.size() - dot - 1 != 16) return 0;
  long long pid = 0;
  for (std::size_t i = tmp + 5; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > (1 << 30)) return 0;
    pid = pid * 10 + (name[i] - '0');
  }
  for (std::size_t i = dot + 1; i < name.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return 0;
  return pid_t(pid);
}

// RAII flock on "<entry>.lock": one process compiles a key while the others wait, then hit. A
// waiter says after 5 s which entry it waits for and gives up after NSAJIT_CACHE_LOCK_TIMEOUT
// seconds (a holder may be stopped or stuck; compiling again is correct, only slower).
// `before_wait` runs only when the lock is held elsewhere, before waiting; it may throw (a caller
// capturing a CUDA graph must not stall on another process's compile).
class EntryLock {
 public:
  EntryLock(const std::string& path, const std::function<void()>& before_wait) {
    fd_ = open_entry_lock_file(path + ".lock");
    if (fd_ < 0) return;  // read-only directory: no lock, duplicate compiles are still correct
    if (try_lock()) return;
    if (before_wait && errno == EWOULDBLOCK) {  // held elsewhere (not a failure of flock itself)
      try {
        before_wait();
      } catch (...) {
        ::close(fd_);
        throw;
      }
    }
    const std::int64_t timeout_s = env::read(env::kCacheLockTimeout);
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::milliseconds(5);
    bool noticed = false;
    while (!try_lock()) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited >= double(timeout_s)) {
        warn(fmt::format("gave up after {} s waiting for the lock on cache entry {}: compiling it without the "
                         "lock (NSAJIT_CACHE_LOCK_TIMEOUT={})",
                         timeout_s, path, timeout_s));
        ::close(fd_);
        fd_ = -1;
        timed_out_ = true;
        return;
      }
      if (!noticed && waited >= kLockNoticeSeconds) {
        warn(fmt::format("still waiting after {} s for another process that holds the lock on cache entry {} "
                         "(compiling it?); giving up after {} s",
                         kLockNoticeSeconds, path, timeout_s));
        noticed = true;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
  }
  ~EntryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

  bool timed_out() const { return timed_out_; }
  bool held() const { return fd_ >= 0; }

 private:
  bool try_lock() {
    while (true) {
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return true;
      if (errno != EINTR) return false;
    }
  }
  int fd_ = -1;
  bool timed_out_ = false;
};

}  // namespace

int open_entry_lock_file(const std::string& lock_path, std::string* why) {
  auto fail = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return -1;
  };
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
  if (fd < 0)
    return fail(errno == ELOOP ? "it is a symbolic link" : fmt::format("cannot open it: {}", std::strerror(errno)));
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0) problem = fmt::format("fstat failed: {}", std::strerror(errno));
  else if (!S_ISREG(st.st_mode)) problem = fmt::format("it is {}, not a regular file", file_type_name(st.st_mode));
  else if (st.st_uid != ::geteuid())
    problem = fmt::format("it is owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
  if (problem.empty()) return fd;
  ::close(fd);
  return fail(std::move(problem));
}

CacheKey make_cache_key(const CacheKeyFields& f) {
  CacheKey key;
  key.record = fmt::format(
      "nsajit-cubin-cache-key schema={}\nnsajit={}\nnvrtc={}\narch={}\noptions={}\nsource-bytes={}\n"
      "source-sha256={}\n",
      f.schema, f.nsajit_version, f.nvrtc_version, f.arch, fmt::join(f.options, " "), f.source.size(),
      to_hex(sha256(f.source)));
  key.digest = to_hex(sha256(key.record));
  return key;
}

std::string default_cache_dir() {
  if (std::string d = env::read_path("NSAJIT_CACHE_DIR"); !d.empty()) return d;
  // The XDG base directory rules: a relative XDG_CACHE_HOME is invalid and ignored.
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return std::string(x) + "/nsajit";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/nsajit";
  return fmt::format("/tmp/nsajit-cache-{}", ::getuid());  // no HOME: a per-user folder
}

std::string cache_dir_distrust_reason(const std::string& dir) {
  struct stat link {};
  if (::lstat(dir.c_str(), &link) != 0) return "";
  if (S_ISLNK(link.st_mode) && !owned_by_us_or_root(link.st_uid))
    return fmt::format("it is a symbolic link owned by uid {}, not by this user (uid {}) or root", link.st_uid,
                       ::geteuid());
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "";
  if (!S_ISDIR(st.st_mode)) return fmt::format("it is {}, not a directory", file_type_name(st.st_mode));
  if (!owned_by_us_or_root(st.st_uid))
    return fmt::format("it is owned by uid {}, not by this user (uid {}) or root", st.st_uid, ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("its mode {:04o} lets {} write it", st.st_mode & 07777,
                       (st.st_mode & S_IWGRP) && (st.st_mode & S_IWOTH) ? "group and others"
                       : (st.st_mode & S_IWGRP)                         ? "its group"
                                                                        : "others");
  return "";
}

std::string cache_dir_remedy(const std::string& why) {
  return why.ends_with("not a directory") ? "name a directory" : "fix its owner or mode";
}

CacheEntry read_cache_entry(const std::string& path, const std::string* expected_record) {
  CacheEntry e;
  auto corrupt = [&](std::string why) {
    e.status = CacheEntry::Status::corrupt;
    e.problem = std::move(why);
    e.record.clear();
    e.cubin.clear();
    return e;
  };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: no link leads elsewhere.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return e;
    struct stat link {};
    if (::lstat(path.c_str(), &link) == 0) {  // its identity, for remove_cache_entry_if_unchanged
      e.device = link.st_dev;
      e.inode = link.st_ino;
    }
    if (error == ELOOP) return corrupt("a symbolic link");
    return corrupt(fmt::format("cannot open it: {}", std::strerror(error)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return corrupt(fmt::format("fstat failed: {}", std::strerror(errno)));
  e.device = st.st_dev;
  e.inode = st.st_ino;
  e.file_bytes = std::uint64_t(st.st_size);
  if (!S_ISREG(st.st_mode)) return corrupt(fmt::format("not a regular file ({})", file_type_name(st.st_mode)));
  if (!owned_by_us_or_root(st.st_uid))
    return corrupt(fmt::format("owned by uid {}, not by this user (uid {}) or root", st.st_uid, ::geteuid()));
  const std::uint64_t size = e.file_bytes;
  if (size > kFixedHeaderBytes + kMaxRecordBytes + kMaxCubinBytes)
    return corrupt(fmt::format("{} bytes: larger than any entry (cubins are at most {} bytes)", size, kMaxCubinBytes));

  char magic[sizeof(kMagic)];
  std::uint32_t format = 0, record_size = 0;
  if (size < kFixedHeaderBytes || !read_exact(fd, magic, sizeof(magic), 0))
    return corrupt(fmt::format("{} bytes: shorter than a header (truncated?)", size));
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) return corrupt("bad magic");
  if (!read_exact(fd, &format, 4, 8) || format != kFormatVersion) return corrupt("unknown format version");
  if (!read_exact(fd, &record_size, 4, 12)) return corrupt("truncated header");
  if (record_size > kMaxRecordBytes)
    return corrupt(fmt::format("key record of {} bytes in the header (at most {})", record_size, kMaxRecordBytes));
  if (expected_record && record_size != expected_record->size())
    return corrupt("key record differs from the expected one");
  if (size < kFixedHeaderBytes + record_size) return corrupt("truncated key record");
  e.record.resize(record_size);
  std::uint64_t cubin_size = 0;
  Sha256Digest checksum{};
  const std::uint64_t after_record = 16 + std::uint64_t(record_size);
  if (!read_exact(fd, e.record.data(), record_size, 16) || !read_exact(fd, &cubin_size, 8, after_record) ||
      !read_exact(fd, checksum.data(), checksum.size(), after_record + 8))
    return corrupt("truncated header");
  if (expected_record && e.record != *expected_record) return corrupt("key record differs from the expected one");
  if (cubin_size > kMaxCubinBytes)
    return corrupt(fmt::format("the header claims a cubin of {} bytes (at most {})", cubin_size, kMaxCubinBytes));
  const std::uint64_t header_bytes = kFixedHeaderBytes + record_size;
  if (size != header_bytes + cubin_size)
    return corrupt(fmt::format("{} bytes, but the header says {} (truncated?)", size, header_bytes + cubin_size));
  e.cubin.resize(std::size_t(cubin_size));
  if (!read_exact(fd, e.cubin.data(), e.cubin.size(), header_bytes)) return corrupt("cubin truncated while reading");
  if (sha256(e.cubin.data(), e.cubin.size()) != checksum) return corrupt("cubin checksum mismatch");
  e.status = CacheEntry::Status::ok;
  return e;
}

bool remove_cache_entry_if_unchanged(const std::string& path, const CacheEntry& entry) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || st.st_dev != entry.device || st.st_ino != entry.inode) return false;
  return ::unlink(path.c_str()) == 0;
}

CubinCache::CubinCache(std::string dir) : dir_(std::move(dir)) {}

std::string CubinCache::entry_path(const std::string& name, const CacheKey& key) const {
  return fmt::format("{}/{}.{}.cubin", dir_, name, key.digest.substr(0, 32));
}

bool CubinCache::usable(bool create, int* create_errno) const {
  if (untrusted_.load()) return false;
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) {
    if (!create || errno != ENOENT) {
      if (create_errno) *create_errno = errno;  // e.g. ENOTDIR: a file where a parent directory should be
      return false;
    }
    const int error = make_private_dirs(dir_);  // whoever created it, the check below decides
    if (create_errno) *create_errno = error ? error : ENOENT;
  }
  if (std::string why = cache_dir_distrust_reason(dir_); !why.empty()) {
    if (!untrusted_.exchange(true))
      warn(fmt::format("not using the cache directory {}: {}; kernels are compiled in memory only", dir_, why));
    return false;
  }
  return ::stat(dir_.c_str(), &st) == 0;
}

std::optional<std::vector<char>> CubinCache::load(const std::string& name, const CacheKey& key,
                                                  const std::function<void()>& before_wait) const {
  return load_entry(name, key, false, before_wait);
}

std::optional<std::vector<char>> CubinCache::load_entry(const std::string& name, const CacheKey& key, bool lock_held,
                                                        const std::function<void()>& before_wait) const {
  if (!usable(false)) return std::nullopt;
  const std::string path = entry_path(name, key);
  CacheEntry entry = read_cache_entry(path, &key.record);
  if (entry.status == CacheEntry::Status::ok) return std::move(entry.cubin);
  if (entry.status == CacheEntry::Status::corrupt) {
    warn(fmt::format("cache entry {} is corrupt ({}): replacing it", path, entry.problem));
    // Under the entry's lock, and only if the name still holds the file we read: a process that
    // holds the lock may have published a good entry in its place meanwhile.
    std::optional<EntryLock> lock;
    if (!lock_held) lock.emplace(path, before_wait);
    errno = 0;
    if ((!lock || !lock->timed_out()) && !remove_cache_entry_if_unchanged(path, entry) && errno != 0 &&
        errno != ENOENT)
      warn(fmt::format("cannot remove the corrupt cache entry {} ({}): it stays until removed by hand", path,
                       std::strerror(errno)));
  }
  return std::nullopt;
}

void CubinCache::sweep_stale_temps() const {
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return;
  const std::time_t now = std::time(nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const pid_t pid = temp_file_pid(name);
    if (pid <= 0 || pid == ::getpid()) continue;
    const std::string path = dir_ + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || now - st.st_mtime < kStaleTempSeconds) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its writer may still be running
    ::unlink(path.c_str());
  }
  ::closedir(d);
}

bool CubinCache::store(const std::string& name, const CacheKey& key, const std::vector<char>& cubin) const {
  if (cubin.size() > kMaxCubinBytes) {  // read_cache_entry would reject it as corrupt, remove it and rebuild
    warn(fmt::format("not caching kernel {}: its cubin is {} bytes, more than the cache's limit of {} bytes; it is "
                     "used from memory",
                     name, cubin.size(), kMaxCubinBytes));
    return false;
  }
  int create_errno = 0;
  if (!usable(true, &create_errno)) {
    if (!untrusted_.load() && !create_warned_.exchange(true))
      warn(fmt::format("cannot create the cache directory {} ({}): continuing without caching it", dir_,
                       std::strerror(create_errno ? create_errno : ENOENT)));
    return false;
  }
  std::call_once(swept_, [&] { sweep_stale_temps(); });
  const std::string path = entry_path(name, key);
  const std::string temp = temp_path_for(path);

  std::string header(kMagic, sizeof(kMagic));
  put(header, kFormatVersion);
  put(header, std::uint32_t(key.record.size()));
  header += key.record;
  put(header, std::uint64_t(cubin.size()));
  const Sha256Digest checksum = sha256(cubin.data(), cubin.size());
  header.append(reinterpret_cast<const char*>(checksum.data()), checksum.size());

  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    warn(fmt::format("cannot write cache entry {} ({}): continuing without caching it", temp, std::strerror(errno)));
    return false;
  }
  const bool written = write_all(fd, header.data(), header.size()) && write_all(fd, cubin.data(), cubin.size()) &&
                       ::fsync(fd) == 0;
  const int write_errno = errno;
  ::close(fd);
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    warn(fmt::format("cannot publish cache entry {} ({}): continuing without caching it", path,
                     std::strerror(written ? errno : write_errno)));
    ::unlink(temp.c_str());
    return false;
  }
  // Make the rename itself durable.
  if (const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return true;
}

CacheLookup CubinCache::get_or_build(const std::string& name, const CacheKey& key,
                                     const std::function<std::vector<char>()>& build,
                                     const std::function<void()>& before_wait) const {
  CacheLookup result;
  auto build_and_store = [&] {
    result.cubin = build();
    result.stored = store(name, key, result.cubin);  // warns when it cannot
    return result;
  };
  if (!usable(true)) return build_and_store();  // untrusted (warned) or not creatable: memory only
  if (auto cubin = load(name, key, before_wait)) {
    result.cubin = std::move(*cubin);
    result.hit = true;
    return result;
  }
  EntryLock lock(entry_path(name, key), before_wait);
  if (lock.held()) {  // without the lock (read-only directory, timeout) no one is known to have built it
    if (auto cubin = load_entry(name, key, true, {})) {  // another process built it while we waited
      result.cubin = std::move(*cubin);
      result.hit = true;
      return result;
    }
  }
  return build_and_store();
}

}  // namespace nsajit
