// test_cli.cpp — the nsajit tool as a user runs it: exit codes of every subcommand, strict config
// files, arch checks, messages that name the source of a bad value, and `run` without a GPU.
// The tool runs with CUDA_VISIBLE_DEVICES="" so that these hold on a GPU machine too.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/process_helpers.hpp"
#include "tests/test_dirs.hpp"

#ifdef NSAJIT_CLI_PATH

namespace {

struct Result {
  int code = -1;       // exit status; -1: killed (timeout or signal)
  std::string output;  // stdout and stderr together
};

// Runs the tool with `args` in a fresh cache directory (or `cache_dir`), extra environment
// `env` ("NAME=value"), and a timeout.
Result run_tool(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
              const std::string& cache_dir = "", int timeout_s = 120) {
  nsajit::test::TempDir out_dir("cli");
  const std::string own_cache = out_dir.path() + "/cache";
  const std::string out_path = out_dir.path() + "/out";
  // Everything the child needs is built here: between fork and exec only async-signal-safe calls.
  std::vector<std::string> environment{"CUDA_VISIBLE_DEVICES=",
                                       "NSAJIT_CACHE_DIR=" + (cache_dir.empty() ? own_cache : cache_dir)};
  environment.insert(environment.end(), env.begin(), env.end());
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const std::string& mine : environment)
      replaced = replaced || entry.substr(0, entry.find('=') + 1) == mine.substr(0, mine.find('=') + 1);
    if (!replaced) environment.push_back(entry);
  }
  std::vector<char*> envp;
  for (std::string& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> words{NSAJIT_CLI_PATH};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execve(NSAJIT_CLI_PATH, argv.data(), envp.data());
    _exit(127);
  }
  Result r;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL_CHECK("nsajit did not finish within " << timeout_s << " s");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status)) r.code = WEXITSTATUS(status);
  std::ifstream in(out_path);
  std::stringstream text;
  text << in.rdbuf();
  r.output = text.str();
  return r;
}

bool has(const Result& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

// A config file with `content` in a temporary directory.
struct ConfigFile {
  nsajit::test::TempDir dir{"config"};
  std::string path;
  explicit ConfigFile(const std::string& content) : path(dir.path() + "/config.json") {
    std::ofstream(path) << content;
  }
};

}  // namespace

TEST_CASE("nsajit CLI: usage errors exit 2 and name the subcommand, flag or value") {
  Result r = run_tool({"bogus"});
  CHECK(r.code == 2);
  CHECK(has(r, "unknown subcommand \"bogus\""));
  r = run_tool({});
  CHECK(r.code == 2);
  r = run_tool({"run", "--no-such-flag"});
  CHECK(r.code == 2);  // a CLI11 parse error maps to 2
  CHECK(has(r, "--no-such-flag"));
  r = run_tool({"run", "--tp", "0"});
  CHECK(r.code == 2);
  CHECK(has(r, "--tp"));
  r = run_tool({"run", "--tp", "3"});  // in range for the flag, but not a divisor of 128
  CHECK(r.code == 2);
  CHECK(has(r, "tp = 3 (from the flag --tp)"));
  r = run_tool({"precompile", "--config", "/nonexistent/nsajit.json"});
  CHECK(r.code == 2);
  CHECK(has(r, "/nonexistent/nsajit.json"));
  r = run_tool({"bench"});
  CHECK(r.code == 2);
  r = run_tool({"bench", "attention"});
  CHECK(r.code == 2);
  r = run_tool({"help", "bogus"});
  CHECK(r.code == 2);
  CHECK(has(r, "bogus"));
}

