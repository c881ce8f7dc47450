// transform_arguments.hpp — the §1 transform arguments shared by nsajit::index_transform and the
// fused nsajit::topk: their checks and the kernel parameters they become (header-only).
#pragma once

#include <string>
#include <string_view>

#include "nsajit/kernels.hpp"
#include "runtime/argument_checks.hpp"

namespace nsajit::detail {

// Checks mode, page_size, the page table's shape, num_requests against rows (decode: row r uses
// page-table row r / next_n) and the pointers the mode reads (`args`: IndexTransformArgs or
// TopkArgs; next_n already checked by the caller). Returns the page-table row stride in elements
// (0 for ragged). Only checks: no driver call.
template <class Args>
long long check_transform_arguments(std::string_view function, const Args& args, int next_n) {
  const IndexMode mode = args.mode;
  if (mode != IndexMode::decode && mode != IndexMode::prefill && mode != IndexMode::ragged)
    throw_bad_argument(function, "mode", static_cast<long long>(mode), "decode, prefill or ragged");
  if (mode == IndexMode::ragged) {
    if (args.rows > 0) require_pointer(function, "offsets", args.offsets);
    return 0;
  }
  if (args.page_size < 1 || args.page_size > 4096)
    throw_bad_argument(function, "page_size", args.page_size, "an integer in [1, 4096]");
  if (args.page_table_width < 0)
    throw_bad_argument(function, "page_table_width", args.page_table_width, ">= 0");
  const long long stride = args.page_table_row_stride ? args.page_table_row_stride : args.page_table_width;
  if (stride < args.page_table_width)
    throw_bad_argument(function, "page_table_row_stride", args.page_table_row_stride,
                       "0 (= page_table_width) or >= page_table_width = " + std::to_string(args.page_table_width));
  if (mode == IndexMode::decode) {
    if (args.rows % next_n != 0)
      throw_bad_argument(function, "rows", args.rows,
                         "a multiple of next_n = " + std::to_string(next_n) + " for mode decode");
    if (args.num_requests != args.rows / next_n)
      throw_bad_argument(function, "num_requests", args.num_requests,
                         next_n == 1 ? "rows = " + std::to_string(args.rows) +
                                           " for mode decode (row r uses page-table row r)"
                                     : "rows / next_n = " + std::to_string(args.rows / next_n) +
                                           " for mode decode (row r uses page-table row r / next_n)");
  } else {
    if (args.num_requests < 0) throw_bad_argument(function, "num_requests", args.num_requests, ">= 0");
    if (args.rows > 0) require_pointer(function, "cu_seqlens_q", args.cu_seqlens_q);
  }
  // A table with no columns is never read (every position is out of range).
  if (args.rows > 0 && args.num_requests > 0 && args.page_table_width > 0)
    require_pointer(function, "page_table", args.page_table);
  return stride;
}

// The transform fields of the kernel parameters (IndexTransformParams or TopkParams).
template <class Params, class Args>
void set_transform_parameters(Params& params, const Args& args, long long page_table_row_stride) {
  if (args.mode == IndexMode::ragged) {
    params.offsets = args.offsets;
    return;
  }
  params.page_table = args.page_table;
  params.page_table_row_stride = page_table_row_stride;
  params.max_position = static_cast<long long>(args.page_table_width) * args.page_size;
  params.cu_seqlens_q = args.cu_seqlens_q;
  params.num_requests = args.num_requests;
}

}  // namespace nsajit::detail
