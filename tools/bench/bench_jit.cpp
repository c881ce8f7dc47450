// bench_jit.cpp — `nsajit bench jit`: what the JIT itself costs. Cold NVRTC compile of one kernel
// of each family (and each variant the fleet precompile compiles for it), a disk-cache hit per
// kernel (generate the source, key it, read and verify the entry; on a GPU also load the module),
// and the host cost of a warm dispatch through the public API against a raw cuLaunchKernel of
// the same kernel. The GPU cases are skipped (and say so) without a GPU.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include "cache/cubin_cache.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "generator/family.hpp"
#include "generator/generator.hpp"
#include "nsajit/jit.hpp"
#include "nsajit/kernels.hpp"
#include "families/topk/heuristics.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/driver.hpp"
#include "runtime/runtime.hpp"
#include "runtime/tuning_db.hpp"
#include "templates/kernel_params.h"
#include "tools/bench/bench_common.hpp"

namespace nsajit::tools::bench {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One kernel of each family, and the variants of the heavy ones (every top-k tile the launch plan
// picks on this GPU, plain and fused; sparse MLA's wgmma and mma.sync kernels, bf16 and FP8).
std::vector<KernelSpec> bench_specs(Arch arch, int sm_count) {
  std::vector<KernelSpec> specs = {
      {.family = Family::index_transform, .topk = 2048, .page_size = 64},
      {.family = Family::sparse_mla_decode, .h_q = 128, .topk = 2048},
      {.family = Family::sparse_mla_decode, .h_q = 128, .topk = 2048, .kv_dtype = KvDtype::fp8_e4m3},
      {.family = Family::sparse_mla_decode, .h_q = 16, .topk = 2048},
      {.family = Family::sparse_mla_decode, .h_q = 16, .topk = 2048, .kv_dtype = KvDtype::fp8_e4m3},
      {.family = Family::sparse_mla_combine},
      {.family = Family::fp8_kv_quantize, .page_size = 64},
      {.family = Family::fp8_kv_gather, .page_size = 64},
  };
  for (const detail::TopkTileChoice& t : detail::topk_tile_choices(2048, {ScoreDtype::fp32}, {sm_count})) {
    specs.push_back({.family = Family::topk, .topk = 2048, .tile = t.tile});
    specs.push_back({.family = Family::topk, .topk = 2048, .page_size = 64, .fused_transform = true, .tile = t.tile});
  }
  for (KernelSpec& s : specs) {
    s.arch = arch;
    s = with_default_tile(s);
  }
  return specs;
}

// Host microseconds per launch of `launch_one`, enqueued in batches that never fill the launch
// queue (the GPU drains it between batches), interleaved with `other` to share drift.
struct DispatchTimes {
  double api_us, raw_us;
  long long launches;
};
DispatchTimes time_dispatch(const std::function<void()>& api, const std::function<void()>& raw, CUstream stream) {
  constexpr int kBatch = 200, kRounds = 600;  // 120000 launches each
  std::vector<double> api_us, raw_us;
  for (int w = 0; w < 1000; ++w) api(), raw();  // warm-up
  NSAJIT_CU(cuStreamSynchronize, stream);
  for (int r = 0; r < kRounds; ++r) {
    auto t = Clock::now();
    for (int i = 0; i < kBatch; ++i) api();
    api_us.push_back(us_since(t) / kBatch);
    NSAJIT_CU(cuStreamSynchronize, stream);
    t = Clock::now();
    for (int i = 0; i < kBatch; ++i) raw();
    raw_us.push_back(us_since(t) / kBatch);
    NSAJIT_CU(cuStreamSynchronize, stream);
  }
  return {median(api_us), median(raw_us), (long long)kBatch * kRounds};
}

}  // namespace

int bench_jit(const BenchOptions& options) {
  const bool gpu = driver::available();
  Arch arch{90, 'a'};
  int sm_count = 132;  // no GPU: the H200's
  if (gpu) {
    arch = spec_for_current_device({.family = Family::sparse_mla_combine}).arch;
    sm_count = driver::current_context_info().sm_count;
  }
  std::vector<Case> cases;
  const std::string dir = fmt::format("{}/jit-cache-{}", options.work_dir, ::getpid());
  std::filesystem::create_directories(dir);
  const CubinCache cache(dir);

  // Cold compile: NVRTC on the generated source (no cache), one run per kernel.
  for (const KernelSpec& spec : bench_specs(arch, sm_count)) {
    const std::string name = readable_name(spec);
    if (!options.only.empty() && name.find(options.only) == std::string::npos) continue;
    const std::string source = render_source(spec);
    const std::vector<std::string> nvrtc = nvrtc_options(spec.arch);
    const auto t = Clock::now();
    const CompileResult r = compile_cubin(name, source, nvrtc);
    const double compile_us = us_since(t);
    const CacheKey key = make_cache_key({.nsajit_version = version(), .nvrtc_version = nvrtc_version(),
                                         .arch = to_string(spec.arch), .options = nvrtc, .source = source});
    cache.store(name, key, r.cubin);
    Case c;
    c.name = "cold compile " + name;
    c.params = {{"family", to_string(spec.family)}, {"spec", canonical_text(spec)}, {"cubin_bytes", r.cubin.size()},
                {"source_bytes", source.size()}, {"runs", 1}};
    c.nsajit_us = compile_us;
    c.baseline = "none";
    c.check = "pass";
    cases.push_back(c);

    // Disk hit as a fresh process takes it: generate, key, read and verify (median of 20).
    std::vector<double> host_us;
    std::size_t loaded_bytes = 0;
    for (int i = 0; i < 20; ++i) {
      const auto t0 = Clock::now();
      const std::string s = render_source(spec);
      const CacheKey k = make_cache_key({.nsajit_version = version(), .nvrtc_version = nvrtc_version(),
                                         .arch = to_string(spec.arch), .options = nvrtc_options(spec.arch),
                                         .source = s});
      const auto cubin = cache.load(name, k);
      host_us.push_back(us_since(t0));
      loaded_bytes = cubin ? cubin->size() : 0;
    }
    Case h;
    h.name = "disk hit " + name;
    h.params = {{"host_us", median(host_us)}, {"cubin_bytes", loaded_bytes}, {"runs", 20}};
    h.nsajit_us = median(host_us);
    h.baseline = "none";
    h.check = loaded_bytes == r.cubin.size() ? "pass" : "FAIL: the entry did not load back";
    // On a GPU, plus loading the module and its function (what the first launch in a context adds).
    if (gpu && spec.arch == arch) {
      driver::current_context();
      std::vector<double> module_us;
      const auto cubin = cache.load(name, key);
      for (int i = 0; i < 20 && cubin; ++i) {
        const auto t0 = Clock::now();
        CUmodule module = nullptr;
        CUfunction function = nullptr;
        NSAJIT_CU(cuModuleLoadData, &module, cubin->data());  // kept: a few MB for the run
        NSAJIT_CU(cuModuleGetFunction, &function, module, traits(spec.family).kernel_entry);
        module_us.push_back(us_since(t0));
      }
      h.params["module_load_us"] = median(module_us);
      h.nsajit_us += median(module_us);
    }
    cases.push_back(h);
  }
  std::filesystem::remove_all(dir);

  if (!gpu) {
    fmt::print("bench jit: no GPU: the warm-dispatch case and module loads are skipped\n");
  } else if (options.only.empty() || std::string("warm dispatch").find(options.only) != std::string::npos) {
    // Warm dispatch: nsajit::index_transform (argument checks, spec, lookup, launch) against a
    // raw cuLaunchKernel of the same function and parameters.
    constexpr int kTopk = 2048, kWidth = 64, kPage = 64;
    DeviceBuffer<std::int32_t> idx(kTopk), out(kTopk), table(kWidth);
    IndexTransformArgs args{.mode = IndexMode::decode, .topk_indices = idx.get(), .out = out.get(), .rows = 1,
                            .topk = kTopk, .page_table = table.get(), .page_table_width = kWidth,
                            .page_size = kPage, .num_requests = 1};
    CUstream stream = nullptr;
    NSAJIT_CU(cuStreamCreate, &stream, 0);
    index_transform(args, stream);  // compiles or loads once
    const KernelSpec spec = spec_for_current_device(
        {.family = Family::index_transform, .topk = kTopk, .page_size = kPage, .mode = IndexMode::decode});
    const LoadedKernel& k = kernel(spec);
    IndexTransformParams p{};
    p.topk_indices = idx.get();
    p.out = out.get();
    p.page_table = table.get();
    p.page_table_row_stride = kWidth;
    p.max_position = (long long)kWidth * kPage;
    p.rows = 1;
    p.num_requests = 1;
    void* kargs[] = {&p};
    const unsigned block = unsigned(spec.tile.threads);
    const DispatchTimes d = time_dispatch(
        [&] { index_transform(args, stream); },
        [&] { NSAJIT_CU(cuLaunchKernel, k.function, 1, 1, 1, block, 1, 1, 0, stream, kargs, nullptr); }, stream);
    NSAJIT_CU(cuStreamSynchronize, stream);
    NSAJIT_CU(cuStreamDestroy, stream);
    Case c;
    c.name = "warm dispatch index_transform";
    c.params = {{"launches", d.launches}, {"batch", 200}, {"overhead_us", d.api_us - d.raw_us},
                {"note", "host time per launch, median over batches of 200 (no sync inside a batch)"}};
    c.nsajit_us = d.api_us;
    c.baseline = "raw cuLaunchKernel";
    c.baseline_us = d.raw_us;
    c.check = "pass";
    cases.push_back(c);

    // What the tuning database adds to a warm top-k or sparse MLA dispatch: its bucket lookups
    // (after the first call's resolution), per call, with the database in use.
    const int sm_count = driver::current_context_info().sm_count;
    constexpr int kLookups = 1000000;
    std::size_t found = 0;
    tuning::active_tuning_db();
    const auto t = Clock::now();
    for (int i = 0; i < kLookups; ++i) {
      const int rows = 1 + (i & 255);
      found += tuning::tuned_sparse_mla(rows, 128, 1, 2048, KvDtype::bf16, false, sm_count) != nullptr;
      found += detail::tuned_topk_constraints(rows, 131072, 2048, ScoreDtype::fp32, sm_count) != nullptr;
    }
    Case l;
    l.name = "tuning lookup (sparse MLA + top-k)";
    l.nsajit_us = us_since(t) / kLookups;
    l.params = {{"lookups", kLookups}, {"found", found}, {"database", tuning_db_in_use()},
                {"note", "host time of both families' bucket lookups per call pair"}};
    l.baseline = "none";
    l.check = "pass";
    cases.push_back(l);
  }
  write_results({.family = "jit", .command = options.command}, cases, options.out);
  return 0;
}

}  // namespace nsajit::tools::bench
