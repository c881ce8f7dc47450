// reference/fp8_kv_cache.cpp — CPU reference of §4 (FP8 KV cache).
//
// The e4m3 encoder here is deliberately not the device's bit manipulation: it searches the table
// of the 127 non-negative finite e4m3 values for the nearest one (ties to the even code), so the
// two implementations check each other.
#include "reference/fp8_kv_cache.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "reference/bf16.hpp"

namespace nsajit::reference {
namespace {

// value(code) for codes 0x00..0x7e (all non-negative finite values, increasing with the code).
const std::array<double, 127>& e4m3_values() {
  static const std::array<double, 127> table = [] {
    std::array<double, 127> t{};
    for (int c = 0; c < 127; ++c) {
      const int e = c >> 3, m = c & 7;
      t[c] = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    }
    return t;
  }();
  return table;
}

// For 0 <= a < 448: the code i with value(i) <= a < value(i + 1).
int floor_code(double a) {
  const auto& v = e4m3_values();
  return int(std::upper_bound(v.begin(), v.end(), a) - v.begin()) - 1;
}

std::string hex(unsigned v) { return fmt::format("0x{:02x}", v); }

}  // namespace

std::uint8_t float_to_e4m3(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7f;
  const double a = std::fabs(double(x));
  if (a >= kE4m3Max) return sign | 0x7e;
  const auto& v = e4m3_values();
  const int lo = floor_code(a);
  const double below = a - v[lo], above = v[lo + 1] - a;  // exact: both are short binary fractions
  int code = lo;
  if (above < below || (above == below && (lo & 1))) code = lo + 1;
  return std::uint8_t(sign | code);
}

float e4m3_to_float(std::uint8_t code) {
  const bool negative = code & 0x80;
  const int mag = code & 0x7f;
  if (mag == 0x7f) return negative ? -NAN : NAN;
  const float v = float(e4m3_values()[mag]);
  return negative ? -v : v;
}

bool e4m3_is_tie(float x) {
  const double a = std::fabs(double(x));
  if (!(a < kE4m3Max)) return false;
  const auto& v = e4m3_values();
  const int lo = floor_code(a);
  return a - v[lo] == v[lo + 1] - a;
}

float fp8_kv_tile_scale(float amax, Fp8ScaleFormat fmt) {
  const float s = amax / kE4m3Max;  // fp32 division, as on the device
  if (fmt == Fp8ScaleFormat::fp32) return std::fmax(s, FLT_MIN);
  const float c = std::fmax(s, 1e-4f);
  if (!std::isfinite(c)) return c;
  int e = 0;
  const float m = std::frexp(c, &e);  // c = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? c : std::ldexp(1.0f, e);
}

void fp8_kv_quantize_token(const std::uint16_t* row, Fp8ScaleFormat fmt, std::uint8_t* token) {
  for (int t = 0; t < kFp8KvLatentDims / kFp8KvTileDims; ++t) {
    const int d0 = t * kFp8KvTileDims;
    float amax = 0.0f;
    for (int d = d0; d < d0 + kFp8KvTileDims; ++d) amax = std::fmax(amax, std::fabs(bf16_to_float(row[d])));
    const float scale = fp8_kv_tile_scale(amax, fmt);
    for (int d = d0; d < d0 + kFp8KvTileDims; ++d) token[d] = float_to_e4m3(bf16_to_float(row[d]) / scale);
    std::memcpy(token + kFp8KvScaleOffset + 4 * t, &scale, 4);
  }
  std::memcpy(token + kFp8KvRopeOffset, row + kFp8KvLatentDims, 2 * (kFp8KvDims - kFp8KvLatentDims));
}

float fp8_kv_token_scale(const std::uint8_t* token, int tile) {
  float s;
  std::memcpy(&s, token + kFp8KvScaleOffset + 4 * tile, 4);
  return s;
}

void fp8_kv_dequantize_token(const std::uint8_t* token, std::uint16_t* row) {
  for (int d = 0; d < kFp8KvLatentDims; ++d)
    row[d] = float_to_bf16(e4m3_to_float(token[d]) * fp8_kv_token_scale(token, d / kFp8KvTileDims));
  std::memcpy(row + kFp8KvLatentDims, token + kFp8KvRopeOffset, 2 * (kFp8KvDims - kFp8KvLatentDims));
}

void fp8_kv_quantize(const std::uint16_t* kv, std::int64_t kv_row_stride, const std::int32_t* slots,
                     int n, const Fp8KvCacheLayout& layout, Fp8ScaleFormat fmt, std::uint8_t* cache) {
  for (int i = 0; i < n; ++i)
    if (layout.valid(slots[i]))
      fp8_kv_quantize_token(kv + std::int64_t(i) * kv_row_stride, fmt, cache + layout.offset(slots[i]));
}

std::vector<std::uint16_t> fp8_kv_gather(const std::uint8_t* cache, const Fp8KvCacheLayout& layout,
                                         const std::int32_t* slots, int n) {
  std::vector<std::uint16_t> out(std::size_t(n) * kFp8KvDims, 0);
  for (int i = 0; i < n; ++i)
    if (layout.valid(slots[i]))
      fp8_kv_dequantize_token(cache + layout.offset(slots[i]), out.data() + std::size_t(i) * kFp8KvDims);
  return out;
}

std::string fp8_kv_token_difference(const std::uint8_t* got, const std::uint8_t* expected,
                                    const std::uint16_t* row, bool tolerate_ties) {
  for (int b = kFp8KvScaleOffset; b < kFp8KvTokenBytes; ++b)
    if (got[b] != expected[b])
      return fmt::format("byte {} ({}): got {}, expected {}", b, b < kFp8KvRopeOffset ? "scales" : "rope",
                         hex(got[b]), hex(expected[b]));
  for (int d = 0; d < kFp8KvLatentDims; ++d) {
    if (got[d] == expected[d]) continue;
    const float q = bf16_to_float(row[d]) / fp8_kv_token_scale(expected, d / kFp8KvTileDims);
    // Neighbours on a tie: same sign, codes one apart.
    const bool neighbours = ((got[d] ^ expected[d]) & 0x80) == 0 &&
                            std::abs(int(got[d] & 0x7f) - int(expected[d] & 0x7f)) == 1;
    if (tolerate_ties && neighbours && e4m3_is_tie(q)) continue;
    return fmt::format("byte {} (latent dim {}, x = {}, x / scale = {}): got {}, expected {}", d, d,
                       bf16_to_float(row[d]), q, hex(got[d]), hex(expected[d]));
  }
  return "";
}

}  // namespace nsajit::reference
