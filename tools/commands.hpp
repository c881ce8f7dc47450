// commands.hpp — the subcommands of the nsajit tool.
#pragma once

#include <string>

#include "tools/model_config.hpp"

namespace nsajit::tools {

struct RunOptions {
  ModelConfig config;
  std::string arch;  // "" = the GPU's arch, else sm_90a when there is no GPU
};

// `nsajit run`: on a GPU, one decode step of the config through the JIT (top-k -> transform ->
// sparse MLA decode), checked against the CPU reference and timed. Without a GPU, precompiles
// the config's kernels into the cache. Returns the exit code.
int run_command(const RunOptions& options);

// `nsajit precompile`: compiles the config's kernels into the cache; needs no GPU.
int precompile_command(const RunOptions& options);

// The GPU part of `nsajit run` (tools/decode_step.cpp). Returns the exit code.
int run_decode_step(const ModelConfig& config);

// Prints the JIT records of this process (hits, misses, compile times) as a table.
void print_jit_records();

}  // namespace nsajit::tools
