// sass_specs.cpp — renders and compiles (NVRTC, no GPU) every kernel the default DeepSeek-V3.2
// specs render, writing <dir>/<key>.cubin; scripts/compare_sass.sh disassembles and diffs two
// such sets. Keys name the kernel, not the spec's spelling, so sets from different commits compare.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <atomic>

#include "compiler/nvrtc_compiler.hpp"
#include "families/topk/heuristics.hpp"
#include "nsajit/jit.hpp"
#include "nsajit/spec.hpp"

using namespace nsajit;

namespace {

std::vector<std::pair<std::string, KernelSpec>> kernels() {
  std::vector<std::pair<std::string, KernelSpec>> out;
  const int topk = 2048;
  // Sparse MLA (decode and prefill rows share one kernel): h_q 8..128 = tp 16..1 on 128 heads.
  for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) {
    const std::string d = kv == KvDtype::bf16 ? "bf16" : "fp8";
    for (int h : {8, 16, 32, 64, 128}) {
      KernelSpec s{.family = Family::sparse_mla_decode, .h_q = h, .topk = topk, .kv_dtype = kv};
      out.push_back({"mla.default.h" + std::to_string(h) + "." + d, with_default_tile(s)});
    }
    // Variants the tests and the tuning space reach: mma_sync without producer warps, bf16 wgmma
    // with one producer warpgroup below 64 heads per CTA.
    for (int h : {8, 16, 32, 64, 128}) {
      KernelSpec s{.family = Family::sparse_mla, .h_q = h, .topk = topk, .kv_dtype = kv,
                   .tile = {.kernel = MlaKernel::mma_sync, .producer_warps = 0}};
      out.push_back({"mla.variant.mma_sync.h" + std::to_string(h) + "." + d, with_default_tile(s)});
      if (h == 8 || h >= 64 || kv != KvDtype::bf16) continue;
      s.tile = {.kernel = MlaKernel::wgmma, .producer_warps = 4};
      out.push_back({"mla.variant.wgmma1.h" + std::to_string(h) + "." + d, with_default_tile(s)});
    }
  }
  // FP8 at up to 16 heads a CTA: the 512-thread kernel (precise calls' default) beside the direct
  // kernel (the default's).
  for (int h : {8, 16}) {
    KernelSpec s{.family = Family::sparse_mla, .h_q = h, .topk = topk, .kv_dtype = KvDtype::fp8_e4m3,
                 .tile = {.kernel = MlaKernel::mma_sync, .producer_warps = 8}};
    out.push_back({"mla.variant.pw8.h" + std::to_string(h) + ".fp8", with_default_tile(s)});
  }
  // The seesaw schedule of the bf16 wgmma kernel (64 heads per CTA; h_q 128: two head groups).
  for (int h : {64, 128}) {
    KernelSpec s{.family = Family::sparse_mla, .h_q = h, .topk = topk, .kv_dtype = KvDtype::bf16,
                 .tile = {.kernel = MlaKernel::wgmma, .producer_warps = 4, .schedule = MlaSchedule::seesaw}};
    out.push_back({"mla.seesaw.h" + std::to_string(h) + ".bf16", with_default_tile(s)});
  }
  // Top-k: every thread count the launch plan picks, plain, sorted, fused (each transform mode).
  // Every kernel tile top-k's plan picks on the H200 (threads and algorithm) for either score
  // dtype, in each form.
  for (const detail::TopkTileChoice& c : detail::topk_tile_choices(topk, {ScoreDtype::fp32, ScoreDtype::bf16}, {132})) {
    const TileConfig tile = c.tile;
    const std::string t = ".t" + std::to_string(tile.threads) + "." + to_string(tile.algorithm);
    out.push_back({"topk.plain" + t, KernelSpec{.family = Family::topk, .topk = topk, .tile = tile}});
    out.push_back({"topk.sorted" + t, KernelSpec{.family = Family::topk, .topk = topk, .sorted = true, .tile = tile}});
    // bf16 scores (score_dtype): the plain kernel and one fused form, to compare with fp32's.
    out.push_back({"topk.plain.bf16" + t,
                   KernelSpec{.family = Family::topk, .topk = topk, .score_dtype = ScoreDtype::bf16, .tile = tile}});
    out.push_back({"topk.fused.decode.ps64.bf16" + t,
                   KernelSpec{.family = Family::topk, .topk = topk, .page_size = 64, .mode = IndexMode::decode,
                              .fused_transform = true, .score_dtype = ScoreDtype::bf16, .tile = tile}});
    out.push_back({"topk.fused.decode.ps64" + t,
                   KernelSpec{.family = Family::topk, .topk = topk, .page_size = 64, .mode = IndexMode::decode,
                              .fused_transform = true, .tile = tile}});
    out.push_back({"topk.fused.decode.ps1.n2" + t,
                   KernelSpec{.family = Family::topk, .topk = topk, .page_size = 1, .mode = IndexMode::decode,
                              .next_n = 2, .fused_transform = true, .tile = tile}});
    out.push_back({"topk.fused.prefill.ps64" + t,
                   KernelSpec{.family = Family::topk, .topk = topk, .page_size = 64, .mode = IndexMode::prefill,
                              .fused_transform = true, .tile = tile}});
    out.push_back({"topk.fused.ragged" + t,
                   KernelSpec{.family = Family::topk, .topk = topk, .mode = IndexMode::ragged,
                              .fused_transform = true, .tile = tile}});
    // The dense kernel's bf16 loads are its own (topk_dense.cuh): every form its tests compile.
    if (tile.algorithm != TopkAlgorithm::dense_registers) continue;
    out.push_back({"topk.sorted.bf16" + t, KernelSpec{.family = Family::topk, .topk = topk, .sorted = true,
                                                      .score_dtype = ScoreDtype::bf16, .tile = tile}});
    out.push_back({"topk.fused.prefill.ps64.bf16" + t,
                   KernelSpec{.family = Family::topk, .topk = topk, .page_size = 64, .mode = IndexMode::prefill,
                              .fused_transform = true, .score_dtype = ScoreDtype::bf16, .tile = tile}});
    out.push_back({"topk.fused.ragged.bf16" + t,
                   KernelSpec{.family = Family::topk, .topk = topk, .mode = IndexMode::ragged,
                              .fused_transform = true, .score_dtype = ScoreDtype::bf16, .tile = tile}});
  }