TEST_CASE("nsajit CLI: cache prune --older-than takes a finite number of days; nan, inf and negatives are bad usage") {
  const nsajit::test::TempDir dir("cli-older");
  const std::string entry = dir.path() + "/k.0123456789abcdef0123456789abcdef.cubin";
  std::ofstream(entry) << "x";
  for (const char* bad : {"nan", "NaN", "inf", "-inf", "-1", "1e400", "3days", "0x10", ""}) {
    const Result r = run_tool({"cache", "--dir", dir.path(), "prune", "--older-than", bad});
    CAPTURE(bad);
    CHECK(r.code == 2);
    CHECK(has(r, "--older-than: \"" + std::string(bad) + "\": expected a finite number of days >= 0"));
  }
  CHECK(std::filesystem::exists(entry));
  Result r = run_tool({"cache", "--dir", dir.path(), "prune", "--older-than", "0.5"});
  CHECK(r.code == 0);
  CHECK(std::filesystem::exists(entry));  // just written: used less than half a day ago
  r = run_tool({"cache", "--dir", dir.path(), "prune", "--older-than", "0"});
  CHECK(r.code == 0);
  CHECK_FALSE(std::filesystem::exists(entry));
}

TEST_CASE("nsajit CLI: integer options name what they expect for a non-number; unknown options the nearest; an empty --manifest is bad usage") {
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {{"run", "--tp", "abc"}, "--tp: expected an integer in [1, 1024], got 'abc'"},
      {{"run", "--tp", "0"}, "--tp: expected an integer in [1, 1024], got '0'"},
      {{"precompile", "--tp", "2,x"}, "--tp: expected an integer in [1, 1024], got 'x'"},
      {{"precompile", "--jobs", "1.5"}, "--jobs: expected an integer in [1, 256], got '1.5'"},
      {{"bench", "topk", "--iters", "0"}, "--iters: expected an integer in [1, 100000], got '0'"},
      {{"bench", "topk", "--soak-ms", "-5"}, "--soak-ms: expected an integer in [0, 600000], got '-5'"},
      {{"precompile", "--manifest", ""}, "--manifest: expected a file path, got ''"},
      {{"precompile", "--next-n", "09"}, "--next-n: expected an integer in [1, 8], got '09'"},
      // Unknown options name the subcommand and the nearest known option; a stray argument is named.
      {{"run", "--tpp", "8"}, "run: unknown option --tpp (did you mean --tp?); see nsajit run --help"},
      {{"precompile", "--sortd"}, "precompile: unknown option --sortd (did you mean --sorted?)"},
      {{"cache", "list", "--dri", "/tmp"}, "cache list: unknown option --dri (did you mean --dir?)"},
      {{"cache", "prune", "--older", "3"}, "cache prune: unknown option --older (did you mean --older-than?)"},
      {{"gen", "family=topk", "--zzzzzz"}, "gen: unknown option --zzzzzz; see nsajit gen --help"},
      {{"run", "8"}, "run: unexpected argument 8; see nsajit run --help"},
      // Decimal always (CLI11 alone reads 0100 as octal 64), with a '+' or blanks allowed.
      {{"run", "--tp", "0100"}, "tp = 100 (from the flag --tp)"},
      {{"run", "--tp", "+100"}, "tp = 100 (from the flag --tp)"},
      {{"run", "--tp", " 100 "}, "tp = 100 (from the flag --tp)"},
  };
  for (const Bad& bad : cases) {
    const Result r = run_tool(bad.args);
    CAPTURE(bad.message);
    CHECK(r.code == 2);
    CHECK(has(r, bad.message));
  }
}

// A cache entry file name: <readable name>.<32 hex digits>.cubin (its content is not checked here).
std::string entry_path(const std::string& dir, const std::string& name = "topk.k") {
  return dir + "/" + name + ".0123456789abcdef0123456789abcdef.cubin";
}

