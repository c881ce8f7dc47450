// test_fp8_kv_reference.cpp — the CPU reference of §4 (FP8 KV cache, 656 bytes per token) against
// hand-computed bytes: layout offsets, e4m3 encode/decode over every code, ties, saturation, tile
// scales (all-zero, tiny, 448, huge, non-power-of-two, ue8m0). Also checks a host port of the
// device's bit-level e4m3 encoder (templates/device_common.cuh) against the table-search reference.
// CPU only; the GPU tests (test_fp8_kv_gpu.cpp) trust this reference.
#include <doctest/doctest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <random>
#include <vector>

#include "nsajit/errors.hpp"
#include "nsajit/spec.hpp"
#include "reference/bf16.hpp"
#include "reference/fp8_kv_cache.hpp"

namespace ref = nsajit::reference;
using nsajit::Fp8ScaleFormat;
using Bytes = std::vector<std::uint8_t>;
using Row = std::vector<std::uint16_t>;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }
std::uint16_t bf(float f) { return ref::float_to_bf16(f); }

// Host port of float_to_e4m3 in templates/device_common.cuh (same integer steps; rintf = RNE).
std::uint8_t device_float_to_e4m3(float x) {
  const std::uint32_t u = bits(x);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return std::uint8_t(sign | 0x7fu);
  if (a >= 0x43e00000u) return std::uint8_t(sign | 0x7eu);
  if (a < 0x3c800000u) return std::uint8_t(sign | std::uint32_t(std::nearbyint(from_bits(a) * 512.0f)));
  const std::uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  return std::uint8_t(sign | (r - (120u << 3)));
}

Bytes quantize(const Row& row, Fp8ScaleFormat fmt = Fp8ScaleFormat::fp32) {
  Bytes token(ref::kFp8KvTokenBytes);
  ref::fp8_kv_quantize_token(row.data(), fmt, token.data());
  return token;
}

Row dequantize(const Bytes& token) {
  Row row(ref::kFp8KvDims);
  ref::fp8_kv_dequantize_token(token.data(), row.data());
  return row;
}

float stored_scale(const Bytes& token, int t) { return ref::fp8_kv_token_scale(token.data(), t); }

// A row whose tile t is filled from `values` (cycled) and whose other dims are 0.
Row row_with_tile(int t, const std::vector<float>& values) {
  Row row(ref::kFp8KvDims, 0);
  for (int i = 0; i < ref::kFp8KvTileDims; ++i) row[t * 128 + i] = bf(values[i % values.size()]);
  return row;
}

// Every dequantized latent dim of tile t is within e4m3's half-ulp (2^-4 relative for normals,
// 2^-10 * scale absolute for subnormals) plus bf16 rounding of the product (relative 2^-9, or
// absolute 2^-134 where the product is a bf16 subnormal).
void check_round_trip(const Row& row, const Bytes& token, int t) {
  const Row back = dequantize(token);
  const float scale = stored_scale(token, t);
  for (int d = t * 128; d < t * 128 + 128; ++d) {
    const float x = ref::bf16_to_float(row[d]), y = ref::bf16_to_float(back[d]);
    INFO("dim " << d << " x " << x << " dequantized " << y << " scale " << scale);
    REQUIRE(std::isfinite(y));
    CHECK(std::fabs(y - x) <= std::fabs(x) * (0.0625f + 0.004f) + scale * 0.001f + std::ldexp(1.0f, -133));
  }
}

}  // namespace

