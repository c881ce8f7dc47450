// launch.cpp — nsajit::index_transform (§1): argument checks, spec, launch of
// templates/index_transform.cuh.
#include "nsajit/kernels.hpp"
#include "runtime/argument_checks.hpp"
#include "runtime/runtime.hpp"
#include "families/index_transform/transform_arguments.hpp"
#include "templates/kernel_params.h"

namespace nsajit {

namespace {
constexpr const char* kFunction = "nsajit::index_transform";
}

void index_transform(const IndexTransformArgs& args, CUstream stream) {
  using detail::require_pointer;
  using detail::throw_bad_argument;
  // Every check comes before any driver call (spec_for_current_device queries the device).
  if (args.rows < 0) throw_bad_argument(kFunction, "rows", args.rows, "rows >= 0");
  detail::require_topk(kFunction, args.topk, 16384);
  if (args.rows > 0) {
    require_pointer(kFunction, "topk_indices", args.topk_indices);
    require_pointer(kFunction, "out", args.out);
  }
  const long long stride = detail::check_transform_arguments(kFunction, args, 1);
  if (args.rows == 0) return;

  KernelSpec spec;
  spec.family = Family::index_transform;
  spec.topk = args.topk;
  spec.mode = args.mode;
  spec.page_size = args.mode == IndexMode::ragged ? 1 : args.page_size;  // ragged has no page table
  spec = spec_for_current_device(spec);

  IndexTransformParams params{};
  params.topk_indices = args.topk_indices;
  params.out = args.out;
  params.rows = args.rows;
  detail::set_transform_parameters(params, args, stride);

  LaunchGeometry geometry;
  geometry.grid_x = unsigned(args.rows);  // one CTA per row
  geometry.block = unsigned(spec.tile.threads);
  launch(kernel(spec), geometry, &params, stream);
}

}  // namespace nsajit