TEST_CASE("nsajit CLI: cache's --dir and --version are accepted after its subcommand too") {
  const nsajit::test::TempDir dir("cli-dir-after");
  std::ofstream(entry_path(dir.path())) << "x";
  for (const std::string sub : {"list", "stats"}) {
    const Result before = run_tool({"cache", "--dir", dir.path(), sub});
    const Result after = run_tool({"cache", sub, "--dir", dir.path()});
    INFO(sub << ":\n" << after.output);
    CHECK(after.code == 0);
    CHECK(has(after, dir.path()));
    CHECK(after.output == before.output);
  }
  CHECK(run_tool({"cache", "list", "--json", "--dir=" + dir.path()}).output ==
        run_tool({"cache", "--dir", dir.path(), "list", "--json"}).output);
  const Result verify = run_tool({"cache", "verify", "--dir", dir.path()});
  CHECK(verify.code == 1);  // the entry is corrupt: verify read the directory given
  CHECK(has(verify, "corrupt: " + entry_path(dir.path())));
  const Result prune = run_tool({"cache", "prune", "--older-than", "0", "--dir", dir.path()});
  CHECK(prune.code == 0);
  CHECK_FALSE(std::filesystem::exists(entry_path(dir.path())));
  for (const char* sub : {"list", "stats", "verify", "prune", "clear"}) {
    const Result r = run_tool({"cache", sub, "--version"});
    INFO(sub << ":\n" << r.output);
    CHECK(r.code == 0);
    CHECK(has(r, "nsajit 0."));
    CHECK(has(r, "NVRTC 1"));
  }
}

TEST_CASE("nsajit CLI: cache with a missing or unknown subcommand names the subcommands expected") {
  const nsajit::test::TempDir dir("cli-cache-sub");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"cache", "nosuch"}, {"cache", "--dir", dir.path(), "nosuch"}}) {
    const Result r = run_tool(args);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r, "unknown cache subcommand \"nosuch\" (expected list, stats, verify, prune or clear"));
  }
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"cache"}, {"cache", "--dir", dir.path()}}) {
    const Result r = run_tool(args);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r, "a cache subcommand is required: list, stats, verify, prune or clear"));
  }
  const Result r = run_tool({"cache", "list", "stats"});  // one subcommand at a time, as before
  CHECK(r.code == 2);
  CHECK(has(r, "stats"));
}

TEST_CASE("nsajit CLI: cache commands say when the cache directory does not exist, and create nothing") {
  const nsajit::test::TempDir dir("cli-cache-missing");
  const std::string missing = dir.path() + "/typo";
  for (const char* sub : {"list", "stats", "verify", "prune", "clear"}) {
    const Result r = run_tool({"cache", "--dir", missing, sub});
    INFO(sub << ":\n" << r.output);
    CHECK(r.code == 0);
    CHECK(has(r, "nsajit: warning: the cache directory " + missing + " does not exist"));
  }
  CHECK_FALSE(std::filesystem::exists(missing));
  const Result r = run_tool({"cache", "--dir", dir.path(), "list"});  // an empty directory that exists
  CHECK(r.code == 0);
  CHECK_FALSE(has(r, "warning"));
}

TEST_CASE("nsajit CLI: info, cache stats and strict mode say when nsajit will not use the cache path, and why") {
  const nsajit::test::TempDir dir("cli-distrust");
  const std::string open_dir = dir.path() + "/open";
  std::filesystem::create_directory(open_dir);
  std::filesystem::permissions(open_dir, std::filesystem::perms::all);  // 0777: others could plant entries
  const Result info = run_tool({"info"}, {}, open_dir);
  INFO(info.output);
  CHECK(has(info, "cache: " + open_dir + " (not used: its mode 0777 lets group and others write it"));
  CHECK(has(run_tool({"cache", "--dir", open_dir, "stats"}), "is not used by nsajit (its mode 0777"));
  // Strict mode names the distrust, not a precompile into the same directory (which would not help).
  const Result strict = run_tool({"run"}, {"NSAJIT_NO_JIT=1"}, open_dir);
  INFO(strict.output);
  CHECK(has(strict, "nsajit does not use that path (its mode 0777"));
  CHECK_FALSE(has(strict, "NSAJIT_CACHE_DIR=" + open_dir + " nsajit precompile"));
  const std::string file = dir.path() + "/file";
  std::ofstream(file) << "x";
  const Result clear = run_tool({"cache", "--dir", file, "clear"});
  INFO(clear.output);
  CHECK(has(clear, "it is a regular file, not a directory"));
  CHECK(has(clear, "(name a directory)"));
  CHECK_FALSE(has(clear, "fix its owner or mode"));
}