  for (IndexMode m : {IndexMode::decode, IndexMode::prefill})
    for (int ps : {1, 64})
      out.push_back({"transform." + to_string(m) + ".ps" + std::to_string(ps),
                     KernelSpec{.family = Family::index_transform, .topk = topk, .page_size = ps, .mode = m}});
  out.push_back({"transform.ragged", KernelSpec{.family = Family::index_transform, .topk = topk, .mode = IndexMode::ragged}});
  for (int ps : {1, 64}) {
    out.push_back({"fp8_quantize.ps" + std::to_string(ps), KernelSpec{.family = Family::fp8_kv_quantize, .page_size = ps}});
    out.push_back({"fp8_gather.ps" + std::to_string(ps), KernelSpec{.family = Family::fp8_kv_gather, .page_size = ps}});
  }
  out.push_back({"combine", KernelSpec{.family = Family::sparse_mla_combine}});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: sass_specs OUT_DIR [KEY_SUBSTRING]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::string only = argc > 2 ? argv[2] : "";
  // SASS_MLA_PRECISE=1: the sparse MLA kernels with precise = true under the same keys, to compare
  // them with the default-precision kernels of a commit before the option (they must not change).
  const char* precise_env = std::getenv("SASS_MLA_PRECISE");
  const bool precise = precise_env != nullptr && std::string(precise_env) == "1";
  const char* lineinfo_env = std::getenv("SASS_LINEINFO");
  const bool lineinfo = lineinfo_env != nullptr && std::string(lineinfo_env) == "1";
  std::vector<std::pair<std::string, KernelSpec>> list;
  for (auto& k : kernels()) {
    if (precise && k.second.family == Family::sparse_mla) {
      if (k.second.tile.schedule == MlaSchedule::seesaw) continue;  // bf16 P only
      k.second.precise = true;
    }
    if (only.empty() || k.first.find(only) != std::string::npos) list.push_back(k);
  }
  std::atomic<size_t> next{0};
  std::atomic<int> failures{0};
  auto work = [&] {
    for (size_t i; (i = next++) < list.size();) {
      const auto& [key, spec] = list[i];
      try {
        const std::string source = generate_source(spec);
        std::vector<std::string> options = nvrtc_options(spec.arch);
        if (lineinfo) {  // source lines for scripts/sass_phases.py (the SASS is unchanged)
          options.push_back("-lineinfo");
          std::ofstream(dir + "/" + key + ".cu") << source;
        }
        const CompileResult r = compile_cubin(key, source, options);
        std::ofstream(dir + "/" + key + ".cubin", std::ios::binary).write(r.cubin.data(), r.cubin.size());
        std::ofstream(dir + "/" + key + ".spec") << canonical_text(with_default_tile(spec)) << "\n";
        std::printf("%s %.0f ms\n", key.c_str(), r.compile_ms);
        std::fflush(stdout);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", key.c_str(), e.what());
        ++failures;
      }
    }
  };
  const int n = argc > 3 ? std::atoi(argv[3]) : 2;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  return failures ? 1 : 0;
}
