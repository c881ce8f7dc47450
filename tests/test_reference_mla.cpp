// test_reference_mla.cpp — the fp64 sparse MLA reference (§3), its tolerance check and the host
// bf16 helpers, against hand-computed cases. CPU only; the GPU tests trust these.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
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
  want.out_abs = want.out;  // as one V row: sum p|v| = |ref|, below the other terms
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
  SUBCASE("a reference without out_abs is a size error") {
    want.out_abs.clear();
    CHECK_FALSE(ref::compare_sparse_mla(got, lse, want, 1, 2).ok);
  }
}

TEST_CASE("reference mla: the default tolerance's 3e-3 floor passes what the precise 1e-3 floor fails") {
  ref::SparseMlaOutput want;
  want.out.assign(DV, 0.0);
  want.lse = {1.5};
  for (int d = 0; d < DV; ++d) want.out[d] = 0.25 + d / 1024.0;
  want.out[5] = 0.05;  // small: 2/128 |ref| = 7.8e-4 lies below both floors
  want.out_abs = want.out;
  B got(DV, 0);
  for (int d = 0; d < DV; ++d) got[d] = bf(float(want.out[d]));
  const std::vector<float> lse{1.5f};
  using T = ref::MlaTolerance;
  CHECK(ref::mla_allowed_error(T::standard, 0.05, 0.05) == 3e-3);
  CHECK(ref::mla_allowed_error(T::unit_scale, 0.05, 0.05) == 3e-3);
  CHECK(ref::mla_allowed_error(T::precise, 0.05, 0.05) == 1e-3);
  CHECK(ref::mla_allowed_error(T::precise, -1.0, 100.0) == 2.0 / 128);  // no V term
  CHECK(ref::mla_allowed_error(T::unit_scale, -1.0, 100.0) == 2.0 / 128);
  CHECK(ref::mla_allowed_error(T::standard, -1.0, 100.0) == 100.0 / 256);
  CHECK(ref::mla_tolerance(true) == T::precise);
  CHECK(ref::mla_tolerance(false) == T::standard);

  SUBCASE("off by 2e-3 (bf16 P's error where |ref| is small): default passes, precise fails") {
    got[5] = bf(0.052f);
    const auto field = ref::compare_sparse_mla(got, lse, want, 1, 1);
    CHECK_MESSAGE(field.ok, field.message);
    const auto precise = ref::compare_sparse_mla(got, lse, want, 1, 1, T::precise);
    CHECK_FALSE(precise.ok);
    CHECK(precise.out_failures == 1);
    CHECK(precise.message.find("dim 5") != std::string::npos);
  }
  SUBCASE("off by 4e-3: both fail") {
    got[5] = bf(0.054f);
    CHECK_FALSE(ref::compare_sparse_mla(got, lse, want, 1, 1).ok);
    CHECK_FALSE(ref::compare_sparse_mla(got, lse, want, 1, 1, T::precise).ok);
  }
  SUBCASE("off by 5e-4: both pass") {
    got[5] = bf(0.0505f);
    CHECK(ref::compare_sparse_mla(got, lse, want, 1, 1).ok);
    CHECK(ref::compare_sparse_mla(got, lse, want, 1, 1, T::precise).ok);
  }
}

namespace {
// rows x h_q x topk problem on N(0, 1) bf16 q and kv, the latent dims (V) of kv times v_scale and q
// divided by it (powers of two: exact in bf16, the scores unchanged).
struct ScaledProblem {
  int rows = 2, h_q = 4, topk = 64, slots = 200;
  B q, kv;
  I idx;
  ScaledProblem(float v_scale, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    q.resize(std::size_t(rows) * h_q * D);
    kv.resize(std::size_t(slots) * D);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = bf(fl(bf(normal(rng))) / (i % D < DV ? v_scale : 1.f));
    for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = bf(fl(bf(normal(rng))) * (i % D < DV ? v_scale : 1.f));
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < topk; ++j) idx.push_back((r * 37 + j * 3) % slots);
  }
  ref::SparseMlaOutput run(const I& indices) const {
    return run_ref(q, kv, slots, indices, 0.13524, I(std::size_t(rows), topk), D, h_q);
  }
  const std::uint16_t* key(int r, int j) const { return kv.data() + std::size_t(idx[std::size_t(r) * topk + j]) * D; }
  double score(int r, int h, int j) const {
    const std::size_t hd = std::size_t(r) * h_q + h;
    double dot = 0;
    for (int d = 0; d < D; ++d) dot += double(fl(q[hd * D + d])) * fl(key(r, j)[d]);
    return 0.13524 * dot;
  }
  // The kernel's default arithmetic in fp64 otherwise: P = bf16(exp(S - max)), out = bf16(P.V / sum P).
  B bf16_p(const ref::SparseMlaOutput& want) const {
    B out(std::size_t(rows) * h_q * DV);
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < h_q; ++h) {
        const std::size_t hd = std::size_t(r) * h_q + h;
        std::vector<double> o(DV, 0.0);
        double l = 0;
        for (int j = 0; j < topk; ++j) {
          const std::uint16_t* k = key(r, j);
          const double e = std::exp(score(r, h, j) - want.max_logits[hd]);
          l += e;
          const double p = fl(bf(float(e)));
          for (int d = 0; d < DV; ++d) o[d] += p * fl(k[d]);
        }
        for (int d = 0; d < DV; ++d) out[hd * DV + d] = bf(float(o[d] / l));
      }
    return out;
  }
};
}  // namespace

