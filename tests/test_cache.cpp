// test_cache.cpp — cache keys, hit/miss, corrupt and truncated entries, concurrent processes.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/cubin_cache.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "nsajit/jit.hpp"
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
  const CubinCache cache(test::make_temp_dir("hitmiss"));
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
  const CubinCache cache(test::make_temp_dir("corrupt"));
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
  const std::string dir = test::make_temp_dir("procs");
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
