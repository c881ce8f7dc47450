// precompile_command.cpp — `nsajit precompile`: every kernel a fleet can dispatch, compiled into
// the cache on N threads, with progress and a JSON manifest.
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "tools/commands.hpp"
#include "tools/fleet_specs.hpp"
#include "tools/spec_text.hpp"
#include "tools/subcommands.hpp"

namespace nsajit::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct PrecompileOptions {
  std::string model;
  std::string config_path;
  std::vector<int> tps;
  std::vector<std::string> archs;
  std::vector<int> next_ns;
  std::vector<std::string> specs;
  int jobs = 0;
  std::string manifest;
  bool quiet = false;
  bool check = false;
  bool sorted = false;
  std::vector<std::string> score_dtypes;
};

struct Item {
  FleetSpec fleet;
  std::string name;
  KernelRecord record;
  double wall_ms = 0;
  std::string result;  // hit | compiled | missing | failed
  std::string error;
};

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int terminal_width() {
  winsize w{};
  return ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 20 ? w.ws_col : 100;
}

// The one updating progress line of a terminal, or one plain line per finished kernel.
class Progress {
 public:
  Progress(std::size_t total, bool quiet) : total_(total), quiet_(quiet), tty_(!quiet && ::isatty(STDOUT_FILENO)) {
    if (tty_) ticker_ = std::thread([this] { tick(); });
  }
  ~Progress() { finish(); }

  void started(const std::string& name) {
    std::lock_guard lock(mutex_);
    running_.push_back(name);
    if (tty_) draw();
  }
  void finished(const Item& item) {
    std::lock_guard lock(mutex_);
    ++done_;
    running_.erase(std::find(running_.begin(), running_.end(), item.name));
    if (tty_) {
      if (!item.error.empty()) fmt::print("\r\033[K{} {}: {}\n", item.result, item.name, item.error);
      draw();
    } else if (!quiet_) {
      fmt::print("[{}/{}] {} {} ({:.0f} ms{})\n", done_, total_, item.result, item.name, item.wall_ms,
                 item.error.empty() ? "" : ": " + item.error);
      std::fflush(stdout);
    }
  }
  void finish() {
    {
      std::lock_guard lock(mutex_);
      if (stop_) return;
      stop_ = true;
    }
    wake_.notify_all();
    if (ticker_.joinable()) ticker_.join();
    if (tty_) {
      fmt::print("\r\033[K");
      std::fflush(stdout);
    }
  }

 private:
  void draw() {
    const double s = ms_since(start_) / 1000;
    std::string line = fmt::format("[{}/{}] {:.1f} s", done_, total_, s);
    if (!running_.empty())
      line += fmt::format("  {}{}", running_.back(),
                          running_.size() > 1 ? fmt::format(" (+{} more)", running_.size() - 1) : "");
    const std::size_t width = std::size_t(terminal_width() - 1);
    if (line.size() > width) line.resize(width);
    fmt::print("\r\033[K{}", line);
    std::fflush(stdout);
  }
  void tick() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      draw();
      wake_.wait_for(lock, std::chrono::milliseconds(250));
    }
  }

  std::size_t total_;
  std::size_t done_ = 0;
  bool quiet_, tty_;
  bool stop_ = false;
  Clock::time_point start_ = Clock::now();
  std::vector<std::string> running_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
};

// Writes `text` to `path` through a temporary file and rename, so a reader never sees half.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
    if (!out.flush()) throw InvalidArgument(fmt::format("--manifest {}: cannot write {}", path, temp));
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::filesystem::remove(temp, ec);
    throw InvalidArgument(fmt::format("--manifest {}: cannot write the file ({})", path, ec.message()));
  }
}

