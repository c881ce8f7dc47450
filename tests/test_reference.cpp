// test_reference.cpp — the CPU references of §1 (index transform) and §2 (top-k) against
// hand-computed cases. CPU only; the GPU tests trust these references.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "reference/index_transform.hpp"
#include "reference/topk.hpp"

namespace ref = nsajit::reference;
using nsajit::IndexMode;
using I = std::vector<std::int32_t>;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// One-row top-k with a small topk (the reference accepts any topk >= 1); row_starts empty = none.
I topk_row(const std::vector<float>& scores, int length, int topk, I row_starts = {}) {
  ref::TopkProblem p;
  p.scores = scores;
  p.rows = 1;
  p.width = int(scores.size());
  p.lengths = {length};
  p.row_starts = row_starts;
  p.topk = topk;
  return ref::topk(p);
}

}  // namespace

TEST_CASE("reference topk: order_key ranks NaN lowest and merges -0.0 with +0.0") {
  const float denorm = std::numeric_limits<float>::denorm_min();
  const float max = std::numeric_limits<float>::max();
  const std::vector<float> ascending = {-kInf, -max, -1.0f, -denorm, 0.0f, denorm, 1.0f, max, kInf};
  for (std::size_t i = 1; i < ascending.size(); ++i)
    CHECK(ref::order_key(ascending[i - 1]) < ref::order_key(ascending[i]));
  CHECK(ref::order_key(kNaN) < ref::order_key(-kInf));
  CHECK(ref::order_key(-kNaN) == ref::order_key(kNaN));
  CHECK(ref::order_key(-0.0f) == ref::order_key(0.0f));
  CHECK(ref::order_key(-0.0f) > ref::order_key(-denorm));
  CHECK(ref::order_key(-0.0f) < ref::order_key(denorm));
}

TEST_CASE("reference topk: lengths <= 0, <= topk, clamped; scores unread when len <= topk") {
  ref::TopkProblem p;
  p.rows = 5;
  p.width = 4;
  p.topk = 4;
  // NaN everywhere: with len <= topk the scores must not matter.
  p.scores.assign(std::size_t(p.rows) * p.width, kNaN);
  p.lengths = {0, -5, 3, 4, 1000};  // the last clamps to width = 4
  const I expected = {-1, -1, -1, -1,  //
                      -1, -1, -1, -1,  //
                      0,  1,  2,  -1,  //
                      0,  1,  2,  3,   //
                      0,  1,  2,  3};
  CHECK(ref::topk(p) == expected);
}

TEST_CASE("reference topk: ties go to the lower index, output score-descending") {
  const std::vector<float> s = {1.f, 5.f, 5.f, 3.f, 5.f, 7.f};
  CHECK(topk_row(s, 6, 1) == I{5});
  CHECK(topk_row(s, 6, 2) == I{5, 1});
  CHECK(topk_row(s, 6, 3) == I{5, 1, 2});
  CHECK(topk_row(s, 6, 4) == I{5, 1, 2, 4});
  CHECK(topk_row(s, 6, 5) == I{5, 1, 2, 4, 3});
  // Length 5 hides index 5 (the 7).
  CHECK(topk_row(s, 5, 2) == I{1, 2});
  // A plateau: the first topk indices.
  CHECK(topk_row(std::vector<float>(10, 2.5f), 10, 3) == I{0, 1, 2});
}

TEST_CASE("reference topk: NaN below -inf, -0.0 equals +0.0, infinities") {
  CHECK(topk_row({kNaN, -kInf, kNaN, -1.f}, 4, 2) == I{3, 1});
  CHECK(topk_row({kNaN, -kInf, kNaN, -1.f}, 4, 3) == I{3, 1, 0});
  CHECK(topk_row({kNaN, kNaN, kNaN}, 3, 2) == I{0, 1});
  // -0.0 and +0.0 tie, so the lower index wins (a raw-bit order would rank +0.0 first).
  CHECK(topk_row({-0.0f, 0.0f, -1.f}, 3, 1) == I{0});
  CHECK(topk_row({0.0f, -0.0f, -1.f}, 3, 1) == I{0});
  CHECK(topk_row({1.f, kInf, -kInf, kInf, 2.f}, 5, 3) == I{1, 3, 4});
  CHECK(topk_row({-3.f, -kInf, -2.f, -7.f}, 4, 2) == I{2, 0});
}

