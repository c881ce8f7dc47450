// cubin_cache.cpp — on-disk cubin entries: key, format, atomic publish, verification.
#include "cache/cubin_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "cache/sha256.hpp"
#include "nsajit/errors.hpp"

namespace nsajit {
namespace {

constexpr char kMagic[8] = {'N', 'S', 'A', 'J', 'I', 'T', 'C', 'B'};
constexpr std::uint32_t kFormatVersion = 1;

void warn(const std::string& message) {
  std::fflush(stdout);  // keep the order of the tool's output when both streams go to one place
  std::fprintf(stderr, "nsajit: %s\n", message.c_str());
}

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <class T>
bool get(std::string_view in, std::size_t& pos, T& value) {
  if (in.size() - pos < sizeof(T)) return false;
  std::memcpy(&value, in.data() + pos, sizeof(T));
  pos += sizeof(T);
  return true;
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

// The identity of a file (device, inode), to remove a corrupt entry only if it is still the file
// that was read (another process may have published a good one under the name since).
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};

bool read_file(const std::string& path, std::string& out, FileId& id) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  id = {st.st_dev, st.st_ino};
  if (ok) {
    out.resize(std::size_t(st.st_size));
    std::size_t done = 0;
    while (ok && done < out.size()) {
      const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ok = false;
      else done += std::size_t(n);
    }
  }
  ::close(fd);
  return ok;
}

// A unique temporary name next to the final one (same directory, so rename is atomic).
std::string temp_path_for(const std::string& path) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}.tmp.{}.{:016x}", path, ::getpid(), rng());
}

// RAII flock on "<entry>.lock": one process compiles a key while the others wait, then hit.
class EntryLock {
 public:
  explicit EntryLock(const std::string& path) {
    fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;  // read-only directory: no lock, duplicate compiles are still correct
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~EntryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

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
  if (const char* d = std::getenv("NSAJIT_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/nsajit";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/nsajit";
  return fmt::format("/tmp/nsajit-cache-{}", ::getuid());  // no HOME: a per-user folder
}

const char* parse_entry(std::string_view file, EntryContents& out) {
  std::size_t pos = sizeof(kMagic);
  std::uint32_t format = 0, record_size = 0;
  std::uint64_t cubin_size = 0;
  Sha256Digest checksum{};
  if (file.size() < sizeof(kMagic) || std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) return "bad magic";
  if (!get(file, pos, format) || format != kFormatVersion) return "unknown format version";
  if (!get(file, pos, record_size) || file.size() - pos < record_size) return "truncated key record";
  out.record = file.substr(pos, record_size);
  pos += record_size;
  if (!get(file, pos, cubin_size) || file.size() - pos < checksum.size()) return "truncated header";
  std::memcpy(checksum.data(), file.data() + pos, checksum.size());
  pos += checksum.size();
  if (file.size() - pos != cubin_size) return "cubin size does not match the file (truncated?)";
  if (sha256(file.data() + pos, cubin_size) != checksum) return "cubin checksum mismatch";
  out.cubin = file.substr(pos);
  return nullptr;
}

bool read_entry_file(const std::string& path, std::string& out, std::uint64_t& dev, std::uint64_t& ino) {
  FileId id;
  const bool ok = read_file(path, out, id);
  dev = std::uint64_t(id.dev);
  ino = std::uint64_t(id.ino);
  return ok;
}

CubinCache::CubinCache(std::string dir) : dir_(std::move(dir)) {}

std::string CubinCache::entry_path(const std::string& name, const CacheKey& key) const {
  return fmt::format("{}/{}.{}.cubin", dir_, name, key.digest.substr(0, 32));
}

std::optional<std::vector<char>> CubinCache::load(const std::string& name, const CacheKey& key) const {
  return load_entry(name, key, false);
}

std::optional<std::vector<char>> CubinCache::load_entry(const std::string& name, const CacheKey& key,
                                                        bool lock_held) const {
  const std::string path = entry_path(name, key);
  std::string file;
  FileId read_id;
  if (!read_file(path, file, read_id)) return std::nullopt;

  EntryContents contents;
  const char* why = parse_entry(file, contents);
  if (!why && contents.record != key.record) why = "key record differs from the expected one";
  if (why) {
    warn(fmt::format("cache entry {} is corrupt ({}): removing it and rebuilding", path, why));
    // Under the entry's lock, and only if the name still holds the file we read: a process that
    // holds the lock may have published a good entry in its place meanwhile.
    std::optional<EntryLock> lock;
    if (!lock_held) lock.emplace(path);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && FileId{st.st_dev, st.st_ino} == read_id) ::unlink(path.c_str());
    return std::nullopt;
  }
  return std::vector<char>(contents.cubin.begin(), contents.cubin.end());
}

bool CubinCache::store(const std::string& name, const CacheKey& key, const std::vector<char>& cubin) const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const std::string path = entry_path(name, key);
  const std::string temp = temp_path_for(path);

  std::string header(kMagic, sizeof(kMagic));
  put(header, kFormatVersion);
  put(header, std::uint32_t(key.record.size()));
  header += key.record;
  put(header, std::uint64_t(cubin.size()));
  const Sha256Digest checksum = sha256(cubin.data(), cubin.size());
  header.append(reinterpret_cast<const char*>(checksum.data()), checksum.size());

  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
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
                                     const std::function<std::vector<char>()>& build) const {
  CacheLookup result;
  if (auto cubin = load(name, key)) {
    result.cubin = std::move(*cubin);
    result.hit = true;
    return result;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  EntryLock lock(entry_path(name, key));
  if (auto cubin = load_entry(name, key, true)) {  // another process built it while we waited
    result.cubin = std::move(*cubin);
    result.hit = true;
    return result;
  }
  const auto start = std::chrono::steady_clock::now();
  result.cubin = build();
  result.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  result.stored = store(name, key, result.cubin);
  return result;
}

}  // namespace nsajit