nlohmann::json manifest_of(const std::vector<Item>& items, const FleetConfig& fleet, bool enumerated, int jobs,
                           double elapsed_ms) {
  nlohmann::json kernels = nlohmann::json::array();
  int counts[4] = {};
  for (const Item& it : items) {
    nlohmann::json k = {{"name", it.name},
                        {"spec", canonical_text(it.fleet.spec)},
                        {"key", it.record.key},
                        {"bytes", it.record.cubin_bytes},
                        {"compile_ms", it.record.compile_ms},
                        {"wall_ms", it.wall_ms},
                        {"result", it.result},
                        {"origin", it.fleet.origin}};
    if (!it.error.empty()) k["error"] = it.error;
    kernels.push_back(std::move(k));
    counts[it.result == "hit" ? 0 : it.result == "compiled" ? 1 : it.result == "missing" ? 2 : 3]++;
  }
  nlohmann::json j = {{"nsajit_version", version()},
                      {"nvrtc_version", nvrtc_version()},
                      {"cache_dir", cache_dir()},
                      {"jobs", jobs},
                      {"elapsed_ms", elapsed_ms},
                      {"kernels_total", items.size()},
                      {"hits", counts[0]},
                      {"compiled", counts[1]},
                      {"missing", counts[2]},
                      {"failed", counts[3]}};
  if (enumerated) {
    std::vector<std::string> archs;
    for (Arch a : fleet.archs) archs.push_back(to_string(a));
    j["fleet"] = {{"model", fleet.model.name},         {"num_attention_heads", fleet.model.num_attention_heads},
                  {"index_topk", fleet.model.index_topk}, {"page_size", fleet.model.page_size},
                  {"tp", fleet.tps},                       {"arch", archs},
                  {"next_n", fleet.next_ns},               {"sorted_topk", fleet.sorted_topk}};
    std::vector<std::string> score_dtypes;
    for (ScoreDtype d : fleet.score_dtypes) score_dtypes.push_back(to_string(d));
    j["fleet"]["score_dtype"] = score_dtypes;
  }
  j["kernels"] = std::move(kernels);
  return j;
}

int run_precompile(const PrecompileOptions& o) {
  FleetConfig fleet;
  if (!o.config_path.empty()) fleet.model = load_model_config(o.config_path);
  if (!o.model.empty()) {
    std::string m = o.model;
    std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (m != "deepseek-v3.2")
      throw InvalidArgument(fmt::format("--model {}: expected deepseek-v3.2 (or --config FILE)", o.model));
  }
  fleet.tps = o.tps.empty() ? std::vector<int>{fleet.model.tp} : o.tps;
  if (!o.tps.empty()) fleet.model.origins["tp"] = "the flag --tp";
  fleet.archs.clear();
  for (const std::string& a : o.archs) fleet.archs.push_back(target_arch(a));
  if (fleet.archs.empty()) fleet.archs.push_back(target_arch(""));
  if (!o.next_ns.empty()) fleet.next_ns = o.next_ns;
  fleet.sorted_topk = o.sorted;
  if (!o.score_dtypes.empty()) {
    fleet.score_dtypes.clear();
    for (const std::string& d : o.score_dtypes) {
      if (d == "fp32") fleet.score_dtypes.push_back(ScoreDtype::fp32);
      else if (d == "bf16") fleet.score_dtypes.push_back(ScoreDtype::bf16);
      else throw InvalidArgument(fmt::format("--score-dtype {}: expected fp32 or bf16", d));
    }
  }

  std::vector<Item> items;
  const bool enumerated = o.specs.empty();
  if (enumerated) {
    for (FleetSpec& f : enumerate_fleet_specs(fleet)) items.push_back({.fleet = std::move(f)});
  } else {
    for (const std::string& text : o.specs)
      items.push_back({.fleet = {parse_spec_text(text, fleet.archs.front()), "--spec " + text}});
  }
  for (Item& it : items) it.name = readable_name(it.fleet.spec);

  const std::string dir = cache_dir();  // settles the cache's environment (a bad value is bad usage)
  // The tool's job is to compile: the environment's strict mode (NSAJIT_NO_JIT) does not apply;
  // --check is strict mode on purpose.
  set_strict_mode(o.check);
  const int jobs = o.jobs > 0 ? o.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  if (!o.quiet)
    fmt::print("precompile: {} kernels on {} thread(s), nsajit {}, NVRTC {}, cache {}{}\n", items.size(), jobs,
               version(), nvrtc_version(), dir, o.check ? " (check only: nothing is compiled)" : "");
  std::fflush(stdout);

  const auto start = Clock::now();
  {
    Progress progress(items.size(), o.quiet);
    // Longest compiles first (top-k, then sparse MLA: seconds each; the rest ~0.1 s), so the last
    // thread is not left with a long one at the end; the manifest keeps the enumeration's order.
    std::vector<std::size_t> order(items.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto weight = [&](std::size_t i) {
      const Family f = items[i].fleet.spec.family;
      return f == Family::topk ? 2 : f == Family::sparse_mla ? 1 : 0;
    };
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return weight(a) > weight(b); });
    std::atomic<std::size_t> next{0};
    auto worker = [&] {
      for (std::size_t n; (n = next++) < items.size();) {
        Item& it = items[order[n]];
        progress.started(it.name);
        const auto t0 = Clock::now();
        try {
          it.record = precompile(it.fleet.spec);
          it.result = it.record.source == CubinSource::compiled ? "compiled" : "hit";
          if (!it.record.on_disk) {
            it.result = "failed";
            it.error = "compiled, but the cache entry could not be written";
          }
        } catch (const KernelNotPrecompiled&) {
          it.result = "missing";
          it.error = "not in the cache";
        } catch (const std::exception& e) {
          it.result = "failed";
          it.error = e.what();
        }
        it.wall_ms = ms_since(t0);
        progress.finished(it);
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < std::min<int>(jobs, int(items.size())); ++t) threads.emplace_back(worker);
    for (std::thread& t : threads) t.join();
  }
  const double elapsed_ms = ms_since(start);

  int hits = 0, compiled = 0, bad = 0;
  double compile_ms = 0;
  for (const Item& it : items) {
    hits += it.result == "hit";
    compiled += it.result == "compiled";
    bad += it.result == "missing" || it.result == "failed";
    compile_ms += it.record.compile_ms;
  }
  if (!o.manifest.empty())
    write_atomically(o.manifest, manifest_of(items, fleet, enumerated, jobs, elapsed_ms).dump(2) + "\n");
  std::fflush(stdout);
  // Plain output named each failure on its line already.
  if (o.quiet || ::isatty(STDOUT_FILENO))
    for (const Item& it : items)
      if (it.result == "missing" || it.result == "failed")
        fmt::print(stderr, "nsajit: {}: {} ({})\n", it.result, it.name, it.error);
  if (!o.quiet || bad > 0) {
    fmt::print("precompile: {} kernels in {:.1f} s: {} hits, {} compiled ({:.1f} s of NVRTC), {} missing or failed{}\n",
               items.size(), elapsed_ms / 1000, hits, compiled, compile_ms / 1000, bad,
               o.manifest.empty() ? "" : "; manifest " + o.manifest);
  }
  return bad > 0 ? kExitFailed : kExitOk;
}

}  // namespace

