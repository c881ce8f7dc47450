// test_cache.cpp — cache keys, hit/miss, corrupt and truncated entries, concurrent processes,
// untrusted directories, huge and non-regular entries, stuck lock holders, callers that refuse to
// wait, stale temporary files.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/cubin_cache.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "nsajit/jit.hpp"
#include "tests/process_helpers.hpp"
#include "tests/test_dirs.hpp"

using namespace nsajit;
namespace fs = std::filesystem;

namespace {

const std::string kTinySource = "extern \"C\" __global__ void tiny(int* p) { p[threadIdx.x] = 1; }\n";

CacheKeyFields tiny_fields() {
  return {.nsajit_version = version(),
          .nvrtc_version = nvrtc_version(),
          .arch = "sm_90a",
          .options = nvrtc_options({90, 'a'}),
          .source = kTinySource};
}

std::vector<char> compile_tiny() { return compile_cubin("tiny", kTinySource, nvrtc_options({90, 'a'})).cubin; }

std::vector<fs::path> files_in(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  return out;
}

int count_entries(const std::string& dir, const std::string& suffix) {
  int n = 0;
  for (const auto& p : files_in(dir))
    if (p.string().ends_with(suffix)) ++n;
  return n;
}

// Temporary files of unfinished writes ("<entry>.tmp.<pid>.<random>").
int count_temp_files(const std::string& dir) {
  int n = 0;
  for (const auto& p : files_in(dir))
    if (p.filename().string().find(".tmp.") != std::string::npos) ++n;
  return n;
}

}  // namespace

TEST_CASE("every field of the key record changes the key") {
  const CacheKey base = make_cache_key(tiny_fields());
  CHECK(base.digest.size() == 64);
  CHECK(make_cache_key(tiny_fields()).digest == base.digest);
  std::vector<CacheKeyFields> variants(7, tiny_fields());
  variants[0].nsajit_version += "+1";
  variants[1].nvrtc_version = "99.9";
  variants[2].arch = "sm_90";
  variants[3].options.push_back("-lineinfo");
  variants[4].source += " ";
  variants[5].schema += 1;
  variants[6].options = {variants[6].options[1], variants[6].options[0], variants[6].options[2]};
  for (const CacheKeyFields& v : variants) {
    const CacheKey k = make_cache_key(v);
    CHECK(k.digest != base.digest);
    CHECK(k.record != base.record);
  }
}

TEST_CASE("a miss builds and stores; the next lookup hits without building") {
  const test::TempDir dir("hitmiss");
  const CubinCache cache(dir);
  const CacheKey key = make_cache_key(tiny_fields());
  int builds = 0;
  auto build = [&] { ++builds; return compile_tiny(); };
  const CacheLookup first = cache.get_or_build("tiny.sm_90a", key, build);
  CHECK_FALSE(first.hit);
  CHECK(builds == 1);
  const CacheLookup second = cache.get_or_build("tiny.sm_90a", key, build);
  CHECK(second.hit);
  CHECK(builds == 1);
  CHECK(second.cubin == first.cubin);
  CHECK(fs::exists(cache.entry_path("tiny.sm_90a", key)));
  CHECK(count_temp_files(cache.dir()) == 0);
  // Another key (different source) is a different entry.
  CacheKeyFields other = tiny_fields();
  other.source += "// other\n";
  CHECK_FALSE(cache.load("tiny.sm_90a", make_cache_key(other)).has_value());
}

