// main.cpp — the nsajit command-line tool.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>

#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "runtime/driver.hpp"
#include "tools/bench/bench_common.hpp"
#include "tools/commands.hpp"
#include "tools/subcommands.hpp"

int main(int argc, char** argv) {
  using namespace nsajit::tools;
  CLI::App app{"nsajit — JIT-generated DeepSeek Sparse Attention kernels (top-k, index transform, sparse MLA)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "nsajit " + nsajit::version());

  std::string config_path;
  int tp = 0;
  std::string arch;
  auto add_config_options = [&](CLI::App* cmd) {
    cmd->add_option("--config", config_path, "JSON model config (default: built-in DeepSeek-V3.2)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--tp", tp, "attention tensor parallelism (h_q = num_attention_heads / tp)")
        ->check(CLI::Range(1, 1024));
    cmd->add_option("--arch", arch, "target arch, e.g. sm_90a (default: the GPU's, else sm_90a)");
  };
  CLI::App* run = app.add_subcommand("run", "run a DeepSeek-V3.2 decode step through the JIT and check it "
                                            "(without a GPU: compile the config's kernels into the cache)");
  add_config_options(run);
  const std::vector<Subcommand> subcommands = {add_precompile_command(app), add_cache_command(app),
                                               add_gen_command(app), add_info_command(app)};

  nsajit::tools::bench::BenchOptions bench_options;
  std::string bench_family;
  bool no_baseline = false;
  CLI::App* bench = app.add_subcommand("bench", "benchmark a kernel family on the GPU against the PyTorch baseline "
                                                "and write bench/results/<family>-<date>-<commit>.json");
  bench->add_option("family", bench_family, "topk | sparse-mla | jit")
      ->required()
      ->check(CLI::IsMember({"topk", "sparse-mla", "jit"}));
  bench->add_option("--out", bench_options.out, "results file (default: bench/results/<family>-<date>-<commit>.json)");
  bench->add_option("--iters", bench_options.iters, "timed launches per case (median reported)")->check(CLI::Range(1, 100000));
  bench->add_option("--only", bench_options.only, "run only the cases whose name contains this text");
  bench->add_option("--baseline-script", bench_options.baseline_script, "python3 script timing the PyTorch baseline");
  bench->add_flag("--no-baseline", no_baseline, "skip the PyTorch baseline");
  bench->add_option("--anchors", bench_options.anchors,
                    "recorded anchor figures merged by case name (anchor_us, vs_anchor); \"\" for none")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  for (const Subcommand& sub : subcommands) {
    if (!sub.app->parsed()) continue;
    try {
      return sub.run();
    } catch (const nsajit::Error& e) {
      std::fprintf(stderr, "nsajit: error: %s\n", e.what());
      return 2;
    }
  }
  if (bench->parsed()) {
    bench_options.command = "nsajit";
    for (int i = 1; i < argc; ++i) bench_options.command += std::string(" ") + argv[i];
    if (no_baseline) bench_options.baseline_script.clear();
    if (bench_family == "jit") {  // its compile and disk-cache cases need no GPU
      try {
        return nsajit::tools::bench::bench_jit(bench_options);
      } catch (const nsajit::Error& e) {
        std::fprintf(stderr, "nsajit: error: %s\n", e.what());
        return 2;
      }
    }
    if (!nsajit::driver::available()) {
      std::fprintf(stderr, "nsajit bench: no GPU (libcuda.so.1 or a CUDA device is missing)\n");
      return 2;
    }
    try {
      if (!bench_options.anchors.empty()) nsajit::tools::bench::load_anchors(bench_options.anchors);  // fail before the run
      return bench_family == "topk" ? nsajit::tools::bench::bench_topk(bench_options)
                                    : nsajit::tools::bench::bench_sparse_mla(bench_options);
    } catch (const nsajit::Error& e) {
      std::fprintf(stderr, "nsajit: error: %s\n", e.what());
      return 2;
    }
  }
  try {
    RunOptions options;
    if (!config_path.empty()) options.config = load_model_config(config_path);
    if (tp > 0) options.config.tp = tp;
    options.arch = arch;
    validate_model_config(options.config);
    return run_command(options);
  } catch (const nsajit::Error& e) {
    std::fprintf(stderr, "nsajit: error: %s\n", e.what());
    return 2;
  }
}
