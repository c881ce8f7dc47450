// precompile_command.cpp — `nsajit precompile`: every kernel a fleet can dispatch, compiled into
// the cache on N threads, with progress and a JSON manifest.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cache/cache_admin.hpp"
#include "cache/cubin_cache.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "runtime/json_text.hpp"
#include "tools/commands.hpp"
#include "tools/fleet_specs.hpp"
#include "tools/progress.hpp"
#include "tools/subcommands.hpp"
#include "tools/tuning_config.hpp"

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
  std::vector<std::string> tuning_dbs;
  std::vector<std::string> score_dtypes;
};

struct Item : CompileItem {
  FleetSpec fleet;
  bool gone = false;  // reported hit or compiled, but its entry was no longer on disk at the end
};

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A kernel counts as precompiled only if its entry is on disk when precompile ends: the size bound
// (NSAJIT_CACHE_MAX_BYTES) evicts after every write, the kernels just written included once they
// exceed it, and another process may prune. Marks the others failed, naming why.
void fail_kernels_no_longer_on_disk(std::vector<Item>& items, const std::string& dir) {
  const std::uint64_t bound = cache_max_bytes_from_env();
  std::uint64_t total = 0;
  for (const Item& it : items) total += it.record.cubin_bytes;
  const CubinCache cache(dir);
  for (Item& it : items) {
    if ((it.result != "hit" && it.result != "compiled") || it.record.key.empty()) continue;
    struct stat st {};
    const std::string path = cache.entry_path(it.name, {.record = "", .digest = it.record.key});
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) continue;
    it.result = "failed";
    it.gone = true;
    it.error = bound > 0 ? fmt::format("{}, then evicted by the cache's size bound NSAJIT_CACHE_MAX_BYTES = {} "
                                       "bytes (the {} kernels' cubins alone take {} bytes); raise the bound or "
                                       "unset it for precompile",
                                       it.record.source == CubinSource::compiled ? "compiled" : "in the cache", bound,
                                       items.size(), total)
                         : fmt::format("no longer in the cache {} at the end (removed by another process?)", dir);
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
  // Tuning databases whose choices are compiled besides the shipped ones: --tuning-db, else the
  // one NSAJIT_TUNING_DB names (what the fleet's processes will read).
  fleet.tuning_dbs = read_tuning_dbs(o.tuning_dbs, "--tuning-db");
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
    for (FleetSpec& f : enumerate_fleet_specs(fleet)) items.emplace_back().fleet = std::move(f);
  } else {
    for (const std::string& text : o.specs)
      items.emplace_back().fleet = {parse_spec_text(text, fleet.archs.front()), "--spec " + text};
  }
  for (Item& it : items) {
    it.spec = it.fleet.spec;
    it.name = readable_name(it.spec);
  }

  if (!o.manifest.empty()) check_writable(o.manifest, "--manifest");  // before the compiling, not after
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
    std::vector<CompileItem*> pointers;
    for (Item& it : items) pointers.push_back(&it);
    compile_all(pointers, jobs, o.quiet);
  }
  fail_kernels_no_longer_on_disk(items, dir);
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
    write_atomically(o.manifest, dump_json(manifest_of(items, fleet, enumerated, jobs, elapsed_ms), 2) + "\n",
                     "--manifest");
  std::fflush(stdout);
  // Plain output named each failure on its line already, but for the kernels found gone at the end.
  const bool plain = !o.quiet && !::isatty(STDOUT_FILENO);
  for (const Item& it : items)
    if ((it.result == "missing" || it.result == "failed") && (!plain || it.gone))
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
      "families, both KV dtypes, every tp, arch and MTP depth, every variant the heuristics or a tuning database "
      "choose. Exits 1 naming the kernels not in the cache at the end, e.g. evicted by a NSAJIT_CACHE_MAX_BYTES "
      "bound smaller than they are");
  auto* model = cmd->add_option("--model", o->model, "built-in model config: deepseek-v3.2 (the default)");
  cmd->add_option("--config", o->config_path, "JSON model config (keys as for `nsajit run --config`)")
      ->check(CLI::ExistingFile)
      ->excludes(model);
  cmd->add_option("--tp", o->tps, "attention tensor parallelism degrees, e.g. 1,2,4,8 (default: the config's)")
      ->delimiter(',')
      ->transform(integer_in(1, 1024));
  cmd->add_option("--arch", o->archs, "target archs, e.g. sm_90a,sm_100a (default: sm_90a)")->delimiter(',');
  cmd->add_option("--next-n", o->next_ns, "MTP query tokens per request, e.g. 1,2,4 (default: 1)")
      ->delimiter(',')
      ->transform(integer_in(1, 8));
  cmd->add_flag("--sorted", o->sorted, "also the sorted top-k forms");
  cmd->add_option("--tuning-db", o->tuning_dbs,
                  "also every kernel this tuning database chooses (repeatable; default: $NSAJIT_TUNING_DB; the "
                  "shipped databases always)");
  cmd->add_option("--score-dtype", o->score_dtypes, "top-k score dtypes, e.g. fp32,bf16 (default: fp32)")
      ->delimiter(',');
  cmd->add_option("--spec", o->specs,
                  "precompile just this kernel: canonical text or readable name (repeatable; replaces the "
                  "enumeration; canonical text without arch= takes the first --arch)");
  cmd->add_option("--jobs,-j", o->jobs, "compile threads (default: the hardware threads)")->transform(integer_in(1, 256));
  cmd->add_option("--manifest", o->manifest, "write a JSON manifest of every kernel here")
      ->check(CLI::Validator([](std::string& path) { return path.empty() ? "expected a file path, got ''" : ""; }, ""));
  cmd->add_flag("--quiet,-q", o->quiet, "print nothing but errors");
  cmd->add_flag("--check", o->check,
                "compile nothing: exit 1 naming the kernels the cache lacks (strict mode, as NSAJIT_NO_JIT=1)");
  return {cmd, [o] { return run_precompile(*o); }};
}

}  // namespace nsajit::tools
