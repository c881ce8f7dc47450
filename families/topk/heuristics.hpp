// heuristics.hpp — the top-k launch plan as a pure function of the shape and the device (SM count,
// largest cluster that fits): CTAs per row (cluster size), threads, the algorithm (exact sweeps,
// speculative single sweep, keys in registers, cluster lists) and the shared-memory layout.
// Internal: tests and the bench pass constraints to reach every shape.
#pragma once

#include <cuda.h>

#include "nsajit/spec.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nsajit {
struct TopkArgs;
struct LoadedKernel;
}  // namespace nsajit

namespace nsajit::detail {

// The widest score row nsajit::topk accepts: at 8 CTAs per row (16 for a single row) the
// classify's bitmaps of one 524288-position slice still fit shared memory.
constexpr int kMaxTopkWidth = 1 << 22;

struct TopkLaunchPlan {
  TopkAlgorithm algorithm = TopkAlgorithm::exact_sweeps;
  int cluster_size = 1;  // CTAs per row, a cluster along x when > 1 (1, 2, 4, 8; 16 non-portable)
  int slice = 0;         // positions per CTA, a multiple of 4
  int resident_vecs = 0;  // the slice's first 16-byte vectors kept as keys in shared memory
                          // (slice / 4 + 1: all of it; fewer: the rest is re-read)
  int threads = 512;
  int cand_capacity = 0; // candidates at most (a larger threshold bin is rescanned)
  int slots_per_thread = 0;  // candidate slots of each thread (more go to the overflow list)
  // Dynamic shared memory of the select launch, offsets in 4-byte words (see TopkParams).
  int hist_offset = 0, slots_offset = 0, cand_offset = 0, overflow_warp_offset = 0;
  int bitmap_offset = 0, bitmap_words = 0;  // the classify's above / match bitmaps, bitmap_words each
  bool prefetch_row = false;  // speculative_sweep: each warp asks L2 for its segment of the row at row start
  bool prefetch_slice = false;  // each CTA asks L2 for its slice at kernel start, before it reads the row's
                                // length (rows without row_starts)
  // speculative_sweep: its per-warp lists, from the slots on, over both bitmaps and beyond.
  int list_offset = 0, list_words = 0;
  // cluster_lists (where the lists fit after the exact path's parts with the whole slice kept):
  int cluster_list_rank = 0;  // each CTA lists its first-digit bins down to that of this largest key
                              // (rows of len = width; the kernel: topk_cluster_list_rank)
  // From cluster_list_offset: the message (NSAJIT_TOPK_MSG_KEYS + capacity words), then the warps'
  // lists (keys, then positions: threads / 32 * cluster_warp_capacity words each); the inbox of c
  // messages at cluster_inbox_offset.
  int cluster_list_offset = 0, cluster_list_capacity = 0, cluster_warp_capacity = 0;
  int cluster_inbox_offset = 0;
  unsigned dynamic_smem = 0;  // bytes
};

// speculative_sweep: the entries of each warp's list (templates/topk.cuh: fp32 entries take two
// words, a key and a position; bf16 entries one, templates/topk_bf16.cuh).
inline int topk_list_capacity(const TopkLaunchPlan& plan, ScoreDtype score_dtype) {
  return plan.list_words / (score_dtype == ScoreDtype::bf16 ? 1 : 2) / (plan.threads / 32);
}

// The plan's choices in one line: "algorithm=cluster_lists cluster_size=8 threads=1024 ...".
std::string to_string(const TopkLaunchPlan& plan);

// The kernel variant a plan launches: its threads and algorithm (the top-k spec's tile).
TileConfig topk_tile(const TopkLaunchPlan& plan);

// Constraints on a plan (tests, the bench and tuning; the product passes none): ctas_per_row (the
// cluster size: 1, 2, 4, 8 or 16), threads, cand_capacity > 0, slots_per_thread >= 0, and
// speculate, prefetch_row, prefetch_slice and dense_registers 0 or 1 replace the plan's choice;
// force_streaming keeps nothing in shared memory (every sweep re-reads global memory); algorithm
// demands that algorithm (std::invalid_argument where the shape cannot take it: exact_sweeps,
// speculative_sweep and dense_registers need one CTA per row, cluster_sweeps and cluster_lists
// more). A
// default-constructed value constrains nothing.
struct TopkPlanConstraints {
  int ctas_per_row = 0;
  int threads = 0;
  bool force_streaming = false;
  int cand_capacity = 0;  // e.g. 64: most rows take the rescan path
  int slots_per_thread = -1;  // >= 0: e.g. 0 sends every candidate to the overflow list
  int speculate = -1;  // 0: the exact path only; 1: speculate whenever ctas_per_row is 1 (and
                       // cluster lists whenever they fit)
  int prefetch_row = -1;  // 0 or 1 replace the plan's choice
  int prefetch_slice = -1;  // 0 or 1 replace the plan's choice
  int dense_registers = -1;  // 0 or 1 replace the plan's choice (1: only where 256 threads, C = 1, slice <= 9212)
  std::optional<TopkAlgorithm> algorithm;
};

// The plan for `rows` rows of `width` columns of `score_dtype` scores: rows that fit shared memory
// get one CTA; few long rows are split over a cluster so that the GPU (sm_count SMs) is filled in
// one wave. max_cluster (a power of two <= 16) caps the cluster size (the launch lowers it to 8
// when a 16-CTA cluster does not fit the device). std::invalid_argument for impossible constraints.
TopkLaunchPlan plan_topk_launch(int rows, int width, int topk, ScoreDtype score_dtype, int sm_count,
                                int max_cluster = 16, const TopkPlanConstraints& constraints = {});

// A kernel tile the plan picks, with one shape that gets it ("8 rows x 131072 at 132 SMs").
struct TopkTileChoice {
  TileConfig tile;
  std::string example;
};
// Every tile plan_topk_launch picks for scores of each of `score_dtypes` under `constraints` over a
// grid of batch shapes (powers of two and 1.5x steps, the SM-count edges, the ranges' ends) with
// rows in [rows_lo, rows_hi] and width in [width_lo, width_hi], at each of sm_counts, with 16- and
// 8-CTA cluster limits: what a precompile of those shapes must compile (each tile once, whichever
// dtype picks it). Shapes the constraints cannot take are skipped.
std::vector<TopkTileChoice> topk_tile_choices(int topk, const std::vector<ScoreDtype>& score_dtypes,
                                              const std::vector<int>& sm_counts,
                                              const TopkPlanConstraints& constraints = {}, long long rows_lo = 1,
                                              long long rows_hi = 1 << 16, long long width_lo = 1,
                                              long long width_hi = kMaxTopkWidth);

// Where a launch gets the kernel of a spec: nsajit::kernel; a test may load a probe build of it.
using TopkKernelLoader = const LoadedKernel& (*)(const KernelSpec& spec);

// nsajit::topk with a constrained plan (tests and the bench), its kernel from `load`.
void topk(const TopkArgs& args, const TopkPlanConstraints& constraints, CUstream stream = nullptr,
          TopkKernelLoader load = nullptr);

}  // namespace nsajit::detail