TEST_CASE("reference mla: the default bound scales with V (2^-8 sum p|v|) and still rejects real errors") {
  using T = ref::MlaTolerance;
  for (float v_scale : {1.f, 64.f}) {
    INFO("V scaled by ", v_scale);
    const ScaledProblem pr(v_scale, 11);
    const auto want = pr.run(pr.idx);
    const std::size_t n = want.out.size();
    for (std::size_t i = 0; i < n; ++i) CHECK(want.out_abs[i] >= std::abs(want.out[i]) * (1 - 1e-12));
    const std::vector<float> lse(want.lse.begin(), want.lse.end());
    B exact(n);
    for (std::size_t i = 0; i < n; ++i) exact[i] = bf(float(want.out[i]));
    CHECK_MESSAGE(ref::compare_sparse_mla(exact, lse, want, pr.rows, pr.h_q).ok, "bf16 of the reference");

    // bf16 P (the default arithmetic) passes the default bound at every V scale.
    const B field = pr.bf16_p(want);
    const auto c = ref::compare_sparse_mla(field, lse, want, pr.rows, pr.h_q);
    CHECK_MESSAGE(c.ok, c.message);

    // An error of 4 x 2^-9 sum p|v| (twice the bound) on one element fails, with whichever sign.
    for (double sign : {1.0, -1.0}) {
      B off = exact;
      std::size_t worst = 0;  // the element where the V term is largest against the others
      for (std::size_t i = 0; i < n; ++i)
        if (want.out_abs[i] - 2 * std::abs(want.out[i]) > want.out_abs[worst] - 2 * std::abs(want.out[worst]))
          worst = i;
      off[worst] = bf(float(want.out[worst] + sign * 4 * std::ldexp(want.out_abs[worst], -9)));
      const auto bad = ref::compare_sparse_mla(off, lse, want, pr.rows, pr.h_q);
      CHECK_FALSE(bad.ok);
      CHECK(bad.out_failures >= 1);
    }

    // One wrong token (row 0, head 0's highest-scoring entry pointing at the next slot) fails.
    int top = 0;
    for (int j = 1; j < pr.topk; ++j)
      if (pr.score(0, 0, j) > pr.score(0, 0, top)) top = j;
    I wrong_idx = pr.idx;
    wrong_idx[std::size_t(top)] = (wrong_idx[std::size_t(top)] + 1) % pr.slots;
    const auto wrong = pr.run(wrong_idx);
    B wrong_out(n);
    for (std::size_t i = 0; i < n; ++i) wrong_out[i] = bf(float(wrong.out[i]));
    const std::vector<float> wrong_lse(wrong.lse.begin(), wrong.lse.end());
    CHECK_FALSE(ref::compare_sparse_mla(wrong_out, lse, want, pr.rows, pr.h_q).ok);  // out alone
    CHECK_FALSE(ref::compare_sparse_mla(wrong_out, wrong_lse, want, pr.rows, pr.h_q).ok);
    // lse alone (the right out) fails too
    CHECK_FALSE(ref::compare_sparse_mla(exact, wrong_lse, want, pr.rows, pr.h_q).ok);
  }
  // At V x 64 the spec's unit-scale bound (and the precise one) reject bf16 P's error: the V term is needed.
  const ScaledProblem big(64.f, 11);
  const auto want = big.run(big.idx);
  const std::vector<float> lse(want.lse.begin(), want.lse.end());
  const B field = big.bf16_p(want);
  CHECK_FALSE(ref::compare_sparse_mla(field, lse, want, big.rows, big.h_q, T::unit_scale).ok);
  CHECK_FALSE(ref::compare_sparse_mla(field, lse, want, big.rows, big.h_q, T::precise).ok);
}

TEST_CASE("reference mla: attn_sink scales out by 1 / (1 + exp(sink - lse)); lse unchanged") {
  const B kv = small_pool(4);
  const B q1 = one_q(2.f, 1.f);  // with slot 2 alone: score 0.625 = lse
  B q;
  for (int i = 0; i < 8; ++i) q.insert(q.end(), q1.begin(), q1.end());  // 2 rows x 4 heads, the same q
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> sink{0.625f, inf, -inf, 0.625f - std::log(3.f)};
  ref::SparseMlaInput in;
  in.q = q;
  in.kv = kv;
  in.num_slots = 4;
  const I idx{-1, 2, -1, -1, -1, -1, -1, -1};  // row 1: no valid index
  in.indices = idx;
  in.rows = 2;
  in.h_q = 4;
  in.topk = 4;
  in.sm_scale = 0.5;
  const auto plain = ref::sparse_mla(in);
  in.attn_sink = sink;
  const auto r = ref::sparse_mla(in);
  const double v0 = 3.0 / 8;  // slot 2's dim 0
  CHECK(plain.out[0] == v0);
  CHECK(r.out[0 * DV] == doctest::Approx(v0 / 2).epsilon(1e-15));      // sink = lse: half
  CHECK(r.out[1 * DV] == 0.0);                                          // +inf: 0
  CHECK(r.out[2 * DV] == v0);                                           // -inf: plain
  CHECK(r.out[3 * DV] == doctest::Approx(v0 * 0.75).epsilon(1e-6));     // exp(sink - lse) = 1/3
  CHECK(r.out_abs[0] == doctest::Approx(v0 / 2).epsilon(1e-15));
  for (int h = 0; h < 4; ++h) {
    CHECK(r.lse[h] == plain.lse[h]);
    CHECK(r.max_logits[h] == plain.max_logits[h]);
    CHECK(std::isinf(r.lse[4 + h]));  // row 1: no valid index, out stays 0
    for (int d = 0; d < DV; ++d) CHECK(r.out[(4 + h) * DV + d] == 0.0);
  }
  in.attn_sink = std::span<const float>(sink).first(2);
  CHECK_THROWS_AS(ref::sparse_mla(in), std::invalid_argument);  // shorter than h_q
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