TEST_CASE("corrupt, truncated or foreign entries are detected, removed and rebuilt") {
  const test::TempDir dir("corrupt");
  const CubinCache cache(dir);
  const CacheKey key = make_cache_key(tiny_fields());
  const std::string path = cache.entry_path("tiny.sm_90a", key);
  const std::vector<char> good = cache.get_or_build("tiny.sm_90a", key, compile_tiny).cubin;
  const auto good_size = fs::file_size(path);

  auto damage_and_check = [&](const char* what, auto&& damage) {
    INFO(what);
    damage();
    CHECK_FALSE(cache.load("tiny.sm_90a", key).has_value());  // detected...
    CHECK_FALSE(fs::exists(path));                             // ...and removed
    int builds = 0;
    const CacheLookup again = cache.get_or_build("tiny.sm_90a", key, [&] { ++builds; return compile_tiny(); });
    CHECK(builds == 1);  // rebuilt
    CHECK_FALSE(again.hit);
    CHECK(again.cubin == good);
    CHECK(cache.load("tiny.sm_90a", key).value() == good);
  };
  damage_and_check("flipped cubin byte", [&] {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(good_size - 10));
    f.put('\x5a');
  });
  damage_and_check("truncated", [&] { fs::resize_file(path, good_size / 2); });
  damage_and_check("empty", [&] { fs::resize_file(path, 0); });
  damage_and_check("foreign file", [&] { std::ofstream(path, std::ios::trunc) << "not a cache entry"; });
  damage_and_check("entry of another key under this name", [&] {
    CacheKeyFields other = tiny_fields();
    other.nvrtc_version = "1.0";
    const CacheKey other_key = make_cache_key(other);
    REQUIRE(cache.store("tmp", other_key, good));
    fs::rename(cache.entry_path("tmp", other_key), path);
  });
}

TEST_CASE("8 processes compiling one key all succeed and leave one valid entry") {
  const test::TempDir dir("procs");
  const CacheKey key = make_cache_key(tiny_fields());
  std::vector<pid_t> children;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 1;
      try {
        const CubinCache cache(dir);
        const CacheLookup r = cache.get_or_build("tiny.sm_90a", key, compile_tiny);
        code = (r.cubin.size() > 4 && r.cubin[1] == 'E') ? (r.hit ? 0 : 10) : 2;
      } catch (...) {
        code = 3;
      }
      _exit(code);
    }
    children.push_back(pid);
  }
  int compiled = 0;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    const int code = WEXITSTATUS(status);
    CHECK((code == 0 || code == 10));
    compiled += code == 10;
  }
  CHECK(compiled == 1);  // the entry lock makes one process compile; the others hit
  CHECK(count_entries(dir, ".cubin") == 1);
  CHECK(count_temp_files(dir) == 0);
  CHECK(CubinCache(dir).load("tiny.sm_90a", key).has_value());
}

TEST_CASE("precompile: a fresh process compiles once, the next one hits the disk cache") {
  // A spec no other test uses, so this process's memory cache cannot answer; any entry of it left
  // by an earlier run is removed first.
  const KernelSpec spec{.family = Family::topk, .topk = 1984};
  const std::string prefix = readable_name(spec) + ".";
  auto entries = [&] {
    int n = 0;
    if (fs::exists(cache_dir()))
      for (const auto& p : files_in(cache_dir()))
        if (p.filename().string().starts_with(prefix) && p.string().ends_with(".cubin")) ++n;
    return n;
  };
  if (fs::exists(cache_dir()))
    for (const auto& p : files_in(cache_dir()))
      if (p.filename().string().starts_with(prefix)) fs::remove(p);
  auto in_child = [&] {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 9;
      try {
        code = int(precompile(spec).source);
      } catch (...) {
      }
      _exit(code);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  };
  CHECK(in_child() == int(CubinSource::compiled));
  CHECK(in_child() == int(CubinSource::disk_cache));
  CHECK(entries() == 1);
}

TEST_CASE("concurrent first requests of one spec in a process compile it once") {
  // A spec no other test uses; any disk entry of it from an earlier run is removed first.
  const KernelSpec spec{.family = Family::topk, .topk = 1920};
  const std::string prefix = readable_name(spec) + ".";
  if (fs::exists(cache_dir()))
    for (const auto& p : files_in(cache_dir()))
      if (p.filename().string().starts_with(prefix)) fs::remove(p);
  std::vector<std::thread> threads;
  std::vector<CubinSource> sources(8, CubinSource::memory);
  for (int i = 0; i < 8; ++i) threads.emplace_back([&, i] { sources[i] = precompile(spec).source; });
  for (auto& t : threads) t.join();
  int compiled = 0, memory = 0;
  for (CubinSource s : sources) {
    compiled += s == CubinSource::compiled;
    memory += s == CubinSource::memory;
  }
  CHECK(compiled == 1);
  CHECK(memory == 7);
  int records = 0;
  for (const KernelRecord& r : jit_records()) records += r.name == readable_name(spec);
  CHECK(records == 1);
}

