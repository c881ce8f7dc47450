// test_reference_mla.cpp — the fp64 sparse MLA reference (§3), its tolerance check and the host
// bf16 helpers, against hand-computed cases. CPU only; the GPU tests trust these.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reference/bf16.hpp"
#include "reference/sparse_mla.hpp"

namespace ref = nsajit::reference;
using I = std::vector<std::int32_t>;
using B = std::vector<std::uint16_t>;

namespace {

constexpr int D = ref::kMlaDimQK;
constexpr int DV = ref::kMlaDimV;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::uint16_t bf(float v) { return ref::float_to_bf16(v); }
float fl(std::uint16_t b) { return ref::bf16_to_float(b); }

// A pool of `slots` rows where row s holds (s + 1) / 8 in latent dim 0, s / 4 in latent dim 1 and
// 0.5 in rope dim 575, zeros elsewhere (all exact in bf16), row stride `stride`.
B small_pool(int slots, int stride = D) {
  B kv(std::size_t(slots) * stride, 0);
  for (int s = 0; s < slots; ++s) {
    kv[std::size_t(s) * stride + 0] = bf(float(s + 1) / 8.f);
    kv[std::size_t(s) * stride + 1] = bf(float(s) / 4.f);
    kv[std::size_t(s) * stride + 575] = bf(0.5f);
  }
  return kv;
}

// One query row, one head: q = e_0 * q0 + e_575 * q575.
B one_q(float q0, float q575) {
  B q(D, 0);
  q[0] = bf(q0);
  q[575] = bf(q575);
  return q;
}

ref::SparseMlaOutput run_ref(const B& q, const B& kv, std::int64_t slots, const I& idx, double scale,
                             const I& lengths = {}, std::int64_t stride = D, int h_q = 1) {
  ref::SparseMlaInput in;
  in.q = q;
  in.kv = kv;
  in.num_slots = slots;
  in.kv_row_stride = stride;
  in.indices = idx;
  in.topk_length = lengths;
  in.rows = int(lengths.empty() ? 1 : lengths.size());
  in.h_q = h_q;
  in.topk = int(idx.size()) / in.rows;
  in.sm_scale = scale;
  return ref::sparse_mla(in);
}

}  // namespace

TEST_CASE("reference mla: one valid index gives that V row and lse = its score") {
  const B kv = small_pool(4);
  const B q = one_q(2.f, 1.f);  // score of slot 2: (2 * 3/8 + 1 * 0.5) * 0.5 = 0.625
  const auto r = run_ref(q, kv, 4, I{-1, 2, -1, -1}, 0.5);
  CHECK(r.lse[0] == doctest::Approx(0.625).epsilon(1e-15));
  CHECK(r.out[0] == 3.0 / 8.0);
  CHECK(r.out[1] == 0.5);
  for (int d = 2; d < DV; ++d) CHECK(r.out[d] == 0.0);  // rope dim 575 is not part of V
}

TEST_CASE("reference mla: two equal scores average their V rows; lse adds ln 2") {
  const B kv = small_pool(4);
  const B q = one_q(0.f, 1.f);  // only the rope dim: every slot scores 0.5 * scale
  const auto r = run_ref(q, kv, 4, I{1, 3}, 2.0);
  CHECK(r.lse[0] == doctest::Approx(1.0 + std::log(2.0)).epsilon(1e-15));
  CHECK(r.out[0] == doctest::Approx((2.0 / 8 + 4.0 / 8) / 2).epsilon(1e-15));
  CHECK(r.out[1] == doctest::Approx((1.0 / 4 + 3.0 / 4) / 2).epsilon(1e-15));
}

TEST_CASE("reference mla: scores 0 and ln 3 weigh 1/4 and 3/4") {
  // kv rows a and b with q . a = 0 and q . b = ln 3 / scale.
  B kv(2 * D, 0);
  kv[0 * D + 0] = bf(1.f);   // V_a[0] = 1, score 0 (q[575] = 0 on this row's rope)
  kv[1 * D + 1] = bf(1.f);   // V_b[1] = 1
  kv[1 * D + 575] = bf(1.f); // rope of b
  B q(D, 0);
  q[575] = bf(1.f);  // q . a = 0, q . b = 1
  const double scale = std::log(3.0);
  const auto r = run_ref(q, kv, 2, I{0, 1}, scale);
  CHECK(r.out[0] == doctest::Approx(0.25).epsilon(1e-14));
  CHECK(r.out[1] == doctest::Approx(0.75).epsilon(1e-14));
  CHECK(r.lse[0] == doctest::Approx(std::log(4.0)).epsilon(1e-14));
  CHECK(r.max_logits[0] == doctest::Approx(std::log(3.0)).epsilon(1e-14));  // max S, natural units
}