TEST_CASE("reference topk: row_starts, clamping and row stride") {
  // Positions are relative to row_start; len is clamped to width - row_start.
  const std::vector<float> s = {9.f, 9.f, 1.f, 5.f, 3.f, 4.f};
  CHECK(topk_row(s, 4, 2, {2}) == I{1, 3});        // values {1, 5, 3, 4}
  CHECK(topk_row(s, 100, 2, {2}) == I{1, 3});      // len clamped to 4
  CHECK(topk_row(s, 100, 3, {4}) == I{0, 1, -1});  // len clamped to 2 <= topk
  CHECK(topk_row(s, 100, 2, {9}) == I{-1, -1});    // row_start clamped to width: len 0
  CHECK(topk_row(s, 3, 1, {-2}) == I{0});          // row_start clamped to 0

  ref::TopkProblem p;
  p.rows = 2;
  p.width = 3;
  p.score_row_stride = 5;  // two padding columns per row, never read
  p.scores = {1.f, 3.f, 2.f, 100.f, 100.f,  //
              6.f, 4.f, 5.f, 100.f, 100.f};
  p.lengths = {3, 3};
  p.row_starts = {-4, 1};  // -4 clamps to 0; row 1 sees {4, 5}
  p.topk = 1;
  CHECK(ref::topk(p) == I{1, 1});
  CHECK(ref::length_of(p, 0) == 3);
  CHECK(ref::length_of(p, 1) == 2);
  CHECK(ref::row_start_of(p, 0) == 0);
}

