// sparse_mla_kernels.hpp — which of the two sparse-MLA kernels a spec selects, shared by the
// family's traits (generator/families/sparse_mla_decode.cpp) and its launch
// (runtime/sparse_mla_decode.cpp), whose grids differ.
#pragma once

#include "nsajit/spec.hpp"

namespace nsajit {

constexpr int kSparseMlaWgmmaThreads = 384;     // 3 warpgroups: WG0, WG1, one producer
constexpr int kSparseMlaWgmmaFp8Threads = 512;  // FP8 at 64 heads per CTA: two producer warpgroups

// The wgmma kernel's thread count for a CTA of `heads_per_cta` heads: 512 for FP8 at 64 heads
// (0-3 % faster than 384 on the 64/128-head FP8 shapes, H200, docs/notes/sparse_mla.md
// experiment 38), else 384. The default tile and the NSAJIT_MLA_WGMMA override both use it.
inline int sparse_mla_wgmma_threads(KvDtype kv_dtype, int heads_per_cta) {
  return kv_dtype == KvDtype::fp8_e4m3 && heads_per_cta == 64 ? kSparseMlaWgmmaFp8Threads : kSparseMlaWgmmaThreads;
}

// The warpgroup-MMA kernel (templates/sparse_mla_wgmma.cuh; grid x = rows x head groups): tile
// threads 384, or 512 at 64 heads per CTA (FP8, two producer warpgroups; 512 with at most 16 heads
// per CTA is the mma.sync kernel with eight producer warps). Otherwise the mma.sync kernel
// (templates/sparse_mla_decode.cuh; grid (rows, head groups)).
inline bool sparse_mla_uses_wgmma(const KernelSpec& spec) {
  return spec.tile.threads == kSparseMlaWgmmaThreads ||
         (spec.tile.threads == kSparseMlaWgmmaFp8Threads && spec.tile.heads_per_cta == 64);
}

}  // namespace nsajit