TEST_CASE("fp8_kv reference: e4m3 decodes every code to its OCP E4M3FN value") {
  CHECK(ref::e4m3_to_float(0x00) == 0.0f);
  CHECK(std::signbit(ref::e4m3_to_float(0x80)));
  CHECK(ref::e4m3_to_float(0x01) == std::ldexp(1.0f, -9));   // smallest subnormal
  CHECK(ref::e4m3_to_float(0x07) == 7 * std::ldexp(1.0f, -9));
  CHECK(ref::e4m3_to_float(0x08) == std::ldexp(1.0f, -6));   // smallest normal
  CHECK(ref::e4m3_to_float(0x38) == 1.0f);
  CHECK(ref::e4m3_to_float(0x3c) == 1.5f);
  CHECK(ref::e4m3_to_float(0x7d) == 416.0f);
  CHECK(ref::e4m3_to_float(0x7e) == 448.0f);
  CHECK(ref::e4m3_to_float(0xfe) == -448.0f);
  CHECK(ref::e4m3_to_float(0xc0) == -2.0f);
  CHECK(std::isnan(ref::e4m3_to_float(0x7f)));
  CHECK(std::isnan(ref::e4m3_to_float(0xff)));
  float previous = -1.0f;
  for (int c = 0; c < 0x7f; ++c) {  // increasing over the non-negative finite codes
    CHECK(ref::e4m3_to_float(std::uint8_t(c)) > previous);
    previous = ref::e4m3_to_float(std::uint8_t(c));
  }
}

TEST_CASE("fp8_kv reference: all 256 e4m3 codes round-trip, the device encoder agrees") {
  for (int c = 0; c < 256; ++c) {
    INFO("code " << c);
    const float v = ref::e4m3_to_float(std::uint8_t(c));
    CHECK(int(ref::float_to_e4m3(v)) == c);  // NaN codes too: the sign is kept
    CHECK(int(device_float_to_e4m3(v)) == c);
    // Exact in bf16 (e4m3 has 3 mantissa bits), so dequantization with scale 1 is exact.
    if (!std::isnan(v)) CHECK(ref::bf16_to_float(bf(v)) == v);
  }
}