TEST_CASE("reference mla: max_logits is -inf without a valid index; compare_max_logits checks it") {
  const B kv = small_pool(4);
  const B q = one_q(2.f, 1.f);
  const auto empty = run_ref(q, kv, 4, I{-1, -1, 7, -3}, 0.5);
  CHECK(empty.max_logits[0] == -kInf);
  const auto one = run_ref(q, kv, 4, I{-1, 2, -1, -1}, 0.5);
  CHECK(one.max_logits[0] == doctest::Approx(0.625).epsilon(1e-15));
  std::string msg;
  CHECK(ref::compare_max_logits(std::vector<float>{0.625f}, one, msg) == 0);
  CHECK(ref::compare_max_logits(std::vector<float>{0.626f}, one, msg) == 1);
  CHECK(msg.find("max_logits[0]") != std::string::npos);
  CHECK(ref::compare_max_logits(std::vector<float>{-std::numeric_limits<float>::infinity()}, empty, msg) == 0);
  CHECK(ref::compare_max_logits(std::vector<float>{0.f}, empty, msg) == 1);
}

TEST_CASE("reference mla: no valid index gives out 0 and lse +inf") {
  const B kv = small_pool(4);
  const B q = one_q(1.f, 1.f);
  // -1, other negatives, num_slots and beyond are all invalid.
  const auto r = run_ref(q, kv, 4, I{-1, -7, 4, std::numeric_limits<std::int32_t>::max()}, 1.0);
  CHECK(r.lse[0] == kInf);
  for (int d = 0; d < DV; ++d) CHECK(r.out[d] == 0.0);
}

TEST_CASE("reference mla: topk_length uses only the first n entries, clamped to [0, topk]") {
  const B kv = small_pool(4);
  // Two rows, one head each; q scores slot s as (s + 1) / 8 (dim 0 only), scale 1.
  B q(2 * D, 0);
  q[0] = bf(1.f);
  q[D] = bf(1.f);
  const I idx{0, 3, 3, 3, /* row 1 */ 1, 2, 3, 0};
  // Row 0: n = 1 -> only slot 0. Row 1: n = 99 -> all four.
  auto r = run_ref(q, kv, 4, idx, 1.0, I{1, 99});
  CHECK(r.out[0] == doctest::Approx(1.0 / 8).epsilon(1e-15));
  CHECK(r.lse[0] == doctest::Approx(1.0 / 8).epsilon(1e-15));
  double sum = 0;
  for (int s = 0; s < 4; ++s) sum += std::exp((s + 1) / 8.0);
  CHECK(r.lse[1] == doctest::Approx(std::log(sum)).epsilon(1e-14));
  // n <= 0 -> nothing valid.
  r = run_ref(q, kv, 4, idx, 1.0, I{0, -5});
  CHECK(r.lse[0] == kInf);
  CHECK(r.lse[1] == kInf);
  CHECK(r.out[DV] == 0.0);
}

TEST_CASE("reference mla: kv_row_stride > 576 and several heads") {
  const int stride = 640;
  B kv = small_pool(3, stride);
  for (int s = 0; s < 3; ++s)
    for (int d = D; d < stride; ++d) kv[std::size_t(s) * stride + d] = ref::kBf16QuietNaN;  // padding unread
  B q(2 * D, 0);  // head 0 scores by dim 0, head 1 by dim 1
  q[0] = bf(1.f);
  q[D + 1] = bf(1.f);
  const auto r = run_ref(q, kv, 3, I{2}, 1.0, {}, stride, /*h_q=*/2);
  CHECK(r.lse[0] == doctest::Approx(3.0 / 8).epsilon(1e-15));
  CHECK(r.lse[1] == doctest::Approx(2.0 / 4).epsilon(1e-15));
  CHECK(r.out[0] == 3.0 / 8);
  CHECK(r.out[DV + 1] == 0.5);
  for (double v : r.out) CHECK(std::isfinite(v));
}

TEST_CASE("reference mla: compare_sparse_mla accepts the spec's tolerance and rejects the rest") {
  ref::SparseMlaOutput want;
  want.out.assign(2 * DV, 0.0);
  want.lse = {1.5, kInf};  // head 1: no valid index
  for (int d = 0; d < DV; ++d) want.out[d] = 0.25 + d / 1024.0;
  B got(2 * DV, 0);
  for (int d = 0; d < DV; ++d) got[d] = bf(float(want.out[d]));
  std::vector<float> lse{1.5f, std::numeric_limits<float>::infinity()};

  auto c = ref::compare_sparse_mla(got, lse, want, 1, 2);
  CHECK_MESSAGE(c.ok, c.message);
  CHECK(c.cos_diff < 1e-5);

  SUBCASE("lse off by 1e-4 fails") {
    lse[0] = 1.5001f;
    c = ref::compare_sparse_mla(got, lse, want, 1, 2);
    CHECK_FALSE(c.ok);
    CHECK(c.lse_failures == 1);
  }
  SUBCASE("finite lse where the reference has +inf fails") {
    lse[1] = 1e30f;
    CHECK_FALSE(ref::compare_sparse_mla(got, lse, want, 1, 2).ok);
  }
  SUBCASE("non-zero out of a row without valid indices fails, even below 1e-3") {
    got[DV + 7] = bf(1e-6f);
    c = ref::compare_sparse_mla(got, lse, want, 1, 2);
    CHECK_FALSE(c.ok);
    CHECK(c.message.find("head 1, dim 7") != std::string::npos);
  }
  SUBCASE("an element off by 5% fails") {
    got[3] = bf(float(want.out[3] * 1.05));
    c = ref::compare_sparse_mla(got, lse, want, 1, 2);
    CHECK_FALSE(c.ok);
    CHECK(c.out_failures == 1);
  }
  SUBCASE("NaN in out fails") {
    got[0] = ref::kBf16QuietNaN;
    CHECK_FALSE(ref::compare_sparse_mla(got, lse, want, 1, 2).ok);
  }
  SUBCASE("-0.0 counts as exactly zero") {
    got[DV] = 0x8000;
    CHECK(ref::compare_sparse_mla(got, lse, want, 1, 2).ok);
  }
}

