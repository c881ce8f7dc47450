// runtime/index_transform.cpp — nsajit::index_transform (§1): argument checks, spec, launch of
// templates/index_transform.cuh.
#include "nsajit/kernels.hpp"
#include "runtime/argument_checks.hpp"
#include "runtime/runtime.hpp"
#include "templates/kernel_params.h"

namespace nsajit {

namespace {
constexpr const char* kFunction = "nsajit::index_transform";
}

void index_transform(const IndexTransformArgs& args, CUstream stream) {
  using detail::require_pointer;
  using detail::throw_bad_argument;
  const IndexMode mode = args.mode;
  // Every check comes before any driver call (spec_for_current_device queries the device).
  if (mode != IndexMode::decode && mode != IndexMode::prefill && mode != IndexMode::ragged)
    throw_bad_argument(kFunction, "mode", static_cast<long long>(mode), "decode, prefill or ragged");
  if (args.rows < 0) throw_bad_argument(kFunction, "rows", args.rows, "rows >= 0");
  detail::require_topk(kFunction, args.topk, 16384);
  if (args.rows > 0) {
    require_pointer(kFunction, "topk_indices", args.topk_indices);
    require_pointer(kFunction, "out", args.out);
  }
  long long stride = 0;
  if (mode == IndexMode::ragged) {
    if (args.rows > 0) require_pointer(kFunction, "offsets", args.offsets);
  } else {
    if (args.page_size < 1 || args.page_size > 4096)
      throw_bad_argument(kFunction, "page_size", args.page_size, "an integer in [1, 4096]");
    if (args.page_table_width < 0)
      throw_bad_argument(kFunction, "page_table_width", args.page_table_width, ">= 0");
    stride = args.page_table_row_stride ? args.page_table_row_stride : args.page_table_width;
    if (stride < args.page_table_width)
      throw_bad_argument(kFunction, "page_table_row_stride", args.page_table_row_stride,
                         "0 (= page_table_width) or >= page_table_width = " +
                             std::to_string(args.page_table_width));
    if (mode == IndexMode::decode) {
      if (args.num_requests != args.rows)
        throw_bad_argument(kFunction, "num_requests", args.num_requests,
                           "rows = " + std::to_string(args.rows) +
                               " for mode decode (row r uses page-table row r)");
    } else {
      if (args.num_requests < 0)
        throw_bad_argument(kFunction, "num_requests", args.num_requests, ">= 0");
      if (args.rows > 0) require_pointer(kFunction, "cu_seqlens_q", args.cu_seqlens_q);
    }
    // A table with no columns is never read (every position is out of range).
    if (args.rows > 0 && args.num_requests > 0 && args.page_table_width > 0)
      require_pointer(kFunction, "page_table", args.page_table);
  }
  if (args.rows == 0) return;

  KernelSpec spec;
  spec.family = Family::index_transform;
  spec.topk = args.topk;
  spec.mode = mode;
  spec.page_size = mode == IndexMode::ragged ? 1 : args.page_size;  // ragged has no page table
  spec = spec_for_current_device(spec);
  const LoadedKernel& loaded = kernel(spec);

  IndexTransformParams params{};
  params.topk_indices = args.topk_indices;
  params.out = args.out;
  params.rows = args.rows;
  if (mode == IndexMode::ragged) {
    params.offsets = args.offsets;
  } else {
    params.page_table = args.page_table;
    params.page_table_row_stride = stride;
    params.max_position = static_cast<long long>(args.page_table_width) * args.page_size;
    params.cu_seqlens_q = args.cu_seqlens_q;
    params.num_requests = args.num_requests;
  }

  LaunchGeometry geometry;
  geometry.grid_x = unsigned(args.rows);  // one CTA per row
  geometry.block = unsigned(spec.tile.threads);
  launch(loaded, geometry, &params, stream);
}

}  // namespace nsajit
