// reference/index_transform.hpp — CPU reference of §1 (index transform) and page-table helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nsajit/spec.hpp"

namespace nsajit::reference {

// The §1 transform's mode and tables, on std::vector (the host mirror of the transform fields of
// nsajit::IndexTransformArgs and of a fused nsajit::TopkArgs).
struct TransformTables {
  IndexMode mode = IndexMode::decode;
  std::vector<std::int32_t> page_table;    // [num_requests, page_table_row_stride]
  int page_table_width = 0;
  std::int64_t page_table_row_stride = 0;  // 0 = page_table_width
  int page_size = 1;
  std::vector<std::int32_t> cu_seqlens_q;  // prefill: [num_requests + 1]
  int num_requests = 0;
  std::vector<std::int32_t> offsets;       // ragged: [rows]
};

// The host mirror of nsajit::IndexTransformArgs.
struct IndexTransformProblem : TransformTables {
  std::vector<std::int32_t> topk_indices;  // [rows, topk]
  int rows = 0;
  int topk = 0;
};

// int32 [rows, topk]. decode / prefill: idx valid iff 0 <= idx < page_table_width * page_size;
// slot = page_table[b, idx / P] * P + idx % P (64-bit, stored as int32); -1 for an invalid idx or
// a negative page-table entry. prefill: row r belongs to the request b with
// cu_seqlens_q[b] <= r < cu_seqlens_q[b + 1]; a row of no request is all -1.
// ragged: idx + offsets[r] (wrapping int32 add) for idx >= 0, else -1.
std::vector<std::int32_t> index_transform(const IndexTransformProblem& problem);

// The request of prefill row r (cu_seqlens_q[b] <= r < cu_seqlens_q[b + 1]), or -1.
int request_of_row(const std::vector<std::int32_t>& cu_seqlens_q, int num_requests, int r);

// The real page table of page size P from page_table_1 (int32 [rows, width], slots):
// [rows, ceil(width / P)], entry j = page_table_1[r, j * P] / P (SGLang's page_table_1[:, ::P] // P).
// A negative entry (-1 padding) stays -1. Assumes page-aligned pages (slot(p) = page * P + p % P).
std::vector<std::int32_t> real_page_table(const std::vector<std::int32_t>& page_table_1, int rows,
                                          int width, int page_size);

// Decode tables over page_table_1 (int32 [requests, width], slots) at page size P: P = 1 the table
// itself, P > 1 its real_page_table (then pages must be page-aligned). Row r uses request r.
TransformTables decode_tables(const std::vector<std::int32_t>& page_table_1, int requests, int width,
                              int page_size = 1);

// Exclusive prefix sum with a leading 0: [n] -> [n + 1] (cu_seqlens from per-request lengths).
std::vector<std::int32_t> cu_seqlens(const std::vector<std::int32_t>& lengths);

// "" when equal; else where the first difference is ("row 3, column 17: got 5, expected -1"),
// or the size mismatch. cols > 0 is the row length used to report positions.
std::string first_difference(const std::vector<std::int32_t>& got,
                             const std::vector<std::int32_t>& expected, int cols);

}  // namespace nsajit::reference