TEST_CASE("reference mla: the default tolerance's 3e-3 floor passes what the precise 1e-3 floor fails") {
  ref::SparseMlaOutput want;
  want.out.assign(DV, 0.0);
  want.lse = {1.5};
  for (int d = 0; d < DV; ++d) want.out[d] = 0.25 + d / 1024.0;
  want.out[5] = 0.05;  // small: 2/128 |ref| = 7.8e-4 lies below both floors
  B got(DV, 0);
  for (int d = 0; d < DV; ++d) got[d] = bf(float(want.out[d]));
  const std::vector<float> lse{1.5f};
  CHECK(ref::sparse_mla_abs_tolerance(false) == 3e-3);
  CHECK(ref::sparse_mla_abs_tolerance(true) == 1e-3);

  SUBCASE("off by 2e-3 (bf16 P's error where |ref| is small): default passes, precise fails") {
    got[5] = bf(0.052f);
    const auto field = ref::compare_sparse_mla(got, lse, want, 1, 1);
    CHECK_MESSAGE(field.ok, field.message);
    const auto precise = ref::compare_sparse_mla(got, lse, want, 1, 1, true);
    CHECK_FALSE(precise.ok);
    CHECK(precise.out_failures == 1);
    CHECK(precise.message.find("dim 5") != std::string::npos);
  }
  SUBCASE("off by 4e-3: both fail") {
    got[5] = bf(0.054f);
    CHECK_FALSE(ref::compare_sparse_mla(got, lse, want, 1, 1).ok);
    CHECK_FALSE(ref::compare_sparse_mla(got, lse, want, 1, 1, true).ok);
  }
  SUBCASE("off by 5e-4: both pass") {
    got[5] = bf(0.0505f);
    CHECK(ref::compare_sparse_mla(got, lse, want, 1, 1).ok);
    CHECK(ref::compare_sparse_mla(got, lse, want, 1, 1, true).ok);
  }
}

TEST_CASE("reference mla bf16: round to nearest even, ties to even") {
  CHECK(bf(1.0f) == 0x3f80);
  CHECK(bf(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie, 0x3f80 even: down
  CHECK(bf(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie, 0x3f81 odd: up
  CHECK(bf(std::bit_cast<float>(0x3f808001u)) == 0x3f81);  // above the tie: up
  CHECK(bf(std::bit_cast<float>(0x3f807fffu)) == 0x3f80);  // below the tie: down
  CHECK(bf(std::bit_cast<float>(0xbf818000u)) == 0xbf82);  // negative tie: magnitude to even
  CHECK(bf(-0.0f) == 0x8000);
  CHECK(bf(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(bf(std::numeric_limits<float>::max()) == ref::kBf16PosInf);  // rounds past bf16 max
  CHECK(bf(std::bit_cast<float>(0x7f7f7fffu)) == 0x7f7f);           // largest below the tie
}

TEST_CASE("reference mla bf16: inf and NaN survive the conversion") {
  CHECK(bf(std::numeric_limits<float>::infinity()) == ref::kBf16PosInf);
  CHECK(bf(-std::numeric_limits<float>::infinity()) == ref::kBf16NegInf);
  CHECK(bf(std::numeric_limits<float>::quiet_NaN()) == ref::kBf16QuietNaN);
  // Payload only in the low 16 bits: plain truncation or rounding would give inf.
  const std::uint16_t low_payload = bf(std::bit_cast<float>(0x7f800001u));
  CHECK(std::isnan(fl(low_payload)));
  const std::uint16_t neg_nan = bf(std::bit_cast<float>(0xffc00000u));
  CHECK(std::isnan(fl(neg_nan)));
  CHECK((neg_nan & 0x8000) != 0);
  CHECK(std::isnan(fl(ref::kBf16QuietNaN)));
  CHECK(fl(ref::kBf16PosInf) == std::numeric_limits<float>::infinity());
}

TEST_CASE("reference mla bf16: every non-NaN bf16 round-trips exactly") {
  int mismatches = 0;
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = fl(std::uint16_t(b));
    if (std::isnan(f)) {
      mismatches += !std::isnan(fl(bf(f)));
      continue;
    }
    mismatches += bf(f) != b;
  }
  CHECK(mismatches == 0);
  const std::vector<float> v{1.f, -2.5f, 3.140625f};
  CHECK(ref::from_bf16(ref::to_bf16(v)) == v);
}