namespace {

const std::string kName = "tiny.sm_90a";

// The cubin of a good entry, for forging entries.
const std::vector<char>& tiny_cubin() {
  static const std::vector<char> cubin = compile_tiny();
  return cubin;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// A cache in a fresh directory, the tiny kernel's key and its entry's path.
struct Fixture {
  test::TempDir dir;
  CubinCache cache{dir.path()};
  CacheKey key = make_cache_key(tiny_fields());
  std::string path = cache.entry_path(kName, key);
  explicit Fixture(const char* tag) : dir(tag) {}
};

// Runs get_or_build and returns (lookup, builds, stderr).
struct Outcome {
  CacheLookup lookup;
  int builds = 0;
  std::string messages;
};
Outcome lookup(const CubinCache& cache, const CacheKey& key) {
  Outcome o;
  o.messages = test::capture_stderr([&] {
    o.lookup = cache.get_or_build(kName, key, [&] { ++o.builds; return tiny_cubin(); });
  });
  return o;
}

}  // namespace

TEST_CASE("a cache directory that others can write, or another user owns, is not trusted: memory only") {
  const CacheKey key = make_cache_key(tiny_fields());
  auto forged_dir = [&](const test::TempDir& dir) {
    REQUIRE(CubinCache(dir).store(kName, key, tiny_cubin()));  // a valid entry: right size, right SHA-256
    return CubinCache(dir).entry_path(kName, key);
  };
  auto lookup_forged_with_mode = [&](const char* name, ::mode_t mode) {  // one lookup in a fresh forged dir
    const test::TempDir dir(name);
    forged_dir(dir);
    REQUIRE(::chmod(dir.path().c_str(), mode) == 0);
    return lookup(CubinCache(dir), key);
  };
  SUBCASE("mode 0777 (another user could have planted the entry)") {
    const test::TempDir dir("untrusted-mode");
    const std::string entry = forged_dir(dir);
    REQUIRE(::chmod(dir.path().c_str(), 0777) == 0);
    const CubinCache cache(dir);
    const Outcome first = lookup(cache, key);
    CHECK_FALSE(first.lookup.hit);  // not read although valid
    CHECK(first.builds == 1);
    CHECK_FALSE(first.lookup.stored);
    CHECK_FALSE(cache.trusted());
    CHECK(test::count_of(first.messages, dir.path()) == 1);
    CHECK(test::count_of(first.messages, "0777") == 1);
    const Outcome second = lookup(cache, key);  // memory-only from then on, without a second warning
    CHECK_FALSE(second.lookup.hit);
    CHECK(second.messages.empty());
    CHECK_FALSE(cache.load(kName, key).has_value());
    CHECK(fs::exists(entry));  // left alone: not ours to remove
  }
  SUBCASE("group-writable 0770") {
    const Outcome o = lookup_forged_with_mode("untrusted-group", 0770);
    CHECK_FALSE(o.lookup.hit);
    CHECK(test::count_of(o.messages, "its group") == 1);
  }
  SUBCASE("owned by another user (uid 65534), mode 0755") {
    const test::TempDir dir("untrusted-owner");
    const std::string entry = forged_dir(dir);
    if (::chown(dir.path().c_str(), 65534, 65534) != 0 || ::chown(entry.c_str(), 65534, 65534) != 0 ||
        ::geteuid() == 65534) {
      MESSAGE("skipped: cannot give the directory to uid 65534 here (" << std::strerror(errno) << ")");
      return;
    }
    REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
    const CubinCache cache(dir);
    const Outcome o = lookup(cache, key);
    CHECK_FALSE(o.lookup.hit);  // even for root: another user's directory
    CHECK(o.builds == 1);
    CHECK(test::count_of(o.messages, "uid 65534") == 1);
    CHECK(test::count_of(o.messages, dir.path()) == 1);
    CHECK_FALSE(cache.trusted());
  }
  SUBCASE("owned by this user, mode 0755 (a shared read-only cache): trusted") {
    const Outcome o = lookup_forged_with_mode("trusted", 0755);
    CHECK(o.lookup.hit);
    CHECK(o.builds == 0);
    CHECK(o.messages.empty());
  }
}

TEST_CASE("a cache path that is a regular file is named as one: not a directory") {
  const test::TempDir dir("file-as-dir");
  const std::string file = dir.path() + "/file";
  std::ofstream(file) << "x";
  const std::string why = cache_dir_distrust_reason(file);
  CHECK(why == "it is a regular file, not a directory");
  const CubinCache cache(file);
  const Outcome o = lookup(cache, make_cache_key(tiny_fields()));
  CHECK(o.builds == 1);
  CHECK_FALSE(o.lookup.stored);
  CHECK(test::count_of(o.messages, file + ": it is a regular file, not a directory") == 1);
}

TEST_CASE("directories the cache creates are 0700") {
  const test::TempDir dir("create");
  const std::string nested = dir.path() + "/a/b";
  const CubinCache cache(nested);
  const CacheKey key = make_cache_key(tiny_fields());
  const ::mode_t old_umask = ::umask(0);  // even with a permissive umask
  const Outcome o = lookup(cache, key);
  ::umask(old_umask);
  CHECK(o.lookup.stored);
  CHECK(mode_of(dir.path() + "/a") == 0700);
  CHECK(mode_of(nested) == 0700);
  CHECK(cache.load(kName, key).has_value());
}

TEST_CASE("a huge sparse entry is rejected from its sizes, removed and rebuilt without reading it") {
  const Fixture f("huge");
  REQUIRE(f.cache.store(kName, f.key, tiny_cubin()));
  const auto good_size = fs::file_size(f.path);
  const std::uint64_t tib = std::uint64_t(1) << 40;

  SUBCASE("a valid header followed by 1 TiB") {
    if (::truncate(f.path.c_str(), off_t(tib)) != 0) {
      MESSAGE("skipped: this filesystem cannot hold a 1 TiB sparse file (" << std::strerror(errno) << ")");
      return;
    }
  }
  SUBCASE("a header claiming a 1 TiB cubin, in a file of that size") {
    // The cubin size field sits just before the 32-byte checksum, which precedes the cubin.
    const std::uint64_t size_offset = good_size - tiny_cubin().size() - 32 - 8;
    const int fd = ::open(f.path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, &tib, sizeof(tib), off_t(size_offset)) == sizeof(tib));
    const bool grown = ::ftruncate(fd, off_t(good_size - tiny_cubin().size() + tib)) == 0;
    ::close(fd);
    if (!grown) {
      MESSAGE("skipped: this filesystem cannot hold a 1 TiB sparse file");
      return;
    }
  }
  test::Watchdog watchdog("loading a 1 TiB entry", 60);
  const Outcome o = lookup(f.cache, f.key);
  CHECK(test::count_of(o.messages, f.path) == 1);  // reported
  CHECK(test::count_of(o.messages, "corrupt") == 1);
  CHECK_FALSE(o.lookup.hit);
  CHECK(o.builds == 1);  // rebuilt
  CHECK(o.lookup.stored);
  CHECK(fs::file_size(f.path) == good_size);  // replaced
  CHECK(f.cache.load(kName, f.key).value() == tiny_cubin());
}

