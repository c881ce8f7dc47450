// run_command.cpp — `nsajit run` and `nsajit precompile`.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>

#include "compiler/nvrtc_compiler.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "runtime/driver.hpp"
#include "tools/commands.hpp"
#include "tools/model_config.hpp"
#include "tools/tuning_config.hpp"

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

Arch target_arch(const std::string& arch) {
  const std::string text = arch.empty() ? "sm_90a" : arch;
  try {
    const Arch a = parse_arch(text);
    check_arch_supported(a);
    return a;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(arch.empty() ? fmt::format("default target sm_90a: {}", e.what())
                                       : fmt::format("--arch {}: {}", arch, e.what()));
  }
}

std::string no_gpu_reason() {
  try {
    int count = 0;
    if (driver::api().cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) return "no CUDA device";
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

int precompile_command(const RunOptions& options) {
  const Arch arch = target_arch(options.arch);
  print_config(options.config);
  // The databases the run's processes may read: the shipped ones and $NSAJIT_TUNING_DB's.
  const std::vector<tuning::TuningDb> env_dbs = read_tuning_dbs({}, "");
  std::vector<const tuning::TuningDb*> dbs;
  for (const tuning::TuningDb& db : tuning::shipped_tuning_dbs()) dbs.push_back(&db);
  for (const tuning::TuningDb& db : env_dbs) dbs.push_back(&db);
  for (const KernelSpec& spec : decode_step_specs(options.config, arch, dbs)) precompile(spec);
  print_jit_records();
  int not_cached = 0;
  for (const KernelRecord& r : jit_records()) not_cached += !r.on_disk;
  if (not_cached > 0) {
    fmt::print(stderr, "nsajit: {} kernel(s) could not be written to the cache {} (see the messages above)\n",
               not_cached, cache_dir());
    return kExitFailed;
  }
  return kExitOk;
}

int run_command(const RunOptions& options) {
  const Arch arch = target_arch(options.arch);  // a bad --arch is refused with or without a GPU
  const std::uint64_t host_bytes = std::uint64_t(::sysconf(_SC_PHYS_PAGES)) * std::uint64_t(::sysconf(_SC_PAGESIZE));
  check_run_host_memory(options.config, host_bytes);  // before anything is allocated or compiled
  if (!driver::available()) {
    const std::string why = no_gpu_reason();
    if (options.require_gpu) {
      fmt::print(stderr, "nsajit run: no GPU ({}); nothing was checked (--require-gpu: exit {})\n", why,
                 int(kExitNoGpu));
      return kExitNoGpu;
    }
    fmt::print("no GPU ({}): compiling the config's kernels into the cache instead (target {})\n", why,
               to_string(arch));
    const int code = precompile_command(options);
    fmt::print("nsajit run: NOTHING WAS CHECKED: there is no GPU, so no kernel ran; the kernels were only "
               "{} (use --require-gpu to make this exit {})\n",
               code == kExitOk ? "put into the cache (compiled or found there)" : "compiled", int(kExitNoGpu));
    return code;
  }
  print_config(options.config);
  return run_decode_step(options.config);
}

}  // namespace nsajit::tools
