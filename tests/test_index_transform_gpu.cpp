// test_index_transform_gpu.cpp — nsajit::index_transform (§1) on the GPU against
// reference::index_transform, plus host-side argument checks (no GPU needed for those).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "nsajit/errors.hpp"
#include "nsajit/kernels.hpp"
#include "reference/index_transform.hpp"
#include "tests/argument_cases.hpp"
#include "tests/gpu_support.hpp"

namespace ref = nsajit::reference;
using nsajit::IndexMode;
using nsajit::test::DeviceBuffer;
using I = std::vector<std::int32_t>;

namespace {

std::unique_ptr<DeviceBuffer<std::int32_t>> upload_or_null(const I& host) {
  return host.empty() ? nullptr : std::make_unique<DeviceBuffer<std::int32_t>>(host);
}

// Runs the problem on the GPU. misalign_out shifts the output by one element so the kernel must
// take its scalar (non-int4) path.
I run_transform(const ref::IndexTransformProblem& p, bool misalign_out = false) {
  DeviceBuffer<std::int32_t> indices(p.topk_indices);
  const std::size_t count = std::size_t(p.rows) * p.topk;
  DeviceBuffer<std::int32_t> out(count + 1);
  auto page_table = upload_or_null(p.page_table);
  auto cu = upload_or_null(p.cu_seqlens_q);
  auto offsets = upload_or_null(p.offsets);
  nsajit::IndexTransformArgs a;
  a.mode = p.mode;
  a.topk_indices = indices.get();
  a.out = out.get() + (misalign_out ? 1 : 0);
  a.rows = p.rows;
  a.topk = p.topk;
  a.page_table = page_table ? page_table->get() : nullptr;
  a.page_table_width = p.page_table_width;
  a.page_table_row_stride = p.page_table_row_stride;
  a.page_size = p.page_size;
  a.cu_seqlens_q = cu ? cu->get() : nullptr;
  a.num_requests = p.num_requests;
  a.offsets = offsets ? offsets->get() : nullptr;
  out.poison();
  nsajit::index_transform(a);
  const I all = out.download();
  const auto begin = all.begin() + (misalign_out ? 1 : 0);
  return I(begin, begin + std::ptrdiff_t(count));
}

void check_transform(const ref::IndexTransformProblem& p) {
  const I expected = ref::index_transform(p);
  for (const bool misalign : {false, true}) {
    INFO("misaligned output: " << misalign);
    const std::string diff = ref::first_difference(run_transform(p, misalign), expected, p.topk);
    CHECK_MESSAGE(diff.empty(), diff);
  }
}

// page_table_1 [rows, width] over a shuffled pool of pages of size P (slot = page * P + offset).
I shuffled_page_table_1(std::mt19937& rng, int rows, int width, int P) {
  const int pages_per_row = (width + P - 1) / P;
  std::vector<int> pages(std::size_t(rows) * pages_per_row);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  I table(std::size_t(rows) * width);
  for (int r = 0; r < rows; ++r)
    for (int q = 0; q < width; ++q)
      table[std::size_t(r) * width + q] = pages[std::size_t(r) * pages_per_row + q / P] * P + q % P;
  return table;
}

// Index rows with -1 at the front, middle and end, all -1 rows, out-of-range and negative
// positions, and valid positions in [0, max_position).
I edge_indices(std::mt19937& rng, int rows, int topk, long long max_position) {
  std::uniform_int_distribution<long long> valid(0, std::max(0LL, max_position - 1));
  I idx(std::size_t(rows) * topk);
  for (int r = 0; r < rows; ++r) {
    std::int32_t* row = idx.data() + std::size_t(r) * topk;
    for (int j = 0; j < topk; ++j) {
      const unsigned c = rng() % 16;
      row[j] = c == 0   ? -1
               : c == 1 ? std::int32_t(max_position + rng() % 5)  // just out of range
               : c == 2 ? -std::int32_t(rng() % 1000) - 2
               : max_position > 0 ? std::int32_t(valid(rng))
                                  : -1;
    }
    switch (r % 5) {
      case 0: std::fill(row, row + topk / 4, -1); break;                      // -1 at the front
      case 1: std::fill(row + topk / 3, row + topk / 2, -1); break;           // in the middle
      case 2: std::fill(row + topk - topk / 4, row + topk, -1); break;        // at the end
      case 3: std::fill(row, row + topk, -1); break;                          // all -1
      default: row[topk - 1] = std::int32_t(max_position - 1); row[0] = 0; break;  // both ends
    }
  }
  return idx;
}

}  // namespace

TEST_CASE("index_transform gpu: decode, page size 1, edge positions") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  for (const int topk : {64, 2048, 16384}) {
    INFO("topk " << topk);
    const int rows = 11, width = 5000, stride = 5003;  // padded page-table rows
    I table(std::size_t(rows) * stride);
    for (auto& e : table) e = std::int32_t(rng() % 1000000);
    table[7] = -1;  // a negative entry gives -1
    ref::IndexTransformProblem p{ref::decode_tables(table, rows, width), edge_indices(rng, rows, topk, width), rows,
                                 topk};
    p.page_table_row_stride = stride;
    p.topk_indices[0] = 7;
    check_transform(p);
  }
}

