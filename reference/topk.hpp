// reference/topk.hpp — CPU reference of §2 (per-row top-k of fp32 scores) and comparison helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nsajit/spec.hpp"
#include "reference/index_transform.hpp"

namespace nsajit::reference {

// The host mirror of nsajit::TopkArgs, on std::vector.
struct TopkProblem {
  std::vector<float> scores;             // [rows, score_row_stride]
  std::int64_t score_row_stride = 0;     // 0 = width
  std::vector<std::int32_t> lengths;     // [rows]
  std::vector<std::int32_t> row_starts;  // [rows], or empty = all 0
  int rows = 0;
  int width = 0;
  int topk = 2048;
};

// Order-preserving key of a score: key(a) > key(b) iff a ranks above b. NaN -> 0 (below -inf),
// -0.0 and +0.0 share one key. The same mapping as templates/topk_common.cuh (topk_key).
std::uint32_t order_key(float score);

// Row r's start (clamp(row_starts[r], 0, width), 0 without row_starts) and clamped length
// (min(lengths[r], width - row_start); may be <= 0).
int row_start_of(const TopkProblem& problem, int r);
int length_of(const TopkProblem& problem, int r);

// int32 [rows, topk], positions relative to row_start. len <= 0: all -1; len <= topk: 0..len-1
// then -1; len > topk: the first topk of a std::stable_sort by (key desc, index asc), so ties go to
// the lower index; returned in that order (score descending).
std::vector<std::int32_t> topk(const TopkProblem& problem);

// The same selection as topk() in the order of the unsorted kernel (templates/topk.cuh): for a
// row with len > topk, the positions whose key is above the threshold key T (the topk-th largest)
// in increasing index order, then the positions with key == T in increasing index order; shorter
// rows as in topk(). The unsorted GPU output must equal this byte for byte.
std::vector<std::int32_t> topk_index_order(const TopkProblem& problem);

// The §1 transform of a fused top-k (host mirror of the fused fields of nsajit::TopkArgs).
struct TopkTransform : TransformTables {
  int next_n = 1;  // decode: row r uses page-table row r / next_n
};

// Applies the transform to positions int32 [rows, topk] (through reference::index_transform;
// decode with next_n > 1 repeats each page-table row next_n times first).
std::vector<std::int32_t> apply_transform(const TopkTransform& transform, int rows, int topk,
                                          const std::vector<std::int32_t>& positions);

// Compares a top-k output with the reference one row by row, order-insensitively: the same valid
// prefix (valid entries first, then only -1), the same index set, distinct in-range indices and the
// same multiset of selected keys. "" when they agree, else the first disagreement.
// (The tie rule makes the index set unique, so index-set equality is the exact check; the value
// multiset is reported separately because it says whether the selection or only the ties differ.)
std::string topk_mismatch(const TopkProblem& problem, const std::vector<std::int32_t>& got,
                          const std::vector<std::int32_t>& expected);

inline bool same_selection(const TopkProblem& problem, const std::vector<std::int32_t>& got,
                           const std::vector<std::int32_t>& expected) {
  return topk_mismatch(problem, got, expected).empty();
}

}  // namespace nsajit::reference