TEST_CASE("a cache directory that cannot be created is reported once, not once a kernel") {
  const CubinCache cache("/proc/nsajit-no-such-cache-dir");
  const CacheKey key = make_cache_key(tiny_fields());
  int builds = 0;
  const std::string messages = test::capture_stderr([&] {
    for (int i = 0; i < 3; ++i) {
      const CacheLookup l = cache.get_or_build(fmt::format("k{}", i), key, [&] { ++builds; return tiny_cubin(); });
      CHECK_FALSE(l.stored);
      CHECK(l.cubin == tiny_cubin());
    }
  });
  CHECK(builds == 3);
  CHECK(test::count_of(messages, "cannot create the cache directory /proc/nsajit-no-such-cache-dir") == 1);
}

TEST_CASE("a cache directory under a regular file is reported with the cause: not a directory") {
  const test::TempDir dir("under-file");
  std::ofstream(dir.path() + "/file") << "x";
  const CubinCache cache(dir.path() + "/file/sub");
  const std::string messages = test::capture_stderr([&] {
    CHECK_FALSE(cache.get_or_build("k", make_cache_key(tiny_fields()), [] { return tiny_cubin(); }).stored);
  });
  CHECK(test::count_of(messages, "cannot create the cache directory " + dir.path() + "/file/sub (Not a directory)") == 1);
}

