// reference/index_transform.cpp — see index_transform.hpp.
#include "reference/index_transform.hpp"

#include <stdexcept>

namespace nsajit::reference {

int request_of_row(const std::vector<std::int32_t>& cu_seqlens_q, int num_requests, int r) {
  for (int b = 0; b < num_requests; ++b)
    if (cu_seqlens_q[b] <= r && r < cu_seqlens_q[b + 1]) return b;
  return -1;
}

std::vector<std::int32_t> index_transform(const IndexTransformProblem& pr) {
  const std::size_t count = std::size_t(pr.rows) * std::size_t(pr.topk);
  if (pr.topk_indices.size() < count) throw std::invalid_argument("topk_indices too short");
  std::vector<std::int32_t> out(count, -1);
  const std::int64_t stride = pr.page_table_row_stride ? pr.page_table_row_stride : pr.page_table_width;
  const std::int64_t max_position = std::int64_t(pr.page_table_width) * pr.page_size;
  for (int r = 0; r < pr.rows; ++r) {
    int b = -1;
    switch (pr.mode) {
      case IndexMode::decode: b = r; break;
      case IndexMode::prefill: b = request_of_row(pr.cu_seqlens_q, pr.num_requests, r); break;
      case IndexMode::ragged: break;
    }
    for (int j = 0; j < pr.topk; ++j) {
      const std::size_t at = std::size_t(r) * pr.topk + j;
      const std::int32_t idx = pr.topk_indices[at];
      if (idx < 0) continue;  // stays -1
      if (pr.mode == IndexMode::ragged) {
        out[at] = std::int32_t(std::uint32_t(idx) + std::uint32_t(pr.offsets.at(r)));
        continue;
      }
      if (b < 0 || idx >= max_position) continue;
      const std::int32_t entry = pr.page_table.at(std::size_t(b * stride + idx / pr.page_size));
      if (entry < 0) continue;
      out[at] = std::int32_t(std::int64_t(entry) * pr.page_size + idx % pr.page_size);
    }
  }
  return out;
}

std::vector<std::int32_t> real_page_table(const std::vector<std::int32_t>& page_table_1, int rows,
                                          int width, int page_size) {
  const int pages = (width + page_size - 1) / page_size;
  std::vector<std::int32_t> table(std::size_t(rows) * pages);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < pages; ++j) {
      const std::int32_t slot = page_table_1.at(std::size_t(r) * width + std::size_t(j) * page_size);
      table[std::size_t(r) * pages + j] = slot < 0 ? -1 : slot / page_size;
    }
  return table;
}

TransformTables decode_tables(const std::vector<std::int32_t>& page_table_1, int requests, int width,
                              int page_size) {
  TransformTables t;
  t.mode = IndexMode::decode;
  t.page_table = page_size == 1 ? page_table_1 : real_page_table(page_table_1, requests, width, page_size);
  t.page_table_width = (width + page_size - 1) / page_size;
  t.page_size = page_size;
  t.num_requests = requests;
  return t;
}

std::vector<std::int32_t> cu_seqlens(const std::vector<std::int32_t>& lengths) {
  std::vector<std::int32_t> cu(lengths.size() + 1, 0);
  for (std::size_t i = 0; i < lengths.size(); ++i) cu[i + 1] = cu[i] + lengths[i];
  return cu;
}

std::string first_difference(const std::vector<std::int32_t>& got,
                             const std::vector<std::int32_t>& expected, int cols) {
  if (got.size() != expected.size())
    return "size " + std::to_string(got.size()) + ", expected " + std::to_string(expected.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected[i]) {
      const std::size_t c = cols > 0 ? std::size_t(cols) : got.size();
      return "row " + std::to_string(i / c) + ", column " + std::to_string(i % c) + ": got " +
             std::to_string(got[i]) + ", expected " + std::to_string(expected[i]);
    }
  return "";
}

}  // namespace nsajit::reference