TEST_CASE("nsajit CLI: cache and info counts are singular for one (1 entry, 1 lock file, 1 temporary file)") {
  const nsajit::test::TempDir dir("cli-plural");
  const std::string entry = entry_path(dir.path());
  std::ofstream(entry) << "x";
  CHECK(has(run_tool({"cache", "--dir", dir.path(), "list"}), "\n1 entry, "));
  const Result stats = run_tool({"cache", "--dir", dir.path(), "stats"});
  CHECK(has(stats, "entries: 1 ("));
  CHECK(has(stats, "1 entry "));  // the per-family line
  CHECK(has(run_tool({"cache", "--dir", dir.path(), "verify"}), "verify: 1 entry checked"));
  CHECK(has(run_tool({"info"}, {}, dir.path()), " (1 entry, "));
  std::ofstream(entry + ".lock") << "";
  const std::string temp = entry + ".tmp.1.0123456789abcdef";
  std::ofstream(temp) << "";
  std::filesystem::last_write_time(temp, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  const Result prune = run_tool({"cache", "--dir", dir.path(), "prune", "--older-than", "0"});
  INFO(prune.output);
  CHECK(has(prune, "prune: removed 1 entry (1 B), 1 lock file, 1 temporary file;"));
  for (const Result& r : {stats, prune}) {
    CHECK_FALSE(has(r, "1 entries"));
    CHECK_FALSE(has(r, "1 lock files"));
    CHECK_FALSE(has(r, "1 temporary files"));
  }
}

TEST_CASE("nsajit CLI: help takes a nested subcommand (help cache prune); an unknown one names those expected") {
  Result r = run_tool({"help", "cache", "prune"});
  CHECK(r.code == 0);
  CHECK(has(r, "nsajit cache prune"));
  CHECK(has(r, "--max-size"));
  r = run_tool({"help", "cache"});
  CHECK(r.code == 0);
  CHECK(has(r, "nsajit cache"));
  r = run_tool({"help", "cache", "nosuch"});
  CHECK(r.code == 2);
  CHECK(has(r, "help cache nosuch: no such subcommand (expected list, stats, verify, prune or clear)"));
  r = run_tool({"help", "run", "nosuch"});
  CHECK(r.code == 2);
  CHECK(has(r, "help run nosuch: run has no subcommands"));
}

TEST_CASE("nsajit CLI: cache prune --max-size takes a byte count; a bad one is reported like --older-than's") {
  const nsajit::test::TempDir dir("cli-max-size");
  const std::string entry = entry_path(dir.path());
  std::ofstream(entry) << "x";
  for (const char* bad : {"2X", "-1", "1.5G", "2GB", "99999999999999999999", ""}) {
    const Result r = run_tool({"cache", "--dir", dir.path(), "prune", "--max-size", bad});
    CAPTURE(bad);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r, "--max-size: \"" + std::string(bad) + "\": expected a byte count"));
    CHECK(has(r, "Run with --help"));
  }
  CHECK(std::filesystem::exists(entry));
  Result r = run_tool({"cache", "--dir", dir.path(), "prune", "--max-size", "1K"});
  CHECK(r.code == 0);
  CHECK(std::filesystem::exists(entry));
  r = run_tool({"cache", "--dir", dir.path(), "prune", "--max-size", "0"});  // 0: no bound, as before
  CHECK(r.code == 0);
  CHECK(std::filesystem::exists(entry));
}