TEST_CASE("a cubin over the readers' 64 MiB limit is not stored (it would be read back as corrupt), only used") {
  Fixture f("huge-store");
  const std::vector<char> huge(std::size_t(kMaxCubinBytes) + 1, 'x');
  bool stored = true;
  const std::string messages = test::capture_stderr([&] { stored = f.cache.store(kName, f.key, huge); });
  CHECK_FALSE(stored);
  CHECK(test::count_of(messages, fmt::format("not caching kernel {}: its cubin is {} bytes", kName, huge.size())) == 1);
  CHECK_FALSE(fs::exists(f.path));
  CHECK(count_temp_files(f.dir.path()) == 0);
  CacheLookup built;
  test::capture_stderr([&] { built = f.cache.get_or_build(kName, f.key, [&] { return huge; }); });
  CHECK(built.cubin.size() == huge.size());
  CHECK_FALSE(built.stored);
  const std::vector<char> largest(std::size_t(kMaxCubinBytes), 'x');  // the limit itself is stored and read back
  REQUIRE(f.cache.store(kName, f.key, largest));
  CHECK(read_cache_entry(f.path, &f.key.record).status == CacheEntry::Status::ok);
}

TEST_CASE("an entry that is a FIFO, a device or a symbolic link is reported and replaced, without hanging") {
  const Fixture f("special");
  std::string kind;
  SUBCASE("FIFO") {
    REQUIRE(::mkfifo(f.path.c_str(), 0600) == 0);
    kind = "FIFO";
  }
  SUBCASE("character device") {
    if (::mknod(f.path.c_str(), S_IFCHR | 0600, makedev(1, 5)) != 0) {  // /dev/zero's numbers
      MESSAGE("skipped: cannot create a device node here (" << std::strerror(errno) << ")");
      return;
    }
    kind = "character device";
  }
  SUBCASE("symbolic link to /dev/zero") {
    REQUIRE(::symlink("/dev/zero", f.path.c_str()) == 0);
    kind = "symbolic link";
  }
  test::Watchdog watchdog("loading a non-regular entry", 30);
  const Outcome o = lookup(f.cache, f.key);
  CHECK(test::count_of(o.messages, kind) == 1);
  CHECK(test::count_of(o.messages, f.path) == 1);
  CHECK(o.builds == 1);
  CHECK(o.lookup.stored);
  CHECK(fs::is_regular_file(fs::symlink_status(f.path)));
  CHECK(f.cache.load(kName, f.key).value() == tiny_cubin());
}