TEST_CASE("reference topk: topk_mismatch accepts reorderings and names each kind of error") {
  ref::TopkProblem p;
  p.rows = 2;
  p.width = 5;
  p.topk = 3;
  p.scores = {1.f, 5.f, 5.f, 3.f, 5.f,  //
              0.f, 0.f, 0.f, 0.f, 0.f};
  p.lengths = {5, 2};
  const I want = ref::topk(p);
  REQUIRE(want == I{1, 2, 4, 0, 1, -1});
  CHECK(ref::same_selection(p, I{4, 1, 2, 1, 0, -1}, want));  // order within a row is free
  CHECK(ref::topk_mismatch(p, I{1, 2, 3, 0, 1, -1}, want).find("value multiset") != std::string::npos);
  CHECK(ref::topk_mismatch(p, I{1, 2, 4, 0, -1, 1}, want).find("after a -1") != std::string::npos);
  CHECK(ref::topk_mismatch(p, I{1, 1, 4, 0, 1, -1}, want).find("duplicate") != std::string::npos);
  CHECK(ref::topk_mismatch(p, I{1, 2, 4, 0, 2, -1}, want).find("outside") != std::string::npos);
  CHECK(ref::topk_mismatch(p, I{1, 2, 4, 0, -1, -1}, want).find("valid entries") != std::string::npos);
  CHECK(ref::topk_mismatch(p, I{1, 2, 4, 0, 1}, want).find("size") != std::string::npos);
  // Same values but another index set: only the tie rule is broken (needs a plateau row).
  p.scores = {5.f, 5.f, 5.f, 5.f, 5.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  const I plateau = ref::topk(p);
  REQUIRE(plateau == I{0, 1, 2, 0, 1, -1});
  CHECK(ref::topk_mismatch(p, I{0, 1, 3, 0, 1, -1}, plateau).find("ties") != std::string::npos);
}

TEST_CASE("reference topk: random rows agree with a brute-force count") {
  // Independent check: an index is selected iff fewer than topk entries rank above it
  // (greater key, or equal key at a lower index).
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> small(-3, 3);
  ref::TopkProblem p;
  p.rows = 20;
  p.width = 50;
  p.topk = 7;
  for (int i = 0; i < p.rows * p.width; ++i) {
    const int v = small(rng);
    p.scores.push_back(v == 3 ? kNaN : v == -3 ? -0.0f : float(v));
  }
  for (int r = 0; r < p.rows; ++r) p.lengths.push_back(r * 3 - 5);
  const I got = ref::topk(p);
  for (int r = 0; r < p.rows; ++r) {
    const int len = ref::length_of(p, r);
    std::vector<bool> want(std::max(len, 0), false);
    for (int i = 0; i < len; ++i) {
      const auto ki = ref::order_key(p.scores[r * p.width + i]);
      int above = 0;
      for (int j = 0; j < len; ++j) {
        const auto kj = ref::order_key(p.scores[r * p.width + j]);
        above += kj > ki || (kj == ki && j < i);
      }
      want[i] = above < p.topk;
    }
    std::vector<bool> have(std::max(len, 0), false);
    int valid = 0;
    for (int j = 0; j < p.topk; ++j) {
      const int idx = got[r * p.topk + j];
      if (idx < 0) continue;
      ++valid;
      REQUIRE(idx < len);
      have[idx] = true;
    }
    INFO("row " << r);
    CHECK(valid == std::clamp(len, 0, p.topk));
    CHECK(have == want);
  }
}

TEST_CASE("reference index_transform: decode, page size 1") {
  // {tables, topk_indices, rows, topk}: 2 rows, page-table rows of 4 entries and a padding column.
  ref::IndexTransformProblem p{ref::decode_tables({10, 11, 12, -1, 777,  //
                                                   20, 21, 22, 23, 777},
                                                  2, 4),
                               {0, -1, 2, 3, 4, 1,  // 3 -> negative entry, 4 -> out of range (max_position 4)
                                3, 2, 1, 0, -7, 5},
                               2, 6};
  p.page_table_row_stride = 5;
  const I expected = {10, -1, 12, -1, -1, 11,  //
                      23, 22, 21, 20, -1, -1};
  CHECK(ref::index_transform(p) == expected);
}

TEST_CASE("reference index_transform: page size 3 by hand and through real_page_table") {
  ref::IndexTransformProblem p;
  p.mode = IndexMode::decode;
  p.rows = 1;
  p.topk = 10;
  p.page_size = 3;
  p.page_table_width = 3;  // max_position = 9
  p.page_table = {5, 2, -1};  // page 2 unmapped: positions 6..8 give -1 (not -3 + offset)
  p.num_requests = 1;
  p.topk_indices = {0, 2, 3, 5, 6, -1, 4, 1, 7, 9};
  CHECK(ref::index_transform(p) == I{15, 17, 6, 8, -1, -1, 7, 16, -1, -1});

  // page_table_1 with pages 4, 0, 7 (width 8: the last page is partly used).
  const I page_table_1 = {12, 13, 14, 0, 1, 2, 21, 22};
  CHECK(ref::real_page_table(page_table_1, 1, 8, 3) == I{4, 0, 7});
  CHECK(ref::real_page_table(I{-1, -1, 6, 7}, 2, 2, 2) == I{-1, 3});
}

TEST_CASE("reference index_transform: page sizes 1, 3, 64 agree on a shuffled pool") {
  std::mt19937 rng(7);
  for (const int P : {1, 3, 64}) {
    const int rows = 3, width = 5 * P + (P > 1 ? 1 : 0), topk = 64;
    const int pages_per_row = (width + P - 1) / P;
    std::vector<int> pages(rows * pages_per_row);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    I page_table_1(rows * width);
    for (int r = 0; r < rows; ++r)
      for (int q = 0; q < width; ++q) page_table_1[r * width + q] = pages[r * pages_per_row + q / P] * P + q % P;
    ref::IndexTransformProblem p;
    p.mode = IndexMode::decode;
    p.rows = rows;
    p.topk = topk;
    p.num_requests = rows;
    std::uniform_int_distribution<int> pos(-2, width + 2);
    for (int i = 0; i < rows * topk; ++i) p.topk_indices.push_back(pos(rng));
    // Page size 1 over page_table_1 = the spec's definition.
    p.page_table = page_table_1;
    p.page_table_width = width;
    const I by_slots = ref::index_transform(p);
    for (int i = 0; i < rows * topk; ++i) {
      const int idx = p.topk_indices[i];
      CHECK(by_slots[i] == (idx >= 0 && idx < width ? page_table_1[(i / topk) * width + idx] : -1));
    }
    // Page size P over the real page table. Its rows cover pages_per_row * P >= width positions,
    // so compare only where the position exists in page_table_1.
    p.page_table = ref::real_page_table(page_table_1, rows, width, P);
    p.page_table_width = pages_per_row;
    p.page_size = P;
    const I by_pages = ref::index_transform(p);
    for (int i = 0; i < rows * topk; ++i) {
      const int idx = p.topk_indices[i];
      if (idx < width) CHECK(by_pages[i] == by_slots[i]);
      else if (idx >= pages_per_row * P) CHECK(by_pages[i] == -1);
    }
  }
}

TEST_CASE("reference index_transform: prefill with 2 requests, ragged offsets") {
  ref::IndexTransformProblem p;
  p.mode = IndexMode::prefill;
  p.rows = 6;  // row 5 belongs to no request
  p.topk = 2;
  p.page_table_width = 3;
  p.page_table = {100, 101, 102,  //
                  200, 201, 202};
  p.num_requests = 2;
  p.cu_seqlens_q = ref::cu_seqlens({2, 3});
  REQUIRE(p.cu_seqlens_q == I{0, 2, 5});
  p.topk_indices = {0, 2, 1, -1, 0, 2, 1, 3, 2, 1, 0, 0};
  CHECK(ref::index_transform(p) == I{100, 102, 101, -1, 200, 202, 201, -1, 202, 201, -1, -1});
  CHECK(ref::request_of_row(p.cu_seqlens_q, 2, 1) == 0);
  CHECK(ref::request_of_row(p.cu_seqlens_q, 2, 2) == 1);
  CHECK(ref::request_of_row(p.cu_seqlens_q, 2, 5) == -1);
  // An empty request in the middle is skipped.
  CHECK(ref::request_of_row(I{0, 1, 1, 3}, 3, 1) == 2);

  ref::IndexTransformProblem g;
  g.mode = IndexMode::ragged;
  g.rows = 2;
  g.topk = 3;
  g.offsets = {0, 100};
  g.topk_indices = {-1, 0, 7, 5, -3, 0};
  CHECK(ref::index_transform(g) == I{-1, 0, 7, 105, -1, 100});
}

TEST_CASE("reference index_transform: first_difference") {
  CHECK(ref::first_difference(I{1, 2, 3, 4}, I{1, 2, 3, 4}, 2).empty());
  CHECK(ref::first_difference(I{1, 2, 3, 4}, I{1, 2, 3, 5}, 2) == "row 1, column 1: got 4, expected 5");
  CHECK(!ref::first_difference(I{1, 2}, I{1, 2, 3}, 2).empty());
}
