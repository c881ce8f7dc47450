// main.cpp — the nsajit command-line tool.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>

#include "nsajit/errors.hpp"
#include "tools/commands.hpp"

int main(int argc, char** argv) {
  using namespace nsajit::tools;
  CLI::App app{"nsajit — JIT-generated DeepSeek Sparse Attention kernels (top-k, index transform, sparse MLA)"};
  app.require_subcommand(1);

  std::string config_path;
  int tp = 0;
  std::string arch;
  auto add_config_options = [&](CLI::App* cmd) {
    cmd->add_option("--config", config_path, "JSON model config (default: built-in DeepSeek-V3.2)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--tp", tp, "attention tensor parallelism (h_q = num_attention_heads / tp)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--arch", arch, "target arch, e.g. sm_90a (default: the GPU's, else sm_90a)");
  };
  CLI::App* run = app.add_subcommand("run", "run a DeepSeek-V3.2 decode step through the JIT and check it "
                                            "(without a GPU: compile the config's kernels into the cache)");
  add_config_options(run);
  CLI::App* pre = app.add_subcommand("precompile", "compile the config's kernels into the cache (no GPU needed)");
  add_config_options(pre);

  CLI11_PARSE(app, argc, argv);
  try {
    RunOptions options;
    if (!config_path.empty()) options.config = load_model_config(config_path);
    if (tp > 0) options.config.tp = tp;
    options.arch = arch;
    validate_model_config(options.config);
    if (run->parsed()) return run_command(options);
    return precompile_command(options);
  } catch (const nsajit::Error& e) {
    std::fprintf(stderr, "nsajit: error: %s\n", e.what());
    return 2;
  }
}