TEST_CASE("fp8_kv reference: e4m3 rounds to nearest, ties to even") {
  auto e = [](float x) { return int(ref::float_to_e4m3(x)); };
  CHECK(e(1.0625f) == 0x38);   // tie between 1 (0x38) and 1.125 (0x39): even 0x38
  CHECK(e(1.1875f) == 0x3a);   // tie between 1.125 (0x39) and 1.25 (0x3a): even 0x3a
  CHECK(e(std::nextafter(1.0625f, 2.0f)) == 0x39);
  CHECK(e(std::nextafter(1.1875f, 0.0f)) == 0x39);
  CHECK(e(-1.0625f) == 0xb8);
  CHECK(e(432.0f) == 0x7e);    // tie between 416 and 448: even 0x7e
  CHECK(e(std::nextafter(432.0f, 0.0f)) == 0x7d);
  CHECK(e(0.5f * std::ldexp(1.0f, -9)) == 0x00);   // half the smallest subnormal: to 0
  CHECK(e(std::nextafter(0.5f * std::ldexp(1.0f, -9), 1.0f)) == 0x01);
  CHECK(e(1.5f * std::ldexp(1.0f, -9)) == 0x02);   // subnormal tie 1.5 -> 2
  CHECK(e(2.5f * std::ldexp(1.0f, -9)) == 0x02);   // subnormal tie 2.5 -> 2
  CHECK(e(7.5f * std::ldexp(1.0f, -9)) == 0x08);   // tie at the subnormal/normal border -> 2^-6
  CHECK(e(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(e(-std::numeric_limits<float>::denorm_min()) == 0x80);
  CHECK(ref::e4m3_is_tie(1.0625f));
  CHECK(ref::e4m3_is_tie(-432.0f));
  CHECK(ref::e4m3_is_tie(1.5f * std::ldexp(1.0f, -9)));
  CHECK_FALSE(ref::e4m3_is_tie(1.0f));
  CHECK_FALSE(ref::e4m3_is_tie(std::nextafter(1.0625f, 2.0f)));
  CHECK_FALSE(ref::e4m3_is_tie(448.0f));
  // Every midpoint between neighbours is a tie and rounds to the even code, both encoders.
  for (int c = 0; c < 0x7e; ++c) {
    const float mid = (ref::e4m3_to_float(std::uint8_t(c)) + ref::e4m3_to_float(std::uint8_t(c + 1))) / 2;
    INFO("midpoint of codes " << c << " and " << c + 1);
    CHECK(ref::e4m3_is_tie(mid));
    CHECK(e(mid) == (c % 2 == 0 ? c : c + 1));
    CHECK(int(device_float_to_e4m3(mid)) == e(mid));
    CHECK(e(std::nextafter(mid, 0.0f)) == c);
    CHECK(e(std::nextafter(mid, 1000.0f)) == c + 1);
  }
}

TEST_CASE("fp8_kv reference: e4m3 saturates to ±448 and keeps NaN") {
  auto e = [](float x) { return int(ref::float_to_e4m3(x)); };
  for (float x : {448.0f, 449.0f, 463.9f, 464.0f, 480.0f, 3e5f, FLT_MAX, kInf}) {
    INFO(x);
    CHECK(e(x) == 0x7e);
    CHECK(e(-x) == 0xfe);
  }
  CHECK(e(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(e(-std::numeric_limits<float>::quiet_NaN()) == 0xff);
}

TEST_CASE("fp8_kv reference: the device bit encoder equals the table encoder on sampled floats") {
  // Every 65521st bit pattern (all exponents and signs), plus random patterns.
  std::mt19937 rng(12345);
  long long checked = 0;
  auto check = [&](std::uint32_t u) {
    const float x = from_bits(u);
    const int want = ref::float_to_e4m3(x), got = device_float_to_e4m3(x);
    if (want != got) FAIL_CHECK("bits 0x" << std::hex << u << ": device " << got << ", reference " << want);
    ++checked;
  };
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 65521) check(std::uint32_t(u));
  for (int i = 0; i < 200000; ++i) check(bits(std::ldexp(float(rng()) / 4294967296.0f, int(rng() % 40) - 30)) ^ (rng() & 0x80000000u));
  CHECK(checked > 250000);
}

TEST_CASE("fp8_kv reference: the 656-byte token layout, hand-computed") {
  Row row(ref::kFp8KvDims, 0);
  // Tile 0: amax 448 -> scale exactly 1: bytes are e4m3(x).
  row[0] = bf(1.0f);      // 0 0111 000 = 0x38
  row[1] = bf(-2.0f);     // 1 1000 000 = 0xc0
  row[2] = bf(448.0f);    // 0x7e
  row[3] = bf(0.5f);      // 0 0110 000 = 0x30
  row[127] = bf(1.5f);    // 0 0111 100 = 0x3c
  // Tile 1 (dims 128..255): all zero -> scale FLT_MIN, bytes 0.
  // Tile 2: amax 896 -> scale 2.
  row[256] = bf(896.0f);  // 448 -> 0x7e
  row[300] = bf(-3.0f);   // -1.5 -> 0xbc
  row[383] = bf(1.0f);    // 0.5 -> 0x30
  // Tile 3: amax 1 -> scale fp32(1 / 448), not a power of two.
  row[384] = bf(1.0f);
  row[511] = bf(-0.25f);
  // Rope: raw bf16 bits, including a NaN payload and -0.
  for (int i = 0; i < 64; ++i) row[512 + i] = std::uint16_t(0x1200 + 3 * i);
  row[512 + 5] = 0x7fa1;
  row[512 + 6] = 0x8000;

  const Bytes t = quantize(row);
  REQUIRE(t.size() == 656);
  CHECK(t[0] == 0x38);
  CHECK(t[1] == 0xc0);
  CHECK(t[2] == 0x7e);
  CHECK(t[3] == 0x30);
  CHECK(t[4] == 0x00);
  CHECK(t[127] == 0x3c);
  for (int d = 128; d < 256; ++d) CHECK(t[d] == 0x00);
  CHECK(t[256] == 0x7e);
  CHECK(t[300] == 0xbc);
  CHECK(t[383] == 0x30);
  CHECK(t[257] == 0x00);
  CHECK(t[384] == 0x7e);  // 1 / fp32(1/448) ~ 448 -> 0x7e
  CHECK(t[511] == ref::float_to_e4m3(-0.25f / (1.0f / 448.0f)));
  CHECK(t[511] == 0xee);  // -112 = -1.75 * 2^6: 1 1101 110
  // Scales at bytes 512..527, little-endian fp32.
  const std::uint8_t scale_bytes[16] = {0x00, 0x00, 0x80, 0x3f,   // 1.0
                                        0x00, 0x00, 0x80, 0x00,   // FLT_MIN
                                        0x00, 0x00, 0x00, 0x40,   // 2.0
                                        0, 0, 0, 0};
  for (int b = 0; b < 12; ++b) CHECK(int(t[512 + b]) == int(scale_bytes[b]));
  CHECK(stored_scale(t, 3) == 1.0f / 448.0f);
  // Rope at bytes 528..655, little-endian bf16, bit-exact.
  for (int i = 0; i < 64; ++i) {
    CHECK(t[528 + 2 * i] == (row[512 + i] & 0xff));
    CHECK(t[529 + 2 * i] == (row[512 + i] >> 8));
  }
  CHECK(t[528 + 10] == 0xa1);
  CHECK(t[529 + 10] == 0x7f);

  // Dequantize: bf16(e4m3 * scale), rope copied.
  const Row back = dequantize(t);
  CHECK(back[0] == bf(1.0f));
  CHECK(back[1] == bf(-2.0f));
  CHECK(back[2] == bf(448.0f));
  CHECK(back[127] == bf(1.5f));
  CHECK(back[200] == 0);
  CHECK(back[256] == bf(896.0f));
  CHECK(back[300] == bf(-3.0f));
  CHECK(back[384] == bf(448.0f * (1.0f / 448.0f)));
  CHECK(back[511] == bf(-112.0f * (1.0f / 448.0f)));
  for (int i = 0; i < 64; ++i) CHECK(back[512 + i] == row[512 + i]);
}

TEST_CASE("fp8_kv reference: an all-zero tile stores zeros and scale FLT_MIN, never NaN") {
  for (float zero : {0.0f, -0.0f}) {
    const Row row = row_with_tile(2, {zero});
    const Bytes t = quantize(row);
    for (int tile = 0; tile < 4; ++tile) CHECK(stored_scale(t, tile) == FLT_MIN);
    for (int d = 0; d < 512; ++d) CHECK((t[d] & 0x7f) == 0);
    const Row back = dequantize(t);
    for (int d = 0; d < 512; ++d) CHECK((back[d] & 0x7fff) == 0);
  }
  CHECK(ref::fp8_kv_tile_scale(0.0f, Fp8ScaleFormat::fp32) == FLT_MIN);
}

TEST_CASE("fp8_kv reference: tiny, 448, huge and non-power-of-two tiles") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const float amax : {1e-6f, 1e-37f, 448.0f, 3e5f, 1.0f, 0.3f, 1000.0f}) {
    INFO("amax " << amax);
    std::vector<float> values(128);
    for (float& v : values) v = std::fmax(-amax, std::fmin(amax, normal(rng) * amax / 3));
    values[17] = -amax;
    const Row row = row_with_tile(1, values);
    const float bf_amax = ref::bf16_to_float(row[128 + 17]) * -1.0f;
    const Bytes t = quantize(row);
    const float scale = stored_scale(t, 1);
    CHECK(scale == std::fmax(bf_amax / 448.0f, FLT_MIN));
    CHECK(t[128 + 17] == (bf_amax / 448.0f >= FLT_MIN ? 0xfe : ref::float_to_e4m3(-bf_amax / FLT_MIN)));
    for (int d = 128; d < 256; ++d) CHECK(t[d] == ref::float_to_e4m3(ref::bf16_to_float(row[d]) / scale));
    check_round_trip(row, t, 1);
  }
  // Scale 1 exactly: every bf16 value in [-448, 448] quantizes to float_to_e4m3(x) (an exhaustive
  // test of the encoder on bf16 inputs, e4m3 ties included) and dequantizes to the e4m3 value.
  std::vector<float> all;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float x = ref::bf16_to_float(std::uint16_t(b));
    if (std::fabs(x) <= 448.0f) all.push_back(x);
  }
  for (std::size_t i = 0; i < all.size(); i += 127) {
    std::vector<float> values(all.begin() + std::ptrdiff_t(i), all.begin() + std::ptrdiff_t(std::min(all.size(), i + 127)));
    values.push_back(448.0f);
    const Row row = row_with_tile(0, values);
    const Bytes t = quantize(row);
    REQUIRE(stored_scale(t, 0) == 1.0f);
    const Row back = dequantize(t);
    for (int d = 0; d < 128; ++d) {
      const float x = ref::bf16_to_float(row[d]);
      CHECK(t[d] == ref::float_to_e4m3(x));
      CHECK(back[d] == bf(ref::e4m3_to_float(t[d])));
    }
  }
}

