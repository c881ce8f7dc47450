// device_common.cuh — the only device support code generated kernels use.
//
// Generated sources must compile under NVRTC with no include path, so nothing here includes a
// toolkit header: fixed-width integers, bf16 conversions and the few PTX wrappers we need are
// written out. NVRTC provides the CUDA builtins (threadIdx, __syncthreads, __shfl_*_sync,
// atomics, math functions) without includes.
#pragma once
#include "kernel_params.h"

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

#define NSAJIT_DEVICE __device__ __forceinline__

// bf16 stored as its 16 raw bits.
typedef uint16_t bf16_t;

NSAJIT_DEVICE float bf16_to_float(bf16_t v) { return __uint_as_float(uint32_t(v) << 16); }

// Round to nearest even; NaN stays NaN (quiet), inf stays inf.
NSAJIT_DEVICE bf16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t(u >> 16);
}

// Two packed bf16 (low half first in memory) to floats.
NSAJIT_DEVICE float bf16x2_lo(uint32_t v) { return __uint_as_float(v << 16); }
NSAJIT_DEVICE float bf16x2_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

struct alignas(16) u32x4 {
  uint32_t x, y, z, w;
};

// 16-byte global load that bypasses L1 allocation (streamed data).
NSAJIT_DEVICE u32x4 load_global_nc_16(const void* ptr) {
  u32x4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

NSAJIT_DEVICE float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

NSAJIT_DEVICE float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// int, or uint32_t where sums may pass INT_MAX (packed counts: unsigned wrap is defined).
template <class T>
NSAJIT_DEVICE T warp_inclusive_scan(T v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

// ---- shared memory by address and mbarriers (sm_90 PTX; addresses from cvta.to.shared) ----------

NSAJIT_DEVICE void st_shared_16(uint32_t saddr, const u32x4& v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(saddr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
NSAJIT_DEVICE void st_shared_4(uint32_t saddr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(saddr), "r"(v) : "memory");
}
// Waits for every cp.async this thread issued.
NSAJIT_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones (bulk
// copies, wgmma operands) and the reverse.
NSAJIT_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
NSAJIT_DEVICE void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
NSAJIT_DEVICE void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
}

// ---- shared memory and barriers --------------------------------------------------------------------
NSAJIT_DEVICE float neg_inf() { return __uint_as_float(0xff800000u); }
NSAJIT_DEVICE float pos_inf() { return __uint_as_float(0x7f800000u); }

// Sparse MLA's output scale for a row with l = sum_j 2^(s_j - m) (base-2 logits s, reference m):
// 1 / l, times FlashMLA's attention-sink factor 1 / (1 + exp(sink - lse)) when sink is not null
// (lse = (m + log2 l) ln 2, sink in natural-log units): 1 / (l + 2^(sink log2 e - m)). sink +inf
// gives 0, -inf gives 1 / l; l == 0 (no valid token) gives 0.
NSAJIT_DEVICE float mla_output_scale(float l, float m, const float* sink) {
  if (!(l > 0.f)) return 0.f;
  const float extra = sink != nullptr ? exp2f(fmaf(*sink, 1.4426950408889634f, -m)) : 0.f;
  return 1.f / (l + extra);
}

// The 32-bit shared-memory address of a generic pointer into shared memory.
NSAJIT_DEVICE uint32_t smem_u32(const void* p) {
  uint32_t a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// Named barrier `id` (1..15; 0 is __syncthreads) of `threads` threads.
NSAJIT_DEVICE void bar_sync(int id, int threads) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory"); }

// ---- FP8 e4m3 and the 656-byte FP8 KV token (§4) ----------------------------------------------
// e4m3 (OCP E4M3FN, torch.float8_e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
// infinities; S.1111.111 (0x7f / 0xff) is NaN; largest finite ±448 (0x7e); subnormals m * 2^-9.
// Written out bit by bit (NVRTC has no cuda_fp8.h); bit-exact with reference/fp8_kv_cache.cpp.
//
// Token layout (FlashMLA "V3.2 FP8 sparse"): bytes [0, 512) 512 e4m3 latent dims; [512, 528) 4 fp32
// scales, scale t covers dims [128t, 128t + 128); [528, 656) 64 bf16 rope dims 512..575.
// Dequantized latent dim d = bf16(float(e4m3 byte d) * scale[d / 128]); rope dims as stored.

constexpr int fp8_kv_token_bytes = kFp8KvTokenBytes;
constexpr int fp8_kv_latent_dims = 512;
constexpr int fp8_kv_rope_dims = 64;
constexpr int fp8_kv_tile_dims = 128;      // dims per scale
constexpr int fp8_kv_scale_offset = 512;   // byte offset of the 4 fp32 scales
constexpr int fp8_kv_rope_offset = 528;    // byte offset of the 64 bf16 rope dims

// Two floats -> bf16x2 (lo in the low half), each rounded to nearest even (cvt.rn.bf16x2.f32).
NSAJIT_DEVICE uint32_t pack_bf16x2_rn(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Four e4m3 codes (byte i = element i) -> f16x2 of elements 0, 1 (lo) and 2, 3 (hi), exact (sm_89+).
// Each 16-bit half of the word goes to the conversion as it is: masking and shifting the halves
// out first (as a cvt.u16.u32 per pair did) costs two instructions a word.
NSAJIT_DEVICE void e4m3x4_to_f16x2x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.rn.f16x2.e4m3x2 %0, l; cvt.rn.f16x2.e4m3x2 %1, h; }"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
}

// f16x2 -> bf16x2 of bf16(float(f16) * its scale), each half rounded to nearest even.
NSAJIT_DEVICE uint32_t scale2_f16x2_to_bf16x2(uint32_t h2, float scale_lo, float scale_hi) {
  float lo, hi;
  asm("{ .reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
      : "=f"(lo), "=f"(hi)
      : "r"(h2));
  return pack_bf16x2_rn(lo * scale_lo, hi * scale_hi);
}
// The same with one scale for both halves.
NSAJIT_DEVICE uint32_t scale_f16x2_to_bf16x2(uint32_t h2, float scale) { return scale2_f16x2_to_bf16x2(h2, scale, scale); }

// 16 e4m3 codes (byte i = dim i) -> bf16 dims 0-7 (lo) and 8-15 (hi) of bf16(float(e4m3) * scale),
// §4's dequant, with the sm_89+ conversion (e4m3 -> f16 is exact). Bit-exact with
// reference/fp8_kv_cache.cpp for non-NaN codes.
NSAJIT_DEVICE void dequant_e4m3x16(const u32x4& f, float scale, u32x4& lo, u32x4& hi) {
  uint32_t h[8];
  const uint32_t w[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) e4m3x4_to_f16x2x2(w[i], h[2 * i], h[2 * i + 1]);
  lo = u32x4{scale_f16x2_to_bf16x2(h[0], scale), scale_f16x2_to_bf16x2(h[1], scale),
             scale_f16x2_to_bf16x2(h[2], scale), scale_f16x2_to_bf16x2(h[3], scale)};
  hi = u32x4{scale_f16x2_to_bf16x2(h[4], scale), scale_f16x2_to_bf16x2(h[5], scale),
             scale_f16x2_to_bf16x2(h[6], scale), scale_f16x2_to_bf16x2(h[7], scale)};
}

// 2^x on the special-function unit (ex2.approx.ftz, the accuracy of exp2f); a result below 2^-126
// is 0. exp2f spends three more instructions a call to keep such subnormal results, which softmax
// weights never need: the largest weight of a row is >= 1 (the reference is at most the max).
NSAJIT_DEVICE float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// float -> e4m3 code (low 8 bits): saturating (|x| >= 448, inf included -> ±448), round to nearest
// even, NaN -> 0x7f with the sign kept. For every non-NaN input the same code as PTX
// cvt.rn.satfinite.e4m3x2.f32 (sm_89+), which is not used so that every arch gives one answer.
NSAJIT_DEVICE uint32_t float_to_e4m3(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;  // |x| bits
  if (a > 0x7f800000u) return sign | 0x7fu;          // NaN
  if (a >= 0x43e00000u) return sign | 0x7eu;         // |x| >= 448 (incl. inf): saturate
  if (a < 0x3c800000u) {                             // |x| < 2^-6: subnormal e4m3, m * 2^-9
    const float m = rintf(__uint_as_float(a) * 512.0f);  // exact scaling; rintf rounds half to even
    return sign | uint32_t(m);                       // 0..8 (8 = 0x08 = 2^-6, the smallest normal)
  }
  // Normal: keep 3 of 23 mantissa bits, RNE; a carry moves into the exponent, as it should.
  const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;  // (fp32 exponent << 3) | mantissa
  return sign | (r - (120u << 3));                   // rebias 127 -> 7; at most 0x7e (448)
}

// The token of `slot` in a paged FP8 cache: page slot / page_size at page_stride bytes, row
// slot % page_size of 656 bytes; 64-bit offsets (a pool can exceed 2^31 bytes). The caller checks
// 0 <= slot < num_pages * page_size. Pass page_size as a compile-time constant where possible.
NSAJIT_DEVICE const uint8_t* fp8_kv_token(const uint8_t* cache, long long page_stride,
                                          int page_size, long long slot) {
  return cache + (slot / page_size) * page_stride + (slot % page_size) * fp8_kv_token_bytes;
}

// The same for a valid slot below 2^31 and a run-time page size: 32-bit division and remainder
// (cheaper than 64-bit ones), 64-bit offsets.
NSAJIT_DEVICE const uint8_t* fp8_kv_token_u32(const uint8_t* cache, long long page_stride, int page_size, int slot) {
  const unsigned ps = (unsigned)page_size;
  return cache + (long long)((unsigned)slot / ps) * page_stride + (long long)((unsigned)slot % ps) * fp8_kv_token_bytes;
}

// The fp32 scale of tile t (0..3) of a token.
NSAJIT_DEVICE float fp8_kv_scale(const uint8_t* token, int tile) {
  return reinterpret_cast<const float*>(token + fp8_kv_scale_offset)[tile];
}

// The request of prefill row r: the last b with cu_seqlens_q[b] <= r (binary search over a
// non-decreasing cu_seqlens_q[0..n]), or -1 when r is outside [cu[0], cu[n]). The final
// r < cu[b + 1] check keeps a malformed (decreasing) cu_seqlens_q from selecting a request that
// does not contain r. Used by the index transform and the fused top-k.
NSAJIT_DEVICE int find_request(const int* cu, int n, int r) {
  if (n <= 0 || r < cu[0] || r >= cu[n]) return -1;
  int lo = 0, hi = n - 1;  // cu[lo] <= r; the answer lies in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (cu[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  return r < cu[lo + 1] ? lo : -1;
}

// Sparse MLA: entry j of a query row's index list, or -1 when j >= n (topk_length) or the entry is
// not a slot in [0, num_slots) (§3: -1 and every other out-of-range value are invalid).
// A kernel that loads an index a tile before it uses it keeps the raw entry (load_index_raw) and
// checks it where it uses it (valid_index): checked at once, the load's latency stalls the thread
// right there, and the load is not ahead at all.
NSAJIT_DEVICE int load_index_raw(const int* idx_row, int j, int n) { return j < n ? __ldg(idx_row + j) : -1; }
NSAJIT_DEVICE int valid_index(int raw, long long num_slots) {
  return (raw >= 0 && (long long)raw < num_slots) ? raw : -1;
}
NSAJIT_DEVICE int load_index(const int* idx_row, int j, int n, long long num_slots) {
  return valid_index(load_index_raw(idx_row, j, n), num_slots);
}