TEST_CASE("a lock holder that never releases: a notice after 5 s, then the kernel is built without the lock") {
  const Fixture f("stuck");
  // The holder: an open file description of the lock file, locked and never released.
  const int holder = ::open((f.path + ".lock").c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(holder >= 0);
  REQUIRE(::flock(holder, LOCK_EX) == 0);
  const char* old = std::getenv("NSAJIT_CACHE_LOCK_TIMEOUT");
  const std::string saved = old ? old : "";
  ::setenv("NSAJIT_CACHE_LOCK_TIMEOUT", "6", 1);
  const auto start = std::chrono::steady_clock::now();
  Outcome o;
  {
    test::Watchdog watchdog("waiting for a stuck lock holder with NSAJIT_CACHE_LOCK_TIMEOUT=6", 60);
    o = lookup(f.cache, f.key);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (old) ::setenv("NSAJIT_CACHE_LOCK_TIMEOUT", saved.c_str(), 1);
  else ::unsetenv("NSAJIT_CACHE_LOCK_TIMEOUT");
  ::close(holder);
  CHECK(seconds >= 5.9);
  CHECK(seconds < 30);
  CHECK(test::count_of(o.messages, "still waiting after 5 s") == 1);  // one line after 5 s...
  CHECK(test::count_of(o.messages, "gave up after 6 s") == 1);        // ...and one at the timeout
  CHECK(test::count_of(o.messages, f.path) == 2);
  CHECK(o.builds == 1);
  CHECK_FALSE(o.lookup.hit);
  CHECK(o.lookup.cubin == tiny_cubin());
}

TEST_CASE("a caller that refuses to wait (a graph capture) is told at once when another process holds the lock") {
  const Fixture f("refuse");
  struct Refused {};
  int asked = 0;
  const std::function<void()> refuse = [&] {
    ++asked;
    throw Refused{};
  };
  // The lock free: a miss builds without asking; a hit asks nothing either.
  int builds = 0;
  CHECK_FALSE(f.cache.get_or_build(kName, f.key, [&] { ++builds; return tiny_cubin(); }, refuse).hit);
  CHECK(f.cache.get_or_build(kName, f.key, [&] { ++builds; return tiny_cubin(); }, refuse).hit);
  CHECK(builds == 1);
  CHECK(asked == 0);

  const int holder = ::open((f.path + ".lock").c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(holder >= 0);
  REQUIRE(::flock(holder, LOCK_EX) == 0);
  test::Watchdog watchdog("a refusing caller facing a held entry lock", 30);
  // A corrupt entry is removed under the lock: with the lock held elsewhere the caller is asked
  // first, and its refusal leaves the entry for a later call.
  std::ofstream(f.path, std::ios::trunc) << "not a cache entry";
  const std::string messages = test::capture_stderr([&] { CHECK_THROWS_AS(f.cache.load(kName, f.key, refuse), Refused); });
  CHECK(test::count_of(messages, "is corrupt") == 1);
  CHECK(asked == 1);
  CHECK(fs::exists(f.path));
  // A miss would wait for the holder's build: refused before waiting, nothing built.
  fs::remove(f.path);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(f.cache.get_or_build(kName, f.key, [&] { ++builds; return tiny_cubin(); }, refuse), Refused);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5);
  CHECK(asked == 2);
  CHECK(builds == 1);
  // A caller that accepts the wait: the hook returns (here releasing the holder), then the lookup
  // takes the lock and builds.
  int waited = 0;
  const CacheLookup after = f.cache.get_or_build(kName, f.key, [&] { ++builds; return tiny_cubin(); }, [&] {
    ++waited;
    ::close(holder);
  });
  CHECK(waited == 1);
  CHECK(builds == 2);
  CHECK(after.cubin == tiny_cubin());
}

TEST_CASE("temporary files of dead writers older than an hour are swept when the directory is next written") {
  const test::TempDir dir("stale");
  const CacheKey key = make_cache_key(tiny_fields());
  const std::string entry = CubinCache(dir).entry_path(kName, key);
  const pid_t dead = fork();  // a pid that has exited (and been reaped)
  REQUIRE(dead >= 0);
  if (dead == 0) _exit(0);
  REQUIRE(waitpid(dead, nullptr, 0) == dead);
  auto plant = [&](pid_t pid, const char* tail, int age_s) {
    const std::string p = fmt::format("{}.tmp.{}.{}", entry, pid, tail);
    std::ofstream(p) << "half-written";
    const timespec when{std::time(nullptr) - age_s, 0};
    const timespec times[2] = {when, when};
    REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, 0) == 0);
    return p;
  };
  const std::string stale = plant(dead, "0123456789abcdef", 2 * 3600);
  const std::string fresh = plant(dead, "1111111111111111", 60);          // may still be written
  const std::string alive = plant(getppid(), "2222222222222222", 2 * 3600);  // its writer lives
  const std::string other = plant(dead, "not-a-temp-name", 2 * 3600);     // not nsajit's pattern
  const CubinCache cache(dir);
  CHECK(fs::exists(stale));
  REQUIRE(cache.store(kName, key, tiny_cubin()));
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(fresh));
  CHECK(fs::exists(alive));
  CHECK(fs::exists(other));
}

TEST_CASE("the default cache directory takes XDG_CACHE_HOME only when it is absolute (the XDG rules)") {
  struct SavedEnv {
    const char* name;
    std::optional<std::string> value;
    explicit SavedEnv(const char* n) : name(n) {
      if (const char* v = std::getenv(n)) value = v;
    }
    ~SavedEnv() {
      if (value) ::setenv(name, value->c_str(), 1);
      else ::unsetenv(name);
    }
  };
  const SavedEnv cache_dir("NSAJIT_CACHE_DIR"), xdg("XDG_CACHE_HOME"), home("HOME");
  ::unsetenv("NSAJIT_CACHE_DIR");
  ::setenv("HOME", "/home/someone", 1);
  ::setenv("XDG_CACHE_HOME", "/var/cache/someone", 1);
  CHECK(default_cache_dir() == "/var/cache/someone/nsajit");
  ::setenv("XDG_CACHE_HOME", "relative/cache", 1);
  CHECK(default_cache_dir() == "/home/someone/.cache/nsajit");
  ::setenv("NSAJIT_CACHE_DIR", "/opt/cubins", 1);
  CHECK(default_cache_dir() == "/opt/cubins");
}