TEST_CASE("fp8_kv reference: ue8m0 scales are powers of two, 2^ceil(log2(max(amax/448, 1e-4)))") {
  auto s = [](float amax) { return ref::fp8_kv_tile_scale(amax, Fp8ScaleFormat::ue8m0); };
  CHECK(s(448.0f) == 1.0f);
  CHECK(s(449.0f) == 2.0f);
  CHECK(s(896.0f) == 2.0f);
  CHECK(s(897.0f) == 4.0f);
  CHECK(s(1.0f) == std::ldexp(1.0f, -8));    // 1/448 = 2^-8.8
  CHECK(s(0.0f) == std::ldexp(1.0f, -13));   // clamped at 1e-4 -> 2^-13
  CHECK(s(1e-6f) == std::ldexp(1.0f, -13));
  CHECK(s(3e5f) == 1024.0f);                 // 669.6 -> 1024
  CHECK(s(448.0f * std::ldexp(1.0f, -13)) == std::ldexp(1.0f, -13));
  std::mt19937 rng(3);
  for (int i = 0; i < 10000; ++i) {
    const float amax = std::ldexp(float(rng()) / 4294967296.0f, int(rng() % 60) - 30);
    const float scale = s(amax);
    INFO("amax " << amax);
    CHECK((bits(scale) & 0x7fffffu) == 0);                     // a power of two
    CHECK(scale >= std::fmax(amax / 448.0f, 1e-4f));           // rounded up ...
    CHECK(scale / 2 < std::fmax(amax / 448.0f, 1e-4f));        // ... to the next one
  }
  // A token with ue8m0 scales: bytes use the power-of-two scale; the largest value stays <= 448.
  const Row row = row_with_tile(3, {1e-6f, -0.7f, 0.3f, 300.0f});
  const Bytes t = quantize(row, Fp8ScaleFormat::ue8m0);
  CHECK(stored_scale(t, 0) == std::ldexp(1.0f, -13));
  CHECK(stored_scale(t, 3) == 1.0f);  // amax 300 -> 0.67 -> 1
  CHECK(t[384 + 3] == ref::float_to_e4m3(ref::bf16_to_float(bf(300.0f))));
  CHECK(t[384 + 0] == ref::float_to_e4m3(ref::bf16_to_float(bf(1e-6f))));
  check_round_trip(row, t, 3);
}

