// commands.hpp — the subcommands of the nsajit tool.
#pragma once

#include <string>

#include "tools/model_config.hpp"

namespace nsajit::tools {

// The tool's exit codes (also in `nsajit --help` and the README).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,  // a check, a kernel, a compile or the cache failed
  kExitUsage = 2,   // bad usage or input (flags, config file, arch)
  kExitNoGpu = 3,   // no GPU where one is required (bench, run --require-gpu)
};

struct RunOptions {
  ModelConfig config;
  std::string arch;          // "" = the GPU's arch, else sm_90a when there is no GPU
  bool require_gpu = false;  // run: without a GPU, exit kExitNoGpu instead of only compiling
};

// `nsajit run`: on a GPU, one decode step of the config through the JIT (top-k -> transform ->
// sparse MLA decode), checked against the CPU reference and timed. Without a GPU, precompiles
// the config's kernels into the cache and says that nothing was checked (or, with require_gpu,
// exits kExitNoGpu). Returns the exit code.
int run_command(const RunOptions& options);

// `nsajit precompile`: compiles the config's kernels into the cache; needs no GPU.
int precompile_command(const RunOptions& options);

// The arch the kernels are compiled for without a GPU: `arch` (from --arch) or sm_90a, parsed and
// checked against this NVRTC. Throws InvalidArgument naming --arch and the value.
Arch target_arch(const std::string& arch);

// Why there is no usable GPU ("" when there is one): the driver's or the loader's message.
std::string no_gpu_reason();

// The GPU part of `nsajit run` (tools/decode_step.cpp). Returns the exit code.
int run_decode_step(const ModelConfig& config);

// Prints the JIT records of this process (hits, misses, compile times) as a table.
void print_jit_records();

}  // namespace nsajit::tools
