// runtime/topk.cpp — nsajit::topk (§2): argument checks, spec, launch of templates/topk.cuh.
#include "nsajit/kernels.hpp"
#include "runtime/argument_checks.hpp"
#include "runtime/runtime.hpp"
#include "templates/kernel_params.h"

namespace nsajit {

namespace {
constexpr const char* kFunction = "nsajit::topk";
}

void topk(const TopkArgs& args, CUstream stream) {
  using detail::require_pointer;
  using detail::throw_bad_argument;
  // Every check comes before any driver call (spec_for_current_device queries the device).
  if (args.rows < 0) throw_bad_argument(kFunction, "rows", args.rows, "rows >= 0");
  if (args.width < 0) throw_bad_argument(kFunction, "width", args.width, "width >= 0");
  detail::require_topk(kFunction, args.topk, 4096);
  const long long stride = args.score_row_stride ? args.score_row_stride : args.width;
  if (stride < args.width)
    throw_bad_argument(kFunction, "score_row_stride", args.score_row_stride,
                       "0 (= width) or >= width = " + std::to_string(args.width));
  if (args.rows > 0) {
    // With width 0 every length clamps to <= 0 and no score is read: scores may be null then.
    if (args.width > 0) require_pointer(kFunction, "scores", args.scores);
    require_pointer(kFunction, "lengths", args.lengths);
    require_pointer(kFunction, "out", args.out);
  }
  if (args.rows == 0) return;

  KernelSpec spec;
  spec.family = Family::topk;
  spec.topk = args.topk;
  spec = spec_for_current_device(spec);
  const LoadedKernel& loaded = kernel(spec);

  TopkParams params{};
  params.scores = args.scores;
  params.score_row_stride = stride;
  params.lengths = args.lengths;
  params.row_starts = args.row_starts;
  params.out = args.out;
  params.rows = args.rows;
  params.width = args.width;

  LaunchGeometry geometry;
  geometry.grid_x = unsigned(args.rows);  // one CTA per row
  geometry.block = unsigned(spec.tile.threads);
  launch(loaded, geometry, &params, stream);
}

}  // namespace nsajit