TEST_CASE("index_transform gpu: page sizes 1, 3 and 64 give the same slots") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  const int rows = 9, topk = 2048;
  for (const int P : {3, 64}) {
    INFO("page size " << P);
    const int width = 40 * P + 5;  // last page partly used
    const I page_table_1 = shuffled_page_table_1(rng, rows, width, P);
    // {tables, topk_indices, rows, topk}
    ref::IndexTransformProblem p1{ref::decode_tables(page_table_1, rows, width), edge_indices(rng, rows, topk, width),
                                  rows, topk};
    check_transform(p1);

    ref::IndexTransformProblem pp{ref::decode_tables(page_table_1, rows, width, P), p1.topk_indices, rows, topk};
    // Positions beyond page_table_1's width exist in the real table's last page; keep them out
    // so both forms must agree everywhere.
    for (auto& i : pp.topk_indices) if (i >= width) i = -7;
    p1.topk_indices = pp.topk_indices;
    check_transform(pp);
    CHECK(run_transform(pp) == run_transform(p1));
  }
}

TEST_CASE("index_transform gpu: prefill with 3 requests through cu_seqlens_q") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  for (const int P : {1, 64}) {
    INFO("page size " << P);
    ref::IndexTransformProblem p;
    p.mode = IndexMode::prefill;
    p.topk = 2048;
    p.page_size = P;
    p.num_requests = 3;
    p.cu_seqlens_q = ref::cu_seqlens({5, 0, 9});  // an empty request in the middle
    p.rows = p.cu_seqlens_q.back();
    p.page_table_width = 3000 / P + 1;
    p.page_table.resize(std::size_t(p.num_requests) * p.page_table_width);
    for (auto& e : p.page_table) e = std::int32_t(rng() % 100000);
    p.topk_indices = edge_indices(rng, p.rows, p.topk, std::int64_t(p.page_table_width) * P);
    check_transform(p);

    // Rows outside [cu_seqlens_q[0], cu_seqlens_q[num_requests]) are all -1.
    ref::IndexTransformProblem q = p;
    q.cu_seqlens_q = {2, 6, 6, 10};
    check_transform(q);
    const I got = run_transform(q);
    CHECK(std::all_of(got.begin(), got.begin() + 2 * q.topk, [](int v) { return v == -1; }));
  }
}

TEST_CASE("index_transform gpu: ragged offsets") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  ref::IndexTransformProblem p;
  p.mode = IndexMode::ragged;
  p.rows = 13;
  p.topk = 2048;
  for (int r = 0; r < p.rows; ++r) p.offsets.push_back(std::int32_t(r * 70000 + rng() % 100));
  p.topk_indices = edge_indices(rng, p.rows, p.topk, 70000);
  check_transform(p);
}

// --- host-side argument checks: no GPU needed ----------------------------------------------------

namespace {

nsajit::IndexTransformArgs valid_transform_args() {
  static std::int32_t storage;  // fake device pointers, never dereferenced
  return {.mode = IndexMode::decode, .topk_indices = &storage, .out = &storage, .rows = 4, .topk = 2048,
          .page_table = &storage, .page_table_width = 100, .page_size = 64, .cu_seqlens_q = &storage,
          .num_requests = 4, .offsets = &storage};
}

}  // namespace

TEST_CASE("index_transform arguments: each bad argument is named before anything is launched") {
  using Args = nsajit::IndexTransformArgs;
  nsajit::test::check_bad_arguments<Args>(
      [](const Args& a) { nsajit::index_transform(a); }, valid_transform_args(),
      {{[](Args& a) { a.topk = 100; },
        "nsajit::index_transform: argument topk = 100: expected a multiple of 64 in [64, 16384]", true},
       {[](Args& a) { a.topk = 16448; }, "argument topk = 16448"},
       {[](Args& a) { a.rows = -1; }, "argument rows = -1"},
       {[](Args& a) { a.page_size = 0; }, "argument page_size = 0"},
       {[](Args& a) { a.page_size = 5000; }, "argument page_size = 5000"},
       {[](Args& a) { a.page_table_width = -1; }, "argument page_table_width = -1"},
       {[](Args& a) { a.page_table_row_stride = 99; }, "argument page_table_row_stride = 99"},
       {[](Args& a) { a.num_requests = 3; }, "argument num_requests = 3"},  // decode: num_requests == rows
       {[](Args& a) { a.page_table = nullptr; }, "argument page_table = null"},
       {[](Args& a) { a.topk_indices = nullptr; }, "argument topk_indices = null"},
       {[](Args& a) { a.out = nullptr; }, "argument out = null"},
       {[](Args& a) { a.mode = IndexMode::prefill; a.num_requests = -1; }, "argument num_requests = -1"},
       {[](Args& a) { a.mode = IndexMode::prefill; a.num_requests = 2; a.cu_seqlens_q = nullptr; },
        "argument cu_seqlens_q = null"},
       {[](Args& a) { a.mode = IndexMode::ragged; a.offsets = nullptr; }, "argument offsets = null"},
       {[](Args& a) { a.mode = static_cast<IndexMode>(7); }, "argument mode = 7"}});
}

TEST_CASE("index_transform arguments: rows == 0 launches nothing (null pointers allowed)") {
  nsajit::IndexTransformArgs a;
  a.rows = 0;
  a.num_requests = 0;
  CHECK_NOTHROW(nsajit::index_transform(a));  // returns before any driver call: no GPU needed
}
