// main.cpp — the nsajit command-line tool.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "compiler/nvrtc_compiler.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "runtime/driver.hpp"
#include "runtime/env.hpp"
#include "tools/bench/anchors.hpp"
#include "tools/bench/bench_common.hpp"
#include "tools/build_commit.hpp"
#include "tools/commands.hpp"
#include "tools/subcommands.hpp"

namespace {

using namespace nsajit::tools;

const char* const kFooter =
    "Exit codes: 0 ok; 1 a check, kernel, compile or cache write failed; 2 bad usage or input (flags, config "
    "file, arch); 3 no GPU where one is required (bench, autotune, run --require-gpu).\n"
    "Environment: NSAJIT_CACHE_DIR (cache directory), NSAJIT_CACHE_LOCK_TIMEOUT (seconds, default 120), "
    "NSAJIT_CACHE_MAX_BYTES (e.g. 2G: evict least recently used entries past it), NSAJIT_NO_JIT (1: never compile; "
    "a kernel missing from the cache is an error), NSAJIT_PDL (0 or 1), NSAJIT_TUNING_DB (tuning database file or "
    "none); see the README.";

// nsajit, NVRTC and CUDA driver versions (the driver's "not available" without libcuda).
std::string versions() {
  std::string driver;
  try {
    int v = 0;
    if (nsajit::driver::api().cuDriverGetVersion(&v) == CUDA_SUCCESS)
      driver = fmt::format("{}.{}", v / 1000, v % 1000 / 10);
    else
      driver = "not available (cuDriverGetVersion failed)";
  } catch (const nsajit::Error& e) {
    driver = fmt::format("not available ({})", e.what());
  }
  return fmt::format("nsajit {} (built from {})\nNVRTC {}\nCUDA driver {}", nsajit::version(), kNsajitBuildCommit,
                     nsajit::nvrtc_version(), driver);
}

int error_exit(const char* what, int code) {
  std::fflush(stdout);
  std::fprintf(stderr, "nsajit: error: %s\n", what);
  return code;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// CLI11 says only "The following arguments were not expected: 8 --tpp": name the subcommand, the
// unknown option and the nearest known one (a long name at most two edits away, or that it begins).
std::string explain_extras(const CLI::App& app) {
  std::vector<const CLI::App*> chain = {&app};
  for (auto parsed = app.get_subcommands(); !parsed.empty(); parsed = parsed.front()->get_subcommands())
    chain.push_back(parsed.front());
  std::string path;
  for (std::size_t i = 1; i < chain.size(); ++i) path += (i > 1 ? " " : "") + chain[i]->get_name();
  std::vector<std::string> extras;
  for (const CLI::App* level : chain)
    for (const std::string& arg : level->remaining()) extras.push_back(arg);
  if (extras.empty()) return "";
  const std::string where = path.empty() ? "nsajit" : path;
  const std::string help = path.empty() ? "nsajit --help" : "nsajit " + path + " --help";
  for (const std::string& arg : extras) {
    if (arg.size() < 2 || arg[0] != '-') continue;
    const std::string name = arg.substr(0, arg.find('='));
    std::string nearest;
    std::size_t best = 3;
    for (const CLI::App* level : chain)
      for (const CLI::Option* option : level->get_options())
        for (const std::string& known : option->get_lnames()) {
          const std::string candidate = "--" + known;
          const bool prefix = name.size() >= 5 && candidate.rfind(name, 0) == 0;  // "--older" for --older-than
          if (const std::size_t d = prefix ? 1 : edit_distance(name, candidate); d < best) best = d, nearest = candidate;
        }
    return fmt::format("{}: unknown option {}{}; see {}", where, name,
                       nearest.empty() ? "" : fmt::format(" (did you mean {}?)", nearest), help);
  }
  return fmt::format("{}: unexpected argument{} {}; see {}", where, extras.size() > 1 ? "s" : "",
                     fmt::join(extras, " "), help);
}

int run_cli(int argc, char** argv) {
  CLI::App app{"nsajit — JIT-generated DeepSeek Sparse Attention kernels (top-k, index transform, sparse MLA)"};
  app.require_subcommand(1);
  app.footer(kFooter);
  app.set_version_flag("--version", versions, "print the nsajit, NVRTC and CUDA driver versions and exit");

  std::string config_path;
  int tp = 0;
  std::string arch;
  bool require_gpu = false;
  auto add_common = [&](CLI::App* cmd) {
    cmd->footer(kFooter);
    cmd->set_version_flag("--version", versions, "print the nsajit, NVRTC and CUDA driver versions and exit");
  };
  auto add_config_options = [&](CLI::App* cmd) {
    add_common(cmd);
    cmd->add_option("--config", config_path, "JSON model config (default: built-in DeepSeek-V3.2)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--tp", tp, "attention tensor parallelism (h_q = num_attention_heads / tp)")
        ->transform(integer_in(1, 1024));
    cmd->add_option("--arch", arch, "target arch without a GPU, e.g. sm_90a (default sm_90a; with a GPU, the GPU's)");
  };
  CLI::App* run = app.add_subcommand("run", "run a DeepSeek-V3.2 decode step through the JIT and check it "
                                            "(without a GPU: only compile the config's kernels, checking nothing)");
  add_config_options(run);
  run->add_flag("--require-gpu", require_gpu, "exit 3 when there is no GPU instead of only compiling");
  std::vector<Subcommand> subcommands = {add_precompile_command(app), add_cache_command(app), add_gen_command(app),
                                         add_info_command(app), add_autotune_command(app)};
  for (Subcommand& sub : subcommands) add_common(sub.app);

  nsajit::tools::bench::BenchOptions bench_options;
  std::string bench_family;
  bool no_baseline = false;
  CLI::App* bench = app.add_subcommand("bench", "benchmark a kernel family on the GPU against the PyTorch baseline "
                                                "and write bench/results/<family>-<date>-<commit>.json");
  add_common(bench);
  bench->add_option("family", bench_family, "topk | sparse-mla | jit")
      ->required()
      ->check(CLI::IsMember({"topk", "sparse-mla", "jit"}));
  bench->add_option("--out", bench_options.out, "results file (default: bench/results/<family>-<date>-<commit>.json)");
  bench->add_option("--iters", bench_options.iters, "timed launches per case (median reported; default 50)")->transform(integer_in(1, 100000));
  bench->add_option("--soak-ms", bench_options.soak_ms,
                    "before each recorded timing, launch the case untimed for this long, so that it is timed in the "
                    "card's steady state (at the power cap for compute-bound kernels) whatever ran before (default 0)")
      ->transform(integer_in(0, 600000));
  bench->add_option("--only", bench_options.only, "run only the cases whose name contains this text");
  bench->add_option("--baseline-script", bench_options.baseline_script,
                    "python3 script timing the PyTorch baseline (default: bench/torch_baseline.py, relative to the "
                    "current directory)");
  CLI::Option* tile_option = bench->add_option("--tile", bench_options.tile,
                    "sparse-mla: time this kernel variant, tile fields as canonical text, e.g. "
                    "\"kernel=wgmma producer_warps=4 schedule=seesaw\" (default: the product's choice)");
  bench->add_flag("--no-baseline", no_baseline, "skip the PyTorch baseline");
  CLI::Option* anchors_option =
      bench->add_option("--anchors", bench_options.anchors,
                        "recorded anchor figures merged by case name (anchor_us, vs_anchor); \"\" for none; "
                        "default: ../shared/baselines/h200-anchors-2026-12-02.json where it exists, else the "
                        "checkout's copy, bench/anchors/h200-anchors-2026-12-02.json (relative to the current directory)")
          ->capture_default_str();

  std::vector<std::string> help_topic;
  CLI::App* help =
      app.add_subcommand("help", "print this help, or a subcommand's: nsajit help run, nsajit help cache prune");
  add_common(help);
  help->add_option("subcommand", help_topic,
                   "run | precompile | autotune | cache | gen | info | bench | help, then any subcommand of it");

  auto find_subcommand = [&](const std::string& name) -> CLI::App* {
    const auto found = app.get_subcommands([&](CLI::App* s) { return s->get_name() == name; });
    return found.empty() ? nullptr : found.front();
  };
  // CLI11 would only say "A subcommand is required" for a misspelt one.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string first = argv[1];
    if (!find_subcommand(first))
      return error_exit(fmt::format("unknown subcommand \"{}\" (expected run, precompile, autotune, cache, gen, info, "
                                    "bench or help; see nsajit --help)",
                                    first)
                            .c_str(),
                        kExitUsage);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)
      if (const std::string message = explain_extras(app); !message.empty()) return error_exit(message.c_str(), kExitUsage);
    for (const Subcommand& sub : subcommands)
      if (sub.explain)
        if (const std::string message = sub.explain(e); !message.empty()) return error_exit(message.c_str(), kExitUsage);
    const int code = app.exit(e);  // prints help, the versions or the error
    return code == 0 ? kExitOk : kExitUsage;
  }
  nsajit::env::check_all();  // report bad NSAJIT_* values up front

