// reference/fp8_kv_cache.hpp — CPU reference of §4, the FP8 KV cache (656 bytes per token):
// e4m3 encode/decode, tile scales, quantize (byte-exact with templates/fp8_kv_quantize.cuh) and
// dequantize / gather (bit-exact with templates/fp8_kv_gather.cuh).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "nsajit/kernels.hpp"

namespace nsajit::reference {

// Token layout (FlashMLA "V3.2 FP8 sparse"; the same constants as templates/device_common.cuh).
inline constexpr int kFp8KvTokenBytes = 656;
inline constexpr int kFp8KvDims = 576;          // bf16 dims of a dequantized token
inline constexpr int kFp8KvLatentDims = 512;    // e4m3 bytes [0, 512)
inline constexpr int kFp8KvTileDims = 128;      // dims per scale; 4 tiles
inline constexpr int kFp8KvScaleOffset = 512;   // 4 x fp32 at bytes [512, 528)
inline constexpr int kFp8KvRopeOffset = 528;    // 64 x bf16 (dims 512..575) at bytes [528, 656)
inline constexpr float kE4m3Max = 448.0f;

// float -> e4m3 (OCP E4M3FN) code: |x| >= 448 (inf too) saturates to ±448 (0x7e | sign), round to
// nearest even, NaN -> 0x7f | sign, -0 -> 0x80. Matches float_to_e4m3 in device_common.cuh.
std::uint8_t float_to_e4m3(float x);
// e4m3 code -> float, exact; 0x7f and 0xff are NaN.
float e4m3_to_float(std::uint8_t code);
// True when x (finite, |x| < 448) lies exactly halfway between two neighbouring e4m3 values, the
// only place where the spec lets two quantizers differ by one e4m3 ulp.
bool e4m3_is_tie(float x);

// The fp32 scale of a tile from its amax (max |x|, NaN dims ignored):
// fp32: max(amax / 448, FLT_MIN); ue8m0: 2^ceil(log2(max(amax / 448, 1e-4f))) computed exactly.
float fp8_kv_tile_scale(float amax, Fp8ScaleFormat fmt);

// One token: bf16 bits [576] -> 656 bytes.
void fp8_kv_quantize_token(const std::uint16_t* row, Fp8ScaleFormat fmt, std::uint8_t* token);
// One token: 656 bytes -> bf16 bits [576]: latent bf16(e4m3 * scale) (fp32 product, RNE), rope copied.
void fp8_kv_dequantize_token(const std::uint8_t* token, std::uint16_t* row);
// The fp32 scale of tile t stored in a token.
float fp8_kv_token_scale(const std::uint8_t* token, int tile);

// A paged cache in host memory: uint8 [num_pages, page_stride] (page_stride 0 = page_size * 656).
struct Fp8KvCacheLayout {
  std::int64_t num_pages = 0;
  int page_size = 1;
  std::int64_t page_stride_bytes = 0;
  std::int64_t page_stride() const { return page_stride_bytes ? page_stride_bytes : std::int64_t(page_size) * kFp8KvTokenBytes; }
  std::int64_t num_slots() const { return num_pages * page_size; }
  bool valid(std::int64_t slot) const { return slot >= 0 && slot < num_slots(); }
  // Byte offset of the token of a valid slot (64-bit).
  std::int64_t offset(std::int64_t slot) const {
    return (slot / page_size) * page_stride() + (slot % page_size) * kFp8KvTokenBytes;
  }
};

// nsajit::fp8_kv_quantize on host memory: kv bf16 [n, kv_row_stride]; rows with an invalid slot
// are skipped (their bytes untouched). cache must hold num_pages * page_stride bytes.
void fp8_kv_quantize(const std::uint16_t* kv, std::int64_t kv_row_stride, const std::int32_t* slots,
                     int n, const Fp8KvCacheLayout& layout, Fp8ScaleFormat fmt, std::uint8_t* cache);

// nsajit::fp8_kv_gather on host memory: bf16 [n, 576]; an invalid slot gives an all-zero row.
std::vector<std::uint16_t> fp8_kv_gather(const std::uint8_t* cache, const Fp8KvCacheLayout& layout,
                                         const std::int32_t* slots, int n);

// Compares two quantized tokens: "" when equal, or where they differ. tolerate_ties lets a latent
// byte differ by one e4m3 code where x / scale of `row` sits exactly on a rounding tie (§Tolerances).
std::string fp8_kv_token_difference(const std::uint8_t* got, const std::uint8_t* expected,
                                    const std::uint16_t* row, bool tolerate_ties);

}  // namespace nsajit::reference
