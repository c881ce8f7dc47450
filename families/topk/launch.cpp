// launch.cpp — nsajit::topk (§2, plain and fused with §1): argument checks, spec and launch of
// templates/topk.cuh with the plan of families/topk/heuristics.hpp.
#include <stdexcept>
#include <string>

#include "families/topk/heuristics.hpp"
#include "families/topk/tuning.hpp"
#include "nsajit/kernels.hpp"
#include "runtime/argument_checks.hpp"
#include "runtime/driver.hpp"
#include "runtime/runtime.hpp"
#include "families/index_transform/transform_arguments.hpp"
#include "templates/kernel_params.h"

namespace nsajit {

namespace {

constexpr const char* kFunction = "nsajit::topk";

// next_n, then the transform arguments shared with nsajit::index_transform. Returns the page-table
// row stride (elements).
long long check_fused(const TopkArgs& args) {
  if (args.mode == IndexMode::decode) {
    if (args.next_n < 1 || args.next_n > 8)
      detail::throw_bad_argument(kFunction, "next_n", args.next_n, "an integer in [1, 8]");
  } else if (args.next_n != 1) {
    detail::throw_bad_argument(kFunction, "next_n", args.next_n, "1 unless mode decode (MTP rows)");
  }
  return detail::check_transform_arguments(kFunction, args, args.next_n);
}

}  // namespace

namespace detail {

void topk(const TopkArgs& args, const TopkPlanConstraints& constraints, CUstream stream, TopkKernelLoader load_kernel) {
  using detail::require_pointer;
  using detail::throw_bad_argument;
  // Every check comes before any driver call (spec_for_current_device queries the device).
  // Up to 16 CTAs per row must fit the grid's 2^31 - 1 limit.
  if (args.rows < 0 || args.rows >= (1 << 27))
    throw_bad_argument(kFunction, "rows", args.rows, "0 <= rows < 2^27");
  if (args.width < 0 || args.width > detail::kMaxTopkWidth)
    throw_bad_argument(kFunction, "width", args.width, "0 <= width <= " + std::to_string(detail::kMaxTopkWidth));
  detail::require_topk(kFunction, args.topk, 4096);
  if (args.score_dtype != ScoreDtype::fp32 && args.score_dtype != ScoreDtype::bf16)
    throw_bad_argument(kFunction, "score_dtype", int(args.score_dtype), "fp32 (0) or bf16 (1)");
  const long long stride = args.score_row_stride ? args.score_row_stride : args.width;
  if (stride < args.width)
    throw_bad_argument(kFunction, "score_row_stride", args.score_row_stride,
                       "0 (= width) or >= width = " + std::to_string(args.width));
  if (args.rows > 0) {
    // With width 0 every length clamps to <= 0 and no score is read: scores may be null then.
    if (args.width > 0) require_pointer(kFunction, "scores", args.scores, args.score_dtype == ScoreDtype::bf16 ? 2 : 4);
    detail::require_pointer_or_null(kFunction, "row_starts", args.row_starts);
    require_pointer(kFunction, "lengths", args.lengths);
    require_pointer(kFunction, "out", args.out);
  }
  const long long table_stride = args.fused_transform ? check_fused(args) : 0;
  if (args.rows == 0) return;

  KernelSpec spec;
  spec.family = Family::topk;
  spec.topk = args.topk;
  spec.sorted = args.sorted;
  spec.score_dtype = args.score_dtype;
  if (args.fused_transform) {
    spec.fused_transform = true;
    spec.mode = args.mode;
    spec.page_size = args.mode == IndexMode::ragged ? 1 : args.page_size;
    spec.next_n = args.mode == IndexMode::decode ? args.next_n : 1;
  }
  const int sm_count = driver::current_context_info().sm_count;
  // The dispatcher's call: the tuning database's choice for the shape's bucket, if any.
  const TopkPlanConstraints* tuned = &constraints == &kDispatcherChoice
                                         ? tuned_topk_constraints(args.rows, args.width, args.topk, args.score_dtype,
                                                                  sm_count)
                                         : nullptr;
  detail::TopkLaunchPlan plan =
      detail::plan_topk_launch(args.rows, args.width, args.topk, args.score_dtype, sm_count, 16,
                               tuned ? *tuned : constraints);
  const KernelSpec base_spec = spec;
  auto load = [&](const detail::TopkLaunchPlan& p) -> const LoadedKernel& {
    // The dense kernel holds no fallback for a slice its registers cannot hold (the plan never
    // makes one; a demanded plan is checked the same way).
    if (p.algorithm == TopkAlgorithm::dense_registers && p.slice > 4 * (256 * NSAJIT_TOPK_DENSE_VECS - 1))
      throw std::logic_error("nsajit::topk: a dense_registers plan with slices of " + std::to_string(p.slice) +
                             " positions (at most " + std::to_string(4 * (256 * NSAJIT_TOPK_DENSE_VECS - 1)) + ")");
    spec = base_spec;
    spec.tile = detail::topk_tile(p);
    spec = spec_for_current_device(spec);
    return load_kernel ? load_kernel(spec) : kernel(spec);
  };
  const LoadedKernel* loaded = &load(plan);
  auto geometry_of = [&](const detail::TopkLaunchPlan& p) {
    LaunchGeometry g;
    g.grid_x = unsigned(args.rows) * unsigned(p.cluster_size);
    g.block = unsigned(p.threads);
    g.dynamic_smem = p.dynamic_smem;
    g.cluster_x = p.cluster_size > 1 ? unsigned(p.cluster_size) : 0u;
    return g;
  };
  LaunchGeometry geometry = geometry_of(plan);
  if (plan.cluster_size > 8 && resident_ctas(*loaded, geometry) == 0) {
    // A non-portable cluster (> 8 CTAs) may not fit a device at all (fewer SMs per GPC, a MIG
    // slice): then at most 8. (resident_ctas also sets the function's opt-in for it, once.)
    plan = detail::plan_topk_launch(args.rows, args.width, args.topk, args.score_dtype, sm_count, 8,
                                    tuned ? kDispatcherChoice : constraints);
    loaded = &load(plan);
    geometry = geometry_of(plan);
  }

  TopkParams params{
      .scores = args.scores, .score_row_stride = stride, .lengths = args.lengths, .row_starts = args.row_starts,
      .out = args.out, .rows = args.rows, .width = args.width, .ctas_per_row = plan.cluster_size,
      .slice = plan.slice, .resident_vecs = plan.resident_vecs, .phase = 0,
      .hist_offset = plan.hist_offset, .slots_offset = plan.slots_offset, .cand_offset = plan.cand_offset,
      .overflow_warp_offset = plan.overflow_warp_offset, .bitmap_offset = plan.bitmap_offset,
      .bitmap_words = plan.bitmap_words, .cand_capacity = plan.cand_capacity,
      .slots_per_thread = plan.slots_per_thread, .prefetch_row = plan.prefetch_row,
      .prefetch_slice = plan.prefetch_slice, .list_offset = plan.list_offset, .list_words = plan.list_words,
      .cluster_list_offset = plan.cluster_list_offset, .cluster_list_capacity = plan.cluster_list_capacity,
      .cluster_warp_capacity = plan.cluster_warp_capacity, .cluster_inbox_offset = plan.cluster_inbox_offset,
      // The transform's (fused specs: set below).
      .page_table = nullptr, .page_table_row_stride = 0, .max_position = 0, .cu_seqlens_q = nullptr,
      .offsets = nullptr, .num_requests = 0};
  if (args.fused_transform) detail::set_transform_parameters(params, args, table_stride);

  launch(*loaded, geometry, &params, stream);

  if (args.sorted) {  // phase 1: sort each row, then transform
    long long n = 1;
    while (n < args.topk) n <<= 1;
    params.phase = 1;
    LaunchGeometry sort_geometry;
    sort_geometry.grid_x = unsigned(args.rows);
    sort_geometry.block = unsigned(spec.tile.threads);
    sort_geometry.dynamic_smem = unsigned(n * 8);
    launch(*loaded, sort_geometry, &params, stream);
  }
}

}  // namespace detail

void topk(const TopkArgs& args, CUstream stream) { detail::topk(args, detail::kDispatcherChoice, stream); }

}  // namespace nsajit
