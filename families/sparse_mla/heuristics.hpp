// heuristics.hpp — the sparse MLA family's choices as pure functions of the shape and the device:
// the kernel variant (spec tile) and the split-KV count. No driver call, no global state.
#pragma once

#include <algorithm>

#include "nsajit/spec.hpp"
#include "templates/kernel_params.h"

namespace nsajit::sparse_mla {

inline constexpr int kMaxSplits = 64;
// Cluster combine (MlaCombine::cluster, the seesaw only): a row and head group's two splits run as
// one 2-CTA cluster and merge O through distributed shared memory (no partials, no combine kernel).
inline constexpr int kClusterSplits = kMlaClusterSplits;
inline constexpr int kBlockTokens = 64;  // KV tokens per tile (the kernels' schedules assume it)
// The seesaw schedule's per-call limits (validation in traits.cpp, the tuning lookup's
// choice_serves): its KV tiles go in pairs, and its P is one bf16 rounding (never precise).
inline constexpr int kSeesawTopkMultiple = 2 * kBlockTokens;
inline bool seesaw_takes(int topk, bool precise) { return topk % kSeesawTopkMultiple == 0 && !precise; }

// Query heads one CTA handles: all of h_q up to 64.
inline int default_heads_per_cta(int h_q) { return h_q < 64 ? (h_q > 0 ? h_q : 64) : 64; }

// Fills the tile fields left at their defaults (kernel, producer_warps, heads_per_cta,
// block_tokens, threads) from h_q, kv_dtype and arch; reads a tile given only as threads.
void fill_default_tile(KernelSpec& spec);

// Threads per CTA of a variant: 8 MMA warps (mma_sync) or 2 MMA warpgroups (wgmma), plus producers.
// (In 64 bits, clamped: an absurd producer_warps from spec text must not overflow before validate names it.)
inline int threads_of(int producer_warps) {
  return int(std::clamp(256LL + 32LL * producer_warps, 0LL, 1LL << 30));
}

// Split count with no forced count: 1 when rows x head groups CTAs already keep >= 3/4 of the
// sm_count SMs busy, else enough splits to fill them, keeping >= 2 tiles per split, <= kMaxSplits.
int auto_splits(long long rows, int h_q, int topk, int sm_count);

// The schedule of a filled spec (fill_default_tile): seesaw wherever that kernel takes it (wgmma, 64
// heads per CTA, bf16 KV, seesaw_takes), whatever the rows and splits (H200: 4-11 % faster than
// single at 2-16 splits, level or faster unsplit); else single.
MlaSchedule default_schedule(const KernelSpec& filled);

// Workspace bytes of `splits` partial results (0 without a split).
inline std::size_t workspace_bytes(int rows, int h_q, int splits) {
  if (splits <= 1) return 0;
  return std::size_t(splits) * std::size_t(rows) * std::size_t(h_q) * (kMlaDimV + 2) * 4;  // fp32 o, lse, max
}

}  // namespace nsajit::sparse_mla