TEST_CASE("fp8_kv reference: paged layout offsets are 64-bit; gather zeroes invalid slots") {
  const ref::Fp8KvCacheLayout big{.num_pages = 52000, .page_size = 64};
  const std::int64_t slot = 51200LL * 64 + 7;
  CHECK(big.offset(slot) == 51200LL * 64 * 656 + 7 * 656);
  CHECK(big.offset(slot) > (1LL << 31));
  CHECK(big.valid(52000LL * 64 - 1));
  CHECK_FALSE(big.valid(52000LL * 64));
  CHECK_FALSE(big.valid(-1));
  const ref::Fp8KvCacheLayout padded{.num_pages = 3, .page_size = 2, .page_stride_bytes = 1328};
  CHECK(padded.offset(3) == 1328 + 656);

  // Quantize two rows into a 3-page cache with page size 2, skip a negative and an out-of-range slot.
  Bytes cache(std::size_t(padded.num_pages * padded.page_stride()), 0x5a);
  Row rows(4 * 580);
  std::mt19937 rng(1);
  for (auto& v : rows) v = bf(std::normal_distribution<float>()(rng));
  const std::int32_t slots[4] = {5, -1, 0, 6};
  ref::fp8_kv_quantize(rows.data(), 580, slots, 4, padded, Fp8ScaleFormat::fp32, cache.data());
  const Bytes t0 = quantize(Row(rows.begin() + 580 * 2, rows.begin() + 580 * 2 + 576));
  const Bytes t5 = quantize(Row(rows.begin(), rows.begin() + 576));
  CHECK(std::memcmp(cache.data(), t0.data(), 656) == 0);
  CHECK(std::memcmp(cache.data() + 2 * 1328 + 656, t5.data(), 656) == 0);
  std::size_t touched = 0;
  for (std::uint8_t b : cache) touched += b != 0x5a;
  CHECK(touched <= 2 * 656);
  for (std::size_t b = 656; b < 2 * 1328 + 656; ++b) CHECK(cache[b] == 0x5a);

  const std::int32_t gather_slots[5] = {0, -1, 5, 6, 2147483647};
  const Row out = ref::fp8_kv_gather(cache.data(), padded, gather_slots, 5);
  CHECK(Row(out.begin(), out.begin() + 576) == dequantize(t0));
  CHECK(Row(out.begin() + 2 * 576, out.begin() + 3 * 576) == dequantize(t5));
  for (int r : {1, 3, 4})
    for (int d = 0; d < 576; ++d) CHECK(out[std::size_t(r) * 576 + d] == 0);
}

