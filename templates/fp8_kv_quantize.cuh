// fp8_kv_quantize.cuh — §4: quantize bf16 [n, 576] rows and store them into slots of the FP8 paged
// KV cache (656 bytes per token; layout and e4m3 helpers in device_common.cuh).
//
// One warp per row, NSAJIT_THREADS / 32 rows per CTA. Lane l owns latent dims [16l, 16l + 16), so
// lanes 8t..8t+7 hold tile t (dims [128t, 128t + 128)): amax = max |x| over the tile (three xor
// shuffles), scale as below, byte d = float_to_e4m3(x_d / scale) (IEEE fp32 division, saturated to
// ±448, RNE); one 16-byte store per lane. Lanes 0, 8, 16, 24 store the four fp32 scales; lane l
// copies rope dims 512 + 2l, 513 + 2l as raw bits. A slot outside [0, num_slots) skips the row:
// it is not read and no cache byte is written. Byte-exact with reference/fp8_kv_cache.cpp.
//   scale_fmt 0 (fp32):  scale = max(amax / 448, FLT_MIN)
//   scale_fmt 1 (ue8m0): scale = 2^ceil(log2(max(amax / 448, 1e-4f))), exact (from the bits)
// NSAJIT_PAGE_SIZE (tokens per page) is a compile-time constant, so slot / P and slot % P are cheap.
#include "device_common.cuh"

// NSAJIT_PAGE_SIZE and NSAJIT_THREADS come from the spec (families/fp8_kv_cache/traits.cpp).
static_assert(NSAJIT_PAGE_SIZE >= 1 && NSAJIT_THREADS % 32 == 0 && NSAJIT_THREADS <= 1024,
              "page size >= 1; threads: whole warps, <= 1024");

// The scale of a tile from its amax (>= 0, never NaN: fmaxf drops NaN inputs).
NSAJIT_DEVICE float fp8_kv_tile_scale(float amax, int scale_fmt) {
  const float s = __fdiv_rn(amax, 448.0f);
  if (scale_fmt == 0) return fmaxf(s, __uint_as_float(0x00800000u));  // FLT_MIN
  uint32_t u = __float_as_uint(fmaxf(s, 1e-4f));
  if (u & 0x007fffffu) u = (u & 0xff800000u) + 0x00800000u;  // not a power of two: next one up
  return __uint_as_float(u);
}

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS)
    nsajit_fp8_kv_quantize(const Fp8KvQuantizeParams p) {
  constexpr int warps = NSAJIT_THREADS / 32;
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * warps + (threadIdx.x >> 5);
  if (row >= p.n) return;
  const long long slot = p.slots[row];
  if (slot < 0 || slot >= p.num_slots) return;  // whole warp: the shuffles below stay converged
  const bf16_t* src = p.kv + row * p.kv_row_stride;
  uint8_t* token = p.cache + (slot / NSAJIT_PAGE_SIZE) * p.page_stride +
                   (slot % NSAJIT_PAGE_SIZE) * fp8_kv_token_bytes;

  float x[16];
  const bf16_t* mine = src + 16 * lane;
  if ((reinterpret_cast<unsigned long long>(src) & 15ull) == 0) {
    const u32x4 a = load_global_nc_16(mine), b = load_global_nc_16(mine + 8);
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[2 * i] = bf16x2_lo(w[i]);
      x[2 * i + 1] = bf16x2_hi(w[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = bf16_to_float(mine[i]);
  }

  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(x[i]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
  const float scale = fp8_kv_tile_scale(amax, p.scale_fmt);

  uint32_t q[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int i = 0; i < 16; ++i) q[i >> 2] |= float_to_e4m3(__fdiv_rn(x[i], scale)) << (8 * (i & 3));
  *reinterpret_cast<u32x4*>(token + 16 * lane) = u32x4{q[0], q[1], q[2], q[3]};
  if ((lane & 7) == 0) reinterpret_cast<float*>(token + fp8_kv_scale_offset)[lane >> 3] = scale;

  const bf16_t* rope = src + fp8_kv_latent_dims + 2 * lane;
  reinterpret_cast<uint32_t*>(token + fp8_kv_rope_offset)[lane] =
      uint32_t(rope[0]) | (uint32_t(rope[1]) << 16);
}
