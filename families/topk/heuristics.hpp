// heuristics.hpp — the top-k launch plan as a pure function of the shape and the device (SM count,
// largest cluster that fits): CTAs per row (cluster size), threads, the algorithm (exact sweeps,
// speculative single sweep, keys in registers, cluster lists) and the shared-memory layout.
// Internal: tests and the bench pass constraints to reach every shape.
#pragma once

#include <cuda.h>

namespace nsajit { struct TopkArgs; }

namespace nsajit::detail {

// The widest score row nsajit::topk accepts: at 8 CTAs per row (16 for a single row) the
// classify's bitmaps of one 524288-position slice still fit shared memory.
constexpr int kMaxTopkWidth = 1 << 22;

struct TopkLaunchPlan {
  int ctas_per_row = 1;  // = cluster size along x when > 1 (1, 2, 4, 8; 16 non-portable)
  int slice = 0;         // positions per CTA, a multiple of 4
  int resident_vecs = 0;  // the slice's first 16-byte vectors kept as keys in shared memory
                          // (slice / 4 + 1: all of it; fewer: the rest is re-read)
  int threads = 512;
  int cand_capacity = 0; // candidates at most (a larger threshold bin is rescanned)
  int slots_per_thread = 0;  // candidate slots of each thread (more go to the overflow list)
  // Dynamic shared memory of the select launch, offsets in 4-byte words (see TopkParams).
  int hist_offset = 0, slots_offset = 0, cand_offset = 0, overflow_warp_offset = 0;
  int bitmap_offset = 0, bitmap_words = 0;  // the classify's above / match bitmaps, bitmap_words each
  bool speculate = false;  // one CTA per row: the speculative single sweep first (templates/topk_speculative.cuh)
  bool prefetch_row = false;  // speculate: each warp asks L2 for its segment of the row at row start
  bool prefetch_slice = false;  // each CTA asks L2 for its slice at kernel start, before it reads the row's
                                // length (rows without row_starts)
  bool dense_registers = false;  // 256 threads, one CTA per row, slices <= 9212: keys held in registers
  int list_offset = 0, list_words = 0;  // its per-warp lists: from the slots on, over both bitmaps and beyond
  // C > 1 CTAs per row: the speculative cluster selection first (templates/topk_cluster_lists.cuh),
  // where the lists fit after the exact path's parts with the whole slice kept.
  int cluster_lists = 0;  // 0, 1; 2 (constraints.strict_cluster_lists): fallbacks write -2
  int cluster_list_rank = 0;  // each CTA lists its first-digit bins down to that of this largest key
                              // (rows of len = width; the kernel: topk_cluster_list_rank)
  // From cluster_list_offset: the message (NSAJIT_TOPK_MSG_KEYS + capacity words), then the warps'
  // lists (keys, then positions: threads / 32 * cluster_warp_capacity words each); the inbox of c
  // messages at cluster_inbox_offset.
  int cluster_list_offset = 0, cluster_list_capacity = 0, cluster_warp_capacity = 0;
  int cluster_inbox_offset = 0;
  unsigned dynamic_smem = 0;  // bytes
};

// Constraints on a plan (tests and the bench; the product passes none): ctas_per_row, threads, cand_capacity > 0, slots_per_thread
// >= 0, and speculate, prefetch_row, prefetch_slice and dense_registers 0 or 1 replace the plan's choice
// (ctas_per_row must be 1, 2, 4, 8 or 16); force_streaming keeps nothing in shared memory (every
// sweep re-reads global memory); strict_cluster_lists makes a row whose cluster lists do not
// hold its selection write -2 to its first slot instead of taking the exact path (so that a test
// sees which path ran). A default-constructed value constrains nothing.
struct TopkPlanConstraints {
  int ctas_per_row = 0;
  int threads = 0;
  bool force_streaming = false;
  int cand_capacity = 0;  // e.g. 64: most rows take the rescan path
  int slots_per_thread = -1;  // >= 0: e.g. 0 sends every candidate to the overflow list
  int speculate = -1;  // 0: the exact path only; 1: speculate whenever ctas_per_row is 1 (and
                       // cluster lists whenever they fit)
  bool strict_cluster_lists = false;
  int prefetch_row = -1;  // 0 or 1 replace the plan's choice
  int prefetch_slice = -1;  // 0 or 1 replace the plan's choice
  int dense_registers = -1;  // 0 or 1 replace the plan's choice (1: only where 256 threads, C = 1, slice <= 9212)
};

// The plan for `rows` rows of `width` columns: rows that fit shared memory get one CTA; few long
// rows are split over a cluster so that the GPU (sm_count SMs) is filled in one wave.
// max_cluster (a power of two <= 16) caps the cluster size (the launch lowers it to 8 when a
// 16-CTA cluster does not fit the device). std::invalid_argument for impossible constraints.
TopkLaunchPlan plan_topk_launch(int rows, int width, int topk, int sm_count, int max_cluster = 16,
                                const TopkPlanConstraints& constraints = {});

// nsajit::topk with a constrained plan (tests and the bench).
void topk(const TopkArgs& args, const TopkPlanConstraints& constraints, CUstream stream = nullptr);

}  // namespace nsajit::detail
