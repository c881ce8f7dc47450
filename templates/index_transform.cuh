// index_transform.cuh — §1: raw top-k positions -> KV-cache slots (or -1), one CTA per row of
// NSAJIT_TOPK indices; every output element is written. The transform itself (modes, validity,
// slot arithmetic) is templates/kv_slot_transform.cuh, shared with the fused top-k.
#include "kv_slot_transform.cuh"

#ifndef NSAJIT_TOPK
#error "NSAJIT_TOPK must be defined"
#endif
#ifndef NSAJIT_THREADS
#define NSAJIT_THREADS 256
#endif

static_assert(NSAJIT_TOPK % 64 == 0, "topk must be a multiple of 64");
static_assert(NSAJIT_THREADS % 32 == 0 && NSAJIT_THREADS <= 1024, "threads: whole warps, <= 1024");

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS)
    nsajit_index_transform(const IndexTransformParams p) {
  const int r = blockIdx.x;
  if (r >= p.rows) return;

  const KvSlotRow row = kv_slot_row(p, r);

  const int* in = p.topk_indices + (long long)r * NSAJIT_TOPK;
  int* out = p.out + (long long)r * NSAJIT_TOPK;

  // A row is NSAJIT_TOPK * 4 bytes, a multiple of 256, so every row is 16-byte aligned exactly
  // when the base pointers are. In-place (in == out) is fine: each element is read, then written,
  // by the same thread.
  if ((((unsigned long long)p.topk_indices | (unsigned long long)p.out) & 15ull) == 0) {
    const u32x4* in4 = reinterpret_cast<const u32x4*>(in);
    u32x4* out4 = reinterpret_cast<u32x4*>(out);
    for (int v = threadIdx.x; v < NSAJIT_TOPK / 4; v += NSAJIT_THREADS) {
      const u32x4 x = in4[v];
      u32x4 y;
      y.x = uint32_t(kv_slot(row, int(x.x)));
      y.y = uint32_t(kv_slot(row, int(x.y)));
      y.z = uint32_t(kv_slot(row, int(x.z)));
      y.w = uint32_t(kv_slot(row, int(x.w)));
      out4[v] = y;
    }
  } else {
    for (int j = threadIdx.x; j < NSAJIT_TOPK; j += NSAJIT_THREADS)
      out[j] = kv_slot(row, in[j]);
  }
}
