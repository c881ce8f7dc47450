// heuristics.cpp — the top-k launch plan (why each rule: docs/design/topk.md).
#include "families/topk/heuristics.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>

#include "templates/kernel_params.h"

namespace nsajit::detail {
namespace {

constexpr int kTargetSlice = 32768;   // positions per CTA before a row is split further
constexpr int kMinSpreadSlice = 8192; // few rows: split while slices stay at least this long
constexpr int kHistWords = 4096;      // first-digit histogram (templates/topk_radix.cuh); overflow list
constexpr int kSlotWords = 4096;      // per-thread candidate slots (slots_per_thread * threads <= this)
constexpr int kCandCapacity = 4096;   // candidates (<= kHistWords); normal data: ~1-3% of a row
// Clusters first hold the window's cluster-wide totals in the slots, one word per first-digit bin.
static_assert(kSlotWords >= kHistWords, "the slots hold a first-digit histogram (templates/topk.cuh)");
// What is left of the family's dynamic shared memory after the histogram, the candidate lists and
// the classify's bitmaps holds the kept part of the slice.
constexpr int kMaxDynamicBytes = int(kTopkMaxDynamicSmem);
// Scores of a launch at most this large may be prefetched into L2 ahead of their lengths (a
// third of the H200's 50 MB L2).
constexpr long long kPrefetchSliceMaxBytes = 16LL << 20;
// Dynamic shared memory of one of two CTAs that share an SM (512 threads: 13,072 bytes of static
// shared memory each (NVRTC 13.0) and 1 KB reserved: the two take 232,992 of the SM's 233,472).
constexpr int kTwoPerSmDynamicBytes = 102400;
// Speculative 256-thread CTAs over several waves: fp32, three an SM (61 KB of lists, 12.6 KB
// static, 1 KB reserved); bf16, whose list entries are one word, four (4 x (42 + 12.6 + 1) KB).
constexpr int kThreePerSmListBytes = 62464;
constexpr int kFourPerSmBf16Bytes = 43008;
// The exact fallback's candidate slots of those bf16 CTAs (8 a thread): its parts fit 43,008 bytes.
constexpr int kFourPerSmSlotWords = 2048;

// bf16 list entries keep a score's offset in its warp's segment in 16 bits (templates/topk_bf16.cuh:
// at most 128 positions a round of pairs, 8 more for the first pair's phase): at most 511 rounds a warp.
bool bf16_segments_fit(int slice, int threads) {
  const long long vectors = (slice + 6LL) / 4;  // an unaligned slice reaches into one more vector
  const long long rounds = (vectors + 31) / 32;
  const long long warps = threads / 32;
  return 128 * ((rounds + warps - 1) / warps) + 16 <= 65536;
}

[[noreturn]] void throw_constraint(const std::string& what) {
  throw std::invalid_argument("topk plan constraints: " + what);
}
}  // namespace

std::string to_string(const TopkLaunchPlan& p) {
  return "algorithm=" + to_string(p.algorithm) + " cluster_size=" + std::to_string(p.cluster_size) +
         " threads=" + std::to_string(p.threads) + " slice=" + std::to_string(p.slice) +
         " resident_vecs=" + std::to_string(p.resident_vecs) + " prefetch_row=" + std::to_string(p.prefetch_row) +
         " prefetch_slice=" + std::to_string(p.prefetch_slice) + " cand_capacity=" + std::to_string(p.cand_capacity) +
         " dynamic_smem=" + std::to_string(p.dynamic_smem);
}

TileConfig topk_tile(const TopkLaunchPlan& plan) { return {.threads = plan.threads, .algorithm = plan.algorithm}; }

TopkLaunchPlan plan_topk_launch(int rows, int width, int topk, ScoreDtype score_dtype, int sm_count,
                                int max_cluster, const TopkPlanConstraints& constraints) {
  TopkLaunchPlan plan;
  // No row needs a selection (each writes 0, 1, ..., len - 1): 512 threads, two CTAs an SM, in the
  // exact kernel that many rows of longer slices take anyway.
  plan.threads = constraints.threads > 0 ? constraints.threads : 512;
  if (width <= topk) return plan;
  auto ceil_div = [](long long a, long long b) { return (a + b - 1) / b; };
  plan.cand_capacity = std::min(kCandCapacity, constraints.cand_capacity > 0 ? constraints.cand_capacity : kCandCapacity);
  // The shared-memory parts after the kept keys, at c CTAs per row, in words from the first of
  // them: the first-digit histogram, the slots (c > 1: first the window's totals), the cluster-wide
  // list (c > 1), the overflow list's warps, and the classify's two bitmaps (one bit per position
  // of the slice; one extra vector: the slice need not be aligned). `end` = their total.
  auto slice_of = [&](int c) { return int((ceil_div(width, c) + 3) / 4 * 4); };
  struct FixedParts {
    int slots, cand, overflow_warp, bitmaps, bitmap_words, end;
  };
  auto fixed_parts_of = [&](int c, int slot_words = kSlotWords) {
    FixedParts f;
    f.slots = kHistWords;
    f.cand = f.slots + slot_words;
    f.overflow_warp = f.cand + (c > 1 ? plan.cand_capacity : 0);
    f.bitmaps = f.overflow_warp + (plan.cand_capacity + 1) / 2;
    f.bitmap_words = int(4 * ceil_div(slice_of(c) / 4 + 1, 32));
    f.end = f.bitmaps + 2 * f.bitmap_words;
    return f;
  };
  int c = 1;
  if (constraints.ctas_per_row > 0) {
    c = constraints.ctas_per_row;
    if (c > 16 || (c & (c - 1)) != 0)
      throw_constraint("ctas_per_row = " + std::to_string(c) + ": expected 1, 2, 4, 8 or 16");
    if (4LL * fixed_parts_of(c).end > kMaxDynamicBytes)
      throw_constraint("ctas_per_row = " + std::to_string(c) + " for width " + std::to_string(width) +
                       ": the slices' bitmaps do not fit shared memory");
  } else {
    // 16-CTA clusters (non-portable) only for a single row: only ~7 fit the GPU at once.
    const int limit = std::min(max_cluster, rows == 1 ? 16 : 8);
    while (c < limit && ceil_div(width, c) > kTargetSlice) c *= 2;
    // Rows that fit one wave at one CTA per SM but not at c: the most CTAs per row that keep one wave.
    if ((long long)rows * c > sm_count && rows <= sm_count) {
      c = 1;
      while (c < limit && 2LL * rows * c <= sm_count) c *= 2;
    }
    // Few rows (the grid would fill less than half the SMs): split further, slices >= 8K.
    while (c < limit && 2LL * rows * c <= sm_count && ceil_div(width, c) >= 2 * kMinSpreadSlice) c *= 2;
    // The bitmaps must fit (always true at the cluster limit for width <= kMaxTopkWidth).
    while (c < limit && 4LL * fixed_parts_of(c).end > kMaxDynamicBytes) c *= 2;
  }
  plan.cluster_size = c;
  plan.slice = slice_of(c);
  // Threads: ~16..32 positions each; 1024 when the grid is at most one CTA per SM (latency). Many
  // waves of short slices: 256 threads keeping nothing, so four rows share an SM (docs/design/topk.md).
  const bool many_short = constraints.threads <= 0 && (long long)rows * c > sm_count && plan.slice <= 8192;
  // Many rows of longer slices: two 512-thread CTAs per SM, each keeping what lets both fit.
  const bool two_per_sm = constraints.threads <= 0 && !many_short && c == 1 && (long long)rows > sm_count;
  // A demanded algorithm stands for the switches it implies (0: off, 1: on, -1: the plan's choice).
  const std::optional<TopkAlgorithm> demanded = constraints.algorithm;
  auto demands = [&](TopkAlgorithm a) { return demanded && *demanded == a; };
  const int speculate_switch = demands(TopkAlgorithm::speculative_sweep) ? 1
                               : demanded && *demanded != TopkAlgorithm::cluster_lists ? 0
                                                                                        : constraints.speculate;
  const int dense_switch = demands(TopkAlgorithm::dense_registers) ? 1 : demanded ? 0 : constraints.dense_registers;
  // Speculative single sweep (templates/topk_speculative.cuh) for one CTA per row of slices long
  // enough that a sample's bound lists at most ~1/8 of them; not for many short slices, whose four
  // CTAs per SM the lists' 61 KB would halve. Nothing is kept: kept keys would only serve the fallback.
  bool speculate =
      c == 1 && (speculate_switch == 1 || (speculate_switch != 0 && plan.slice >= 12 * topk && !many_short));
  // Those rows over several waves with bf16 scores, slices up to 32K: 256-thread CTAs, four per SM
  // (below). The bf16 sweep is issue-bound and a row's fixed phases grow with its warps; the fp32
  // sweep waits on DRAM and keeps two 512-thread CTAs; longer slices would overflow the 256-thread
  // lists (832 entries a warp; docs/design/topk.md).
  const bool bf16_small_ctas =
      two_per_sm && speculate && score_dtype == ScoreDtype::bf16 && plan.slice <= kTargetSlice;
  if (constraints.threads <= 0) {
    int t = 256;
    while (t < 1024 && plan.slice > 16 * t) t *= 2;
    // A single row in a 16-CTA cluster of 8K slices: 512 threads, for cheaper block and cluster barriers.
    if ((long long)rows * c <= sm_count) t = c == 16 && plan.slice <= 8192 ? 512 : 1024;
    plan.threads = many_short || bf16_small_ctas ? 256 : two_per_sm ? 512 : t;
  }
  // bf16 speculation only where its one-word list entries can say where a score is.
  if (speculate && score_dtype == ScoreDtype::bf16 && !bf16_segments_fit(plan.slice, plan.threads)) speculate = false;
  // Row prefetch into L2 only over several waves: one wave's rows would not stay in L2.
  plan.prefetch_row = speculate && (constraints.prefetch_row == 1 ||
                                    (constraints.prefetch_row != 0 && (long long)rows * c > sm_count));
  // Slice prefetch for a few long rows in 8-16 CTA clusters (latency-bound, a small part of L2): the
  // first score loads need not wait for two DRAM round trips in a row (lengths[r], then the scores).
  const bool few_long_rows = c >= 8 && 2LL * rows * c <= sm_count && 4LL * rows * width <= kPrefetchSliceMaxBytes;
  plan.prefetch_slice = constraints.prefetch_slice == 1 || (constraints.prefetch_slice != 0 && few_long_rows);
  // Many short rows at 256 threads, one CTA each: the row's keys held in registers
  // (NSAJIT_TOPK_DENSE_VECS = 9 vectors a thread: slices of at most 256 * 9 - 1 vectors, as a row
  // need not be aligned), read once, the threshold found from them, one output pass
  // (templates/topk_dense.cuh, topk_dense_row).
  const bool dense_fits = c == 1 && plan.threads == 256 && plan.slice <= 4 * (256 * NSAJIT_TOPK_DENSE_VECS - 1);
  const bool dense = dense_fits && (dense_switch == 1 || (dense_switch != 0 && many_short));
  if (dense) speculate = plan.prefetch_row = false;  // neither runs: no lists to lay out
  // bf16 speculative 256-thread CTAs over several waves: four an SM, their exact fallback with
  // 8 candidate slots a thread (more go to the overflow list).
  const bool four_per_sm =
      speculate && score_dtype == ScoreDtype::bf16 && plan.threads == 256 && (long long)rows * c > sm_count;
  const int slot_words = four_per_sm ? kFourPerSmSlotWords : kSlotWords;
  plan.slots_per_thread = std::min(slot_words / plan.threads,
                                   constraints.slots_per_thread >= 0 ? constraints.slots_per_thread : slot_words);
  const FixedParts fixed = fixed_parts_of(c, slot_words);
  // The slice's vectors kept as keys in shared memory: all when they fit (one extra vector: the
  // slice need not be aligned); as many as fit when the CTA has the SM to itself anyway (1024
  // threads: 64 registers each fill the register file) or as two CTAs per SM allow (above); none
  // when shared memory would limit how many CTAs share an SM, for many short slices, or when the
  // plan speculates (above). The rest is re-read from global memory (L2) by the classify sweep
  // (and the rare rescans and candidate reads).
  const int slice_vecs = plan.slice / 4 + 1;
  const int room_vecs = std::max(0, (kMaxDynamicBytes / 4 - fixed.end) / 4);
  const int two_per_sm_room_vecs = std::max(0, (kTwoPerSmDynamicBytes / 4 - fixed.end) / 4);
  plan.resident_vecs = constraints.force_streaming || many_short || speculate ? 0
                       : two_per_sm                              ? std::min(slice_vecs, two_per_sm_room_vecs)
                       : slice_vecs <= room_vecs                 ? slice_vecs
                       : plan.threads == 1024                    ? room_vecs
                                                                 : 0;
  plan.hist_offset = 4 * plan.resident_vecs;
  plan.slots_offset = plan.hist_offset + fixed.slots;
  plan.cand_offset = plan.hist_offset + fixed.cand;
  plan.overflow_warp_offset = plan.hist_offset + fixed.overflow_warp;
  plan.bitmap_offset = plan.hist_offset + fixed.bitmaps;
  plan.bitmap_words = fixed.bitmap_words;
  plan.dynamic_smem = unsigned(4 * (plan.hist_offset + fixed.end));
  // The dense rows exchange their keys from word 0 (a whole slice), then list a threshold bin of
  // at most 512 keys after them.
  if (dense) plan.dynamic_smem = std::max(plan.dynamic_smem, unsigned(4 * 4 * NSAJIT_TOPK_DENSE_SMEM_VECS));
  // The speculative sweep's lists (fp32: score bits, later keys, then positions; bf16: one word an
  // entry) start where the exact path's slots do (what follows is used by the exact path only) and
  // take at least what the exact path takes, up to 64 KB of dynamic shared memory when rows share
  // SMs over several waves, 128 KB in one wave (4096 rows of 32K at 512 threads: 384 fp32 entries
  // per warp, about twice the expected count). 256 threads over several waves: 61 KB, so that three
  // CTAs share an SM (3 x (61 + 12.6 static + 1 reserved) KB <= 228 KB; 64 KB left room for two);
  // bf16, 42 KB for four (832 entries a warp at 32K slices).
  if (speculate) {
    const int budget_words = ((long long)rows * c <= sm_count ? 131072
                              : plan.threads == 256       ? (four_per_sm ? kFourPerSmBf16Bytes : kThreePerSmListBytes)
                                                          : 65536) /
                             4;
    plan.list_offset = plan.slots_offset;
    plan.list_words = std::max(fixed.end - fixed.slots, budget_words - plan.slots_offset) / 2 * 2;
    plan.dynamic_smem = std::max(plan.dynamic_smem, unsigned(4 * (plan.list_offset + plan.list_words)));
  }
  // Rows over a cluster, their slices kept: the speculative cluster selection
  // (templates/topk_cluster_lists.cuh), its messages after the exact path's parts. A slice of a
  // row whose largest scores are spread over it holds about topk / c of the selected keys: each
  // lists down to the first-digit bin of its (1.25 topk / c + 16)-th largest key; 2.5 times that
  // plus 64 keys hold such a list with its last bin (normal scores at c = 16: ~190-320 of 504;
  // the 12-bit bins are coarse: one can hold half a list). A message is 36 words (header, 32 bin
  // counts) and the keys; the inbox holds c of them.
  // Not at 256 threads (templates/topk.cuh compiles it out there), and at least one warp a CTA
  // (each list is read by threads / 32c warps).
  bool cluster_lists = false;
  if (c > 1 && speculate_switch != 0 && plan.threads >= 512 && plan.threads >= 32 * c &&
      plan.resident_vecs >= slice_vecs) {
    // templates/topk_cluster_lists.cuh, topk_cluster_list_rank at len = width.
    const int rank = int(ceil_div(5LL * topk * plan.slice, 4LL * width)) + 16;
    const int capacity = (5 * rank / 2 + 64 + 3) / 4 * 4;
    const int message = NSAJIT_TOPK_MSG_KEYS + capacity;
    // A warp's list in index order (for the output): 1.5 times a warp's even share of a message
    // (1 and 8 rows of 131072: ~12-40 keys a warp; twice would not let topk 4096 at 8 CTAs of 1024
    // threads fit), and at least 64.
    const int warps = plan.threads / 32;
    const int warp_capacity = std::max(64, (3 * capacity / (2 * warps) + 15) / 16 * 16);
    const int offset = (plan.hist_offset + fixed.end + 3) / 4 * 4;
    const int inbox = offset + message + 2 * warps * warp_capacity;
    const int end = inbox + c * message;
    if (4LL * end <= kMaxDynamicBytes) {
      cluster_lists = true;
      plan.cluster_list_rank = rank;
      plan.cluster_list_offset = offset;
      plan.cluster_list_capacity = capacity;
      plan.cluster_inbox_offset = inbox;
      plan.cluster_warp_capacity = warp_capacity;
      plan.dynamic_smem = std::max(plan.dynamic_smem, unsigned(4 * end));
    }
  }
  plan.algorithm = dense           ? TopkAlgorithm::dense_registers
                   : speculate     ? TopkAlgorithm::speculative_sweep
                   : cluster_lists ? TopkAlgorithm::cluster_lists
                   : c > 1         ? TopkAlgorithm::cluster_sweeps
                                   : TopkAlgorithm::exact_sweeps;
  if (demanded && plan.algorithm != *demanded)
    throw_constraint("algorithm = " + to_string(*demanded) + " for " + std::to_string(rows) +
                     " rows of width " + std::to_string(width) + " (" + to_string(plan) +
                     "): the shape cannot take it (exact_sweeps, speculative_sweep and dense_registers need one CTA "
                     "per row, dense_registers 256 threads and slices of at most 9212, cluster_sweeps a cluster, "
                     "cluster_lists a cluster of 512 or more threads keeping the whole slice; bf16 speculative_sweep "
                     "at most 511 rounds of 128 positions a warp)");
  // Two CTAs a row on the exact path lose to one CTA speculating with lists of >= 3 topk entries
  // (counted as fp32 entries: bf16 lists hold twice as many).
  if (plan.algorithm == TopkAlgorithm::cluster_sweeps && c == 2 && constraints.ctas_per_row <= 0 && !demanded &&
      4LL * fixed_parts_of(1).end <= kMaxDynamicBytes) {
    TopkPlanConstraints one_cta = constraints;
    one_cta.ctas_per_row = 1;
    const TopkLaunchPlan single = plan_topk_launch(rows, width, topk, score_dtype, sm_count, max_cluster, one_cta);
    if (single.algorithm == TopkAlgorithm::speculative_sweep && single.list_words / 2 >= 3 * topk) return single;
  }
  return plan;
}

std::vector<TopkTileChoice> topk_tile_choices(int topk, const std::vector<ScoreDtype>& score_dtypes,
                                              const std::vector<int>& sm_counts,
                                              const TopkPlanConstraints& constraints, long long rows_lo,
                                              long long rows_hi, long long width_lo, long long width_hi) {
  // width <= topk: no selection, but a launch (the rows' 0, 1, ..., len - 1).
  std::vector<long long> widths = {topk, topk + 1LL, width_lo, std::min<long long>(width_hi, kMaxTopkWidth)};
  for (long long w = 1024; w <= kMaxTopkWidth; w *= 2) {
    widths.push_back(w);
    widths.push_back(w * 3 / 2);
  }
  std::vector<TopkTileChoice> out;
  for (int sm : sm_counts) {
    std::vector<long long> rows = {rows_lo, std::min<long long>(rows_hi, 1 << 20)};
    for (long long r = 1; r <= (1 << 16); r *= 2) rows.push_back(r);
    for (long long r : {sm / 2, sm / 2 + 1, sm, sm + 1, 2 * sm, 4 * sm + 1}) rows.push_back(r);
    for (ScoreDtype score_dtype : score_dtypes)
      for (int max_cluster : {16, 8})
        for (long long r : rows)
          for (long long w : widths) {
            if (r < rows_lo || r > rows_hi || w < width_lo || w > width_hi || w < 1 || w > kMaxTopkWidth) continue;
            TileConfig tile;
            try {
              tile = topk_tile(plan_topk_launch(int(r), int(w), topk, score_dtype, sm, max_cluster, constraints));
            } catch (const std::invalid_argument&) {
              continue;  // a constrained plan this shape cannot take
            }
            if (std::none_of(out.begin(), out.end(), [&](const TopkTileChoice& c) { return c.tile == tile; }))
              out.push_back({tile, std::to_string(r) + " rows x " + std::to_string(w) + " " + to_string(score_dtype) +
                                       " at " + std::to_string(sm) + " SMs"});
          }
  }
  return out;
}

}  // namespace nsajit::detail
