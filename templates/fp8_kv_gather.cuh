// fp8_kv_gather.cuh — §4: gather slots of the FP8 paged KV cache and dequantize them to bf16
// [n, 576] (656-byte token layout and helpers in device_common.cuh).
//
// One warp per output row, NSAJIT_THREADS / 32 rows per CTA. Lane l writes latent dims
// [16l, 16l + 16) = bf16(e4m3 * scale[l / 8]) (dequant_e4m3x16) and rope dims 512 + 2l, 513 + 2l
// copied as raw bits. A slot outside [0, num_slots) gives an all-zero row; the cache is not read.
// Every output element of the n rows is written. Bit-exact with reference/fp8_kv_cache.cpp but
// for NaN payloads (an e4m3 NaN code, 0x7f / 0xff, gives a NaN).
#include "device_common.cuh"

// NSAJIT_PAGE_SIZE and NSAJIT_THREADS come from the spec (families/fp8_kv_cache/traits.cpp).
static_assert(NSAJIT_PAGE_SIZE >= 1 && NSAJIT_THREADS % 32 == 0 && NSAJIT_THREADS <= 1024,
              "page size >= 1; threads: whole warps, <= 1024");

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS)
    nsajit_fp8_kv_gather(const Fp8KvGatherParams p) {
  constexpr int warps = NSAJIT_THREADS / 32;
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * warps + (threadIdx.x >> 5);
  if (row >= p.n) return;
  const long long slot = p.slots[row];

  uint32_t w[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};  // latent dims [16l, 16l + 16), packed bf16
  uint32_t rope = 0u;                                // rope dims 512 + 2l, 513 + 2l
  if (slot >= 0 && slot < p.num_slots) {
    const uint8_t* token = fp8_kv_token(p.cache, p.page_stride, NSAJIT_PAGE_SIZE, slot);
    // The hardware e4m3 -> f16 conversion (exact), as the sparse MLA kernels dequantize: a third of
    // the software path's instructions (a NaN code gives a NaN of another payload).
    const u32x4 codes = *reinterpret_cast<const u32x4*>(token + 16 * lane);
    u32x4 lo, hi;
    dequant_e4m3x16(codes, fp8_kv_scale(token, lane / 8), lo, hi);
    w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w, w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w;
    rope = reinterpret_cast<const uint32_t*>(token + fp8_kv_rope_offset)[lane];
  }

  bf16_t* dst = p.out + row * p.out_row_stride;
  bf16_t* mine = dst + 16 * lane;
  if ((reinterpret_cast<unsigned long long>(dst) & 15ull) == 0) {
    u32x4* d = reinterpret_cast<u32x4*>(mine);
    d[0] = u32x4{w[0], w[1], w[2], w[3]};
    d[1] = u32x4{w[4], w[5], w[6], w[7]};
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      mine[2 * i] = bf16_t(w[i]);
      mine[2 * i + 1] = bf16_t(w[i] >> 16);
    }
  }
  bf16_t* r = dst + fp8_kv_latent_dims + 2 * lane;
  if ((reinterpret_cast<unsigned long long>(r) & 3ull) == 0) {
    *reinterpret_cast<uint32_t*>(r) = rope;
  } else {
    r[0] = bf16_t(rope);
    r[1] = bf16_t(rope >> 16);
  }
}