  if (help->parsed()) {
    if (help_topic.empty()) {
      std::fputs(app.get_formatter()->make_help(&app, "nsajit", CLI::AppFormatMode::Normal).c_str(), stdout);
      return kExitOk;
    }
    const CLI::App* topic = find_subcommand(help_topic[0]);
    if (!topic)
      return error_exit(fmt::format("help {}: no such subcommand (expected run, precompile, autotune, cache, gen, info, "
                                    "bench or help)",
                                    help_topic[0])
                            .c_str(),
                        kExitUsage);
    std::string prefix = "nsajit";
    for (std::size_t i = 1; i < help_topic.size(); ++i) {
      const std::string asked = fmt::format("help {}", fmt::join(help_topic.begin(), help_topic.begin() + i + 1, " "));
      const std::vector<const CLI::App*> subs = topic->get_subcommands([](const CLI::App*) { return true; });
      if (subs.empty())
        return error_exit(fmt::format("{}: {} has no subcommands", asked, topic->get_name()).c_str(), kExitUsage);
      const auto found =
          std::find_if(subs.begin(), subs.end(), [&](const CLI::App* s) { return s->get_name() == help_topic[i]; });
      if (found == subs.end()) {
        std::string expected;
        for (std::size_t j = 0; j < subs.size(); ++j)
          expected += (j == 0 ? "" : j + 1 == subs.size() ? " or " : ", ") + subs[j]->get_name();
        return error_exit(fmt::format("{}: no such subcommand (expected {})", asked, expected).c_str(), kExitUsage);
      }
      prefix += " " + topic->get_name();
      topic = *found;
    }
    std::fputs(topic->help(prefix).c_str(), stdout);
    return kExitOk;
  }
  for (const Subcommand& sub : subcommands)
    if (sub.app->parsed()) return sub.run();
  if (bench->parsed()) {
    bench_options.command = "nsajit";
    for (int i = 1; i < argc; ++i) bench_options.command += std::string(" ") + argv[i];
    if (no_baseline) bench_options.baseline_script.clear();
    if (tile_option->count() > 0 && bench_family != "sparse-mla")
      return error_exit(("nsajit bench " + bench_family + ": --tile applies to bench sparse-mla only").c_str(), kExitUsage);
    if (anchors_option->count() > 0 && bench_family == "jit")
      return error_exit("nsajit bench jit: --anchors applies to bench topk and sparse-mla only (jit has no anchors)",
                        kExitUsage);
    std::optional<nsajit::tools::bench::PrivateWorkDir> work_dir;
    try {
      work_dir.emplace();
    } catch (const nsajit::Error& e) {
      return error_exit(e.what(), kExitFailed);
    }
    bench_options.work_dir = work_dir->path();
    // Its compile and disk-cache cases need no GPU (the GPU cases say they were skipped).
    if (bench_family == "jit") return nsajit::tools::bench::bench_jit(bench_options);
    if (bench_family == "sparse-mla" && !bench_options.tile.empty())
      if (const std::string e = nsajit::tools::bench::sparse_mla_tile_error(bench_options.tile); !e.empty())
        return error_exit(("nsajit bench sparse-mla: --tile \"" + bench_options.tile + "\" fits no case: " + e).c_str(), kExitUsage);
    if (!nsajit::driver::available()) {
      std::fprintf(stderr, "nsajit bench: no GPU (%s); nothing was measured\n", no_gpu_reason().c_str());
      return kExitNoGpu;
    }
    if (bench_options.anchors.empty() && anchors_option->count() == 0)
      std::fprintf(stderr, "nsajit bench: no anchors file here (bench/anchors/%s is relative to a checkout): "
                           "no anchor figures merged; --anchors FILE names one\n",
                   nsajit::tools::bench::kDefaultAnchors);
    if (!bench_options.anchors.empty()) {
      try {
        nsajit::tools::bench::load_anchors(bench_options.anchors);  // a bad file fails before the run
      } catch (const nsajit::Error& e) {
        return error_exit(e.what(), kExitUsage);
      }
    }
    return bench_family == "topk" ? nsajit::tools::bench::bench_topk(bench_options)
                                  : nsajit::tools::bench::bench_sparse_mla(bench_options);
  }
  RunOptions options;
  if (!config_path.empty()) options.config = load_model_config(config_path);
  if (tp > 0) {
    options.config.tp = tp;
    options.config.origins["tp"] = "the flag --tp";
  }
  options.arch = arch;
  options.require_gpu = require_gpu;
  validate_model_config(options.config);
  return run_command(options);
}

}  // namespace

int main(int argc, char** argv) {
  // Everything is caught: an error is a message and an exit code, never an abort.
  try {
    return run_cli(argc, argv);
  } catch (const nsajit::InvalidArgument& e) {
    return error_exit(e.what(), kExitUsage);
  } catch (const nsajit::Error& e) {
    return error_exit(e.what(), kExitFailed);
  } catch (const std::bad_alloc&) {
    return error_exit("out of host memory (std::bad_alloc)", kExitFailed);
  } catch (const std::exception& e) {
    return error_exit(fmt::format("unexpected failure: {}", e.what()).c_str(), kExitFailed);
  } catch (...) {
    return error_exit("unexpected failure (an exception that is not a std::exception)", kExitFailed);
  }
}