TEST_CASE("nsajit CLI: help, --help and --version of every subcommand exit 0") {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"help"}, {"--help"}, {"help", "run"}, {"run", "--help"}, {"precompile", "--help"}, {"bench", "--help"}}) {
    const Result r = run_tool(args);
    INFO(args.front() << " " << args.back() << ":\n" << r.output);
    CHECK(r.code == 0);
    CHECK(has(r, "nsajit"));
  }
  const Result help = run_tool({"--help"});
  for (const char* code : {"0 ok", "1 a check", "2 bad usage", "3 no GPU"}) CHECK(has(help, code));
  CHECK(has(run_tool({"help", "run"}), "--require-gpu"));
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--version"}, {"run", "--version"}, {"precompile", "--version"}, {"bench", "--version"},
           {"help", "--version"}}) {
    const Result r = run_tool(args);
    INFO(args.front() << ":\n" << r.output);
    CHECK(r.code == 0);
    CHECK(has(r, "nsajit 0."));
    CHECK(has(r, "(built from "));
    CHECK(has(r, "NVRTC 1"));
    CHECK(has(r, "CUDA driver "));  // a version, or "not available (...)" without libcuda or a device
  }
}

TEST_CASE("nsajit CLI: --arch is range-checked and checked against NVRTC before compiling") {
  Result r = run_tool({"precompile", "--arch", "sm_4294967386"});  // wraps to 90 in 32 bits
  CHECK(r.code == 2);
  CHECK(has(r, "--arch sm_4294967386"));
  CHECK_FALSE(has(r, "compiled"));
  r = run_tool({"precompile", "--arch", "sm_90f"});  // no such target: 'f' starts at sm_100
  CHECK(r.code == 2);
  CHECK(has(r, "--arch sm_90f"));
  CHECK(has(r, "sm_90"));
  CHECK(has(r, "supports"));
  CHECK_FALSE(has(r, "NVRTC compilation"));
  r = run_tool({"run", "--arch", "sm_80"});
  CHECK(r.code == 2);
  CHECK(has(r, "--arch sm_80"));
}

TEST_CASE("nsajit CLI: config files are strict (trailing text, duplicate keys) and errors name file, line and key") {
  {
    const ConfigFile f(R"({"tp": 8} x)");
    const Result r = run_tool({"precompile", "--config", f.path});
    CHECK(r.code == 2);
    CHECK(has(r, f.path));
    CHECK(has(r, "line 1"));
  }
  {
    const ConfigFile f("{\n  \"tp\": 1,\n  \"tp\": 8\n}\n");
    const Result r = run_tool({"precompile", "--config", f.path});
    CHECK(r.code == 2);
    CHECK(has(r, f.path));
    CHECK(has(r, "line 3"));
    CHECK(has(r, "duplicate key \"tp\""));
  }
  {
    const ConfigFile f(R"({"batch": 8, "nested": {"a": 1, "a": 2}})");
    const Result r = run_tool({"precompile", "--config", f.path});
    CHECK(r.code == 2);
    CHECK(has(r, "duplicate key \"a\""));
  }
  {
    const ConfigFile f("{\n  \"name\": \"page_sise\",\n  \"page_sise\": 64\n}\n");  // a value spelled like it first
    const Result r = run_tool({"precompile", "--config", f.path});
    CHECK(r.code == 2);
    CHECK(has(r, f.path + ": line 3: unknown key \"page_sise\" (expected one of name, num_attention_heads"));
  }
  {
    const ConfigFile f(R"({"tp": 3})");
    const Result r = run_tool({"precompile", "--config", f.path});
    CHECK(r.code == 2);
    CHECK(has(r, "tp = 3 (from file " + f.path + ", key \"tp\")"));
  }
  {
    const ConfigFile f(R"({"tp": 2.5})");
    const Result r = run_tool({"precompile", "--config", f.path});
    CHECK(r.code == 2);
    CHECK(has(r, f.path));
    CHECK(has(r, "\"tp\""));
  }
}