Subcommand add_precompile_command(CLI::App& app) {
  auto o = std::make_shared<PrecompileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "precompile",
      "compile every kernel a fleet of the model config can dispatch into the cache (no GPU needed): all "
      "families, both KV dtypes, every tp, arch and MTP depth, every variant the heuristics choose");
  auto* model = cmd->add_option("--model", o->model, "built-in model config: deepseek-v3.2 (the default)");
  cmd->add_option("--config", o->config_path, "JSON model config (keys as for `nsajit run --config`)")
      ->check(CLI::ExistingFile)
      ->excludes(model);
  cmd->add_option("--tp", o->tps, "attention tensor parallelism degrees, e.g. 1,2,4,8 (default: the config's)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--arch", o->archs, "target archs, e.g. sm_90a,sm_100a (default: sm_90a)")->delimiter(',');
  cmd->add_option("--next-n", o->next_ns, "MTP query tokens per request, e.g. 1,2,4 (default: 1)")->delimiter(',');
  cmd->add_flag("--sorted", o->sorted, "also the sorted top-k forms");
  cmd->add_option("--score-dtype", o->score_dtypes, "top-k score dtypes, e.g. fp32,bf16 (default: fp32)")
      ->delimiter(',');
  cmd->add_option("--spec", o->specs,
                  "precompile just this kernel: canonical text or readable name (repeatable; replaces the "
                  "enumeration; canonical text without arch= takes the first --arch)");
  cmd->add_option("--jobs,-j", o->jobs, "compile threads (default: the hardware threads)")->check(CLI::Range(1, 256));
  cmd->add_option("--manifest", o->manifest, "write a JSON manifest of every kernel here");
  cmd->add_flag("--quiet,-q", o->quiet, "print nothing but errors");
  cmd->add_flag("--check", o->check,
                "compile nothing: exit 1 naming the kernels the cache lacks (strict mode, as NSAJIT_NO_JIT=1)");
  return {cmd, [o] { return run_precompile(*o); }};
}

}  // namespace nsajit::tools