TEST_CASE("fp8_kv reference: token comparison tolerates one code only on a tie") {
  Row row(576, 0);
  row[0] = bf(448.0f);     // scale 1
  row[1] = bf(1.0625f);    // a tie: 0x38 or 0x39 both acceptable
  row[2] = bf(1.0f);       // not a tie
  const Bytes want = quantize(row);
  Bytes got = want;
  got[1] = 0x39;
  CHECK(ref::fp8_kv_token_difference(got.data(), want.data(), row.data(), true) == "");
  CHECK(ref::fp8_kv_token_difference(got.data(), want.data(), row.data(), false) != "");
  got = want;
  got[2] = 0x39;
  CHECK(ref::fp8_kv_token_difference(got.data(), want.data(), row.data(), true).find("latent dim 2") != std::string::npos);
  got = want;
  got[600] ^= 1;
  CHECK(ref::fp8_kv_token_difference(got.data(), want.data(), row.data(), true).find("rope") != std::string::npos);
}

TEST_CASE("fp8_kv specs: page size is the only kernel field, names and validation") {
  using nsajit::Family;
  using nsajit::KernelSpec;
  const KernelSpec q{.family = Family::fp8_kv_quantize, .page_size = 64};
  const KernelSpec g{.family = Family::fp8_kv_gather, .page_size = 1};
  CHECK(nsajit::readable_name(q) == "fp8_kv_quantize.ps64.sm_90a");
  CHECK(nsajit::readable_name(g) == "fp8_kv_gather.ps1.sm_90a");
  CHECK_NOTHROW(nsajit::validate(nsajit::with_default_tile(q)));
  CHECK_NOTHROW(nsajit::validate(nsajit::with_default_tile(g)));
  auto error = [](KernelSpec s) -> std::string {
    try {
      nsajit::validate(nsajit::with_default_tile(s));
    } catch (const nsajit::InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  KernelSpec bad = q;
  bad.topk = 1024;
  CHECK(error(bad).find("field topk = 1024") != std::string::npos);
  bad = q;
  bad.page_size = 0;
  CHECK(error(bad).find("field page_size = 0") != std::string::npos);
  bad = g;
  bad.h_q = 16;
  CHECK(error(bad).find("field h_q = 16") != std::string::npos);
  bad = g;
  bad.tile.threads = 96;
  CHECK(error(bad).find("field threads = 96") != std::string::npos);
}
