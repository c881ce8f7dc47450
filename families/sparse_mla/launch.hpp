// launch.hpp — the sparse MLA launch plan and the internal launch that takes one (not installed;
// tests and benchmarks use it to run a variant the heuristics would not pick).
#pragma once

#include <cuda.h>

#include "nsajit/kernels.hpp"
#include "nsajit/spec.hpp"

namespace nsajit::detail {

struct SparseMlaLaunchPlan {
  KernelSpec spec;          // the kernel variant (tile filled, arch of the device)
  int num_splits = 1;       // split-KV partials (grid z); > 1 launches the combine after
  bool programmatic_combine = true;  // the combine as a programmatic dependent launch (PDL)
};

// The plan nsajit::sparse_mla_decode launches `args` with on the current device: the default
// variant for (h_q, topk, kv_dtype, arch), the split count (heuristics.hpp), lowered to what the
// workspace holds. `tile` replaces the variant when its kernel is not automatic. Checks args
// first (InvalidArgument naming `entry`, the caller's entry point); with rows == 0 no driver call
// and nothing to launch.
SparseMlaLaunchPlan plan_sparse_mla(const SparseMlaDecodeArgs& args, const TileConfig& tile = {},
                                    const char* entry = "nsajit::sparse_mla_decode");

// Launches `args` (checked) with `plan` on `stream`.
void launch_sparse_mla(const SparseMlaDecodeArgs& args, const SparseMlaLaunchPlan& plan, CUstream stream);

// nsajit::sparse_mla_decode with an explicit kernel variant (validated like any spec).
inline void sparse_mla_decode(const SparseMlaDecodeArgs& args, const TileConfig& tile, CUstream stream = nullptr) {
  launch_sparse_mla(args, plan_sparse_mla(args, tile), stream);
}

}  // namespace nsajit::detail