TEST_CASE("nsajit CLI: a config whose host buffers cannot be allocated is refused up front, naming the bytes") {
  const ConfigFile f(R"({"batch": 4096, "min_context": 1048576, "max_context": 1048576})");
  const Result r = run_tool({"run", "--config", f.path});
  CHECK(r.code == 2);
  CHECK(has(r, "bytes"));
  CHECK(has(r, "host memory"));
  CHECK_FALSE(has(r, "compiled"));
}

TEST_CASE("nsajit CLI: bench and run --require-gpu exit 3 without a GPU; bad NSAJIT_* values warn once") {
  Result r = run_tool({"bench", "topk", "--no-baseline"});
  CHECK(r.code == 3);
  CHECK(has(r, "no GPU"));
  // A --tile no case can take is a usage error before the GPU check; one some case takes is not.
  r = run_tool({"bench", "sparse-mla", "--no-baseline", "--tile", "kernel=bogus"});
  CHECK(r.code == 2);
  CHECK(has(r, "fits no case"));
  CHECK(has(r, "bogus"));
  r = run_tool({"bench", "sparse-mla", "--no-baseline", "--tile", "kernel=wgmma schedule=seesaw heads_per_cta=64 producer_warps=4"});
  CHECK(r.code == 3);
  // Options of another family are usage errors, not silently ignored.
  r = run_tool({"bench", "topk", "--tile", "kernel=wgmma"});
  CHECK(r.code == 2);
  CHECK(has(r, "--tile applies to bench sparse-mla only"));
  r = run_tool({"bench", "jit", "--anchors", "a.json"});
  CHECK(r.code == 2);
  CHECK(has(r, "--anchors applies to bench topk and sparse-mla only"));
  r = run_tool({"run", "--require-gpu"}, {"NSAJIT_PDL=garbage", "NSAJIT_CACHE_LOCK_TIMEOUT=soon"});
  CHECK(r.code == 3);
  CHECK(has(r, "nothing was checked"));
  CHECK(nsajit::test::count_of(r.output, "NSAJIT_PDL=\"garbage\"") == 1);
  CHECK(has(r, "[0, 1]"));
  CHECK(nsajit::test::count_of(r.output, "NSAJIT_CACHE_LOCK_TIMEOUT=\"soon\"") == 1);
}

TEST_CASE("nsajit CLI: bench jit works in a folder of its own under $TMPDIR and removes it; the results name a commit") {
  const nsajit::test::TempDir tmp("cli-tmpdir");
  const std::string out = tmp.path() + "/results.json";
  const Result r = run_tool({"bench", "jit", "--only", "index_transform", "--out", out}, {"TMPDIR=" + tmp.path()});
  INFO(r.output);
  CHECK(r.code == 0);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path())) left.push_back(e.path().filename().string());
  CHECK(left == std::vector<std::string>{"results.json"});
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  // The commit nsajit --version names (the build's), not one looked up where the tool runs.
  const Result version = run_tool({"--version"});
  const std::size_t from = version.output.find("(built from ");
  REQUIRE(from != std::string::npos);
  const std::size_t begin = from + std::string("(built from ").size();
  CHECK(j["commit"] == version.output.substr(begin, version.output.find(')', begin) - begin));
}

TEST_CASE("nsajit CLI: precompile exits 0; run without a GPU compiles, says nothing was checked and exits 0") {
  const nsajit::test::TempDir cache("cli-cache");
  Result r = run_tool({"precompile", "--tp", "8"}, {}, cache, 300);
  INFO(r.output);
  CHECK(r.code == 0);
  r = run_tool({"run", "--tp", "8"}, {}, cache, 300);
  CHECK(r.code == 0);
  CHECK(has(r, "NOTHING WAS CHECKED"));
  CHECK(has(r, "disk-cache hit"));
  CHECK_FALSE(has(r, "all checks passed"));
}

#endif  // NSAJIT_CLI_PATH
