// sparse_mla_kernels.hpp — which of the two sparse-MLA kernels a spec selects, shared by the
// family's traits (generator/families/sparse_mla_decode.cpp) and its launch
// (runtime/sparse_mla_decode.cpp), whose grids differ.
#pragma once

#include "nsajit/spec.hpp"

namespace nsajit {

// The warpgroup-MMA kernel (templates/sparse_mla_wgmma.cuh; grid x = rows x head groups): tile
// threads 384, or 512 at 64 heads per CTA (FP8, two producer warpgroups; 512 with at most 16 heads
// per CTA is the mma.sync kernel with eight producer warps). Otherwise the mma.sync kernel
// (templates/sparse_mla_decode.cuh; grid (rows, head groups)).
inline bool sparse_mla_uses_wgmma(const KernelSpec& spec) {
  return spec.tile.threads == 384 || (spec.tile.threads == 512 && spec.tile.heads_per_cta == 64);
}

}  // namespace nsajit
