// reference/topk.cpp — see topk.hpp.
#include "reference/topk.hpp"

#include "reference/index_transform.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace nsajit::reference {

std::uint32_t order_key(float score) {
  if (std::isnan(score)) return 0u;
  if (score == 0.0f) return 0x80000000u;  // -0.0 == +0.0
  const std::uint32_t u = std::bit_cast<std::uint32_t>(score);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

int row_start_of(const TopkProblem& pr, int r) {
  if (pr.row_starts.empty()) return 0;
  return std::clamp(pr.row_starts.at(r), 0, pr.width);
}

int length_of(const TopkProblem& pr, int r) {
  return std::min(pr.lengths.at(r), pr.width - row_start_of(pr, r));
}

namespace {

std::int64_t stride_of(const TopkProblem& pr) {
  return pr.score_row_stride ? pr.score_row_stride : pr.width;
}

float score_at(const TopkProblem& pr, int r, int position) {
  return pr.scores.at(std::size_t(r * stride_of(pr) + row_start_of(pr, r) + position));
}

}  // namespace

std::vector<std::int32_t> topk(const TopkProblem& pr) {
  std::vector<std::int32_t> out(std::size_t(pr.rows) * pr.topk, -1);
  std::vector<std::int32_t> order;
  std::vector<std::uint32_t> keys;
  for (int r = 0; r < pr.rows; ++r) {
    std::int32_t* row_out = out.data() + std::size_t(r) * pr.topk;
    const int len = length_of(pr, r);
    if (len <= 0) continue;
    if (len <= pr.topk) {
      std::iota(row_out, row_out + len, 0);  // scores not read
      continue;
    }
    keys.resize(len);
    for (int i = 0; i < len; ++i) keys[i] = order_key(score_at(pr, r, i));
    order.resize(len);
    std::iota(order.begin(), order.end(), 0);
    // Stable sort by key descending keeps equal keys in increasing index order.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int32_t a, std::int32_t b) { return keys[a] > keys[b]; });
    std::copy(order.begin(), order.begin() + pr.topk, row_out);
  }
  return out;
}

std::vector<std::int32_t> topk_index_order(const TopkProblem& pr) {
  std::vector<std::int32_t> out = topk(pr);
  for (int r = 0; r < pr.rows; ++r) {
    if (length_of(pr, r) <= pr.topk) continue;
    std::int32_t* row_out = out.data() + std::size_t(r) * pr.topk;
    const std::uint32_t threshold = order_key(score_at(pr, r, row_out[pr.topk - 1]));
    // Keys above the threshold first, each group in increasing index order.
    std::stable_sort(row_out, row_out + pr.topk, [&](std::int32_t a, std::int32_t b) {
      const bool ga = order_key(score_at(pr, r, a)) > threshold;
      const bool gb = order_key(score_at(pr, r, b)) > threshold;
      if (ga != gb) return ga;
      return a < b;
    });
  }
  return out;
}

std::vector<std::int32_t> apply_transform(const TopkTransform& t, int rows, int topk,
                                          const std::vector<std::int32_t>& positions) {
  IndexTransformProblem it;
  static_cast<TransformTables&>(it) = t;
  it.topk_indices = positions;
  it.rows = rows;
  it.topk = topk;
  const std::int64_t stride = t.page_table_row_stride ? t.page_table_row_stride : t.page_table_width;
  if (t.mode == IndexMode::decode && t.next_n > 1) {
    // Row r uses page-table row r / next_n: repeat each row next_n times.
    it.page_table_row_stride = stride;
    it.num_requests = rows;
    it.page_table.resize(std::size_t(rows) * std::size_t(stride));
    for (int r = 0; r < rows; ++r)
      std::copy_n(t.page_table.begin() + std::ptrdiff_t(r / t.next_n) * stride, stride,
                  it.page_table.begin() + std::ptrdiff_t(r) * stride);
  }
  return index_transform(it);
}

std::string topk_mismatch(const TopkProblem& pr, const std::vector<std::int32_t>& got,
                          const std::vector<std::int32_t>& expected) {
  const std::size_t count = std::size_t(pr.rows) * pr.topk;
  if (got.size() != count || expected.size() != count)
    return "size " + std::to_string(got.size()) + " / " + std::to_string(expected.size()) +
           ", expected " + std::to_string(count);
  for (int r = 0; r < pr.rows; ++r) {
    const std::string where = "row " + std::to_string(r) + ": ";
    const auto begin_got = got.begin() + std::ptrdiff_t(r) * pr.topk;
    const auto begin_expected = expected.begin() + std::ptrdiff_t(r) * pr.topk;
    std::vector<std::int32_t> a(begin_got, begin_got + pr.topk);
    std::vector<std::int32_t> b(begin_expected, begin_expected + pr.topk);
    // Valid prefix: count the entries before the first -1; everything after must be -1.
    auto prefix = [](const std::vector<std::int32_t>& v) {
      return int(std::find(v.begin(), v.end(), -1) - v.begin());
    };
    const int na = prefix(a), nb = prefix(b);
    for (int j = na; j < pr.topk; ++j)
      if (a[j] != -1)
        return where + "entry " + std::to_string(j) + " = " + std::to_string(a[j]) +
               " after a -1 (valid-prefix invariant broken)";
    if (na != nb)
      return where + std::to_string(na) + " valid entries, expected " + std::to_string(nb);
    const int len = length_of(pr, r);
    a.resize(na);
    b.resize(nb);
    for (int j = 0; j < na; ++j)
      if (a[j] < 0 || a[j] >= len)
        return where + "entry " + std::to_string(j) + " = " + std::to_string(a[j]) +
               " outside [0, " + std::to_string(len) + ")";
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (std::adjacent_find(a.begin(), a.end()) != a.end())
      return where + "duplicate index " + std::to_string(*std::adjacent_find(a.begin(), a.end()));
    if (a == b) continue;
    // Index sets differ: say whether the selected values differ too, or only tie-breaking does.
    if (len > pr.topk) {
      std::vector<std::uint32_t> ka, kb;
      for (int i : a) ka.push_back(order_key(score_at(pr, r, i)));
      for (int i : b) kb.push_back(order_key(score_at(pr, r, i)));
      std::sort(ka.begin(), ka.end());
      std::sort(kb.begin(), kb.end());
      if (ka != kb) return where + "selected value multiset differs from the true top-k";
    }
    const auto m = std::mismatch(a.begin(), a.end(), b.begin());
    return where + "index sets differ (first: got " + std::to_string(*m.first) + ", expected " +
           std::to_string(*m.second) + ")" +
           (len > pr.topk ? "; values agree, so ties are not broken to the lower index" : "");
  }
  return "";
}

}  // namespace nsajit::reference
