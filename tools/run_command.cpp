// run_command.cpp — `nsajit run` and `nsajit precompile`.
#include <fmt/format.h>

#include "nsajit/jit.hpp"
#include "runtime/driver.hpp"
#include "tools/commands.hpp"

namespace nsajit::tools {
namespace {

const char* describe(CubinSource s) {
  switch (s) {
    case CubinSource::memory: return "memory hit";
    case CubinSource::disk_cache: return "disk-cache hit";
    case CubinSource::compiled: return "compiled (miss)";
  }
  return "?";
}

void print_config(const ModelConfig& c) {
  fmt::print("config: {} — h_q {} (num_attention_heads {} / tp {}), d_qk {}, d_v {}, topk {}, page_size {}, "
             "sm_scale {}\n",
             c.name, c.h_q(), c.num_attention_heads, c.tp, c.kv_lora_rank + c.qk_rope_head_dim, c.kv_lora_rank,
             c.index_topk, c.page_size, c.sm_scale);
  fmt::print("nsajit {}, NVRTC {}, cache {}\n", version(), nvrtc_version(), cache_dir());
}

}  // namespace

void print_jit_records() {
  int hits = 0, misses = 0;
  double compile_ms = 0;
  fmt::print("{:<52} {:>16} {:>11} {:>9} {:>9}\n", "kernel", "cubin", "compile ms", "load ms", "bytes");
  for (const KernelRecord& r : jit_records()) {
    fmt::print("{:<52} {:>16} {:>11.1f} {:>9.1f} {:>9}\n", r.name, describe(r.source), r.compile_ms, r.load_ms,
               r.cubin_bytes);
    hits += r.source != CubinSource::compiled;
    misses += r.source == CubinSource::compiled;
    compile_ms += r.compile_ms;
  }
  fmt::print("jit: {} kernels, {} disk-cache hits, {} compiled ({:.0f} ms compiling)\n", hits + misses, hits, misses,
             compile_ms);
}

int precompile_command(const RunOptions& options) {
  print_config(options.config);
  const Arch arch = parse_arch(options.arch.empty() ? "sm_90a" : options.arch);
  for (const KernelSpec& spec : decode_step_specs(options.config, arch)) precompile(spec);
  print_jit_records();
  int not_cached = 0;
  for (const KernelRecord& r : jit_records()) not_cached += !r.on_disk;
  if (not_cached > 0) {
    fmt::print(stderr, "nsajit: {} kernel(s) could not be written to the cache {} (see the messages above)\n",
               not_cached, cache_dir());
    return 1;
  }
  return 0;
}

int run_command(const RunOptions& options) {
  if (!driver::available()) {
    fmt::print("no GPU: libcuda.so.1 or a CUDA device is missing; compiling the config's kernels into the "
               "cache instead (target {})\n",
               options.arch.empty() ? "sm_90a" : options.arch);
    return precompile_command(options);
  }
  print_config(options.config);
  return run_decode_step(options.config);
}

}  // namespace nsajit::tools
