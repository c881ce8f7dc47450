// gather_probe.cu: how fast can one CTA an SM gather random 1152-byte KV rows (d_qk 576, bf16) into
// shared memory, by copy mechanism, at the sparse-MLA kernels' pipeline depth (two 64-row tiles)?
// Decides whether the wgmma kernels' 16-byte cp.async gather is what holds the DRAM-bound decode
// and prefill shapes below the mma_sync kernel's bulk-copy rate (docs/notes/sparse_mla.md,
// "Twenty-fourth session").
// Build and run on the GPU machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o /tmp/gather_probe scripts/gather_probe.cu -lcuda
//   /tmp/gather_probe
// Modes (each CTA: one row of 2048 random slots of a 262,144-slot pool, 32 tiles of 64 rows, two
// tile buffers; a consumer warp waits for each tile, spins `delay` cycles (the math it stands in
// for), then frees the buffer):
//   cp.async   128 threads, 16 bytes each with the L2::256B hint, into 9 swizzled 8 KB subtiles
//              (the seesaw producer's mapping: 8 threads a row, 4 rows a thread)
//   bulk       one warp, one cp.async.bulk of 1152 bytes a row into rows padded to 1168 bytes
//              (the mma_sync kernel's gather)
//   tma        one warp, one 2D cp.async.bulk.tensor box of 64 elements x 1 row per (row, subtile),
//              128-byte swizzle: the subtiles the wgmma kernels read, without per-thread copies
// The first CTA checks its first tile's bytes against the pool (the swizzled modes: the 128-byte
// swizzle of the row's position), so a mode that lands data in the wrong place says so.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

constexpr int kDim = 576, kRowBytes = 1152, kTileRows = 64, kTopk = 2048, kTiles = kTopk / kTileRows;
constexpr long long kSlots = 262144;
constexpr int kSub = 8192, kPadRow = 1168, kPadTile = kTileRows * kPadRow;
constexpr int kBufBytes = kPadTile;  // >= the 9 swizzled subtiles (73,728 bytes)
enum Mode { kCpAsync = 0, kBulk = 1, kTma = 2 };

__device__ __forceinline__ uint32_t smem(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint32_t b, uint32_t n) { asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(b), "r"(n)); }
__device__ __forceinline__ void mbar_wait(uint32_t b, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(b), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t b) { asm volatile("mbarrier.arrive.shared.b64 _, [%0];" ::"r"(b) : "memory"); }
__device__ __forceinline__ void mbar_expect(uint32_t b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
}
__device__ __forceinline__ uint32_t swz(int row, int chunk) { return uint32_t(row * 128 + ((chunk ^ (row & 7)) << 4)); }

template <int MODE>
__global__ void __launch_bounds__(160, 1) gather(const uint16_t* pool, const int* indices, long long delay,
                                               const __grid_constant__ CUtensorMap map, unsigned* result) {
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned char* buf = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  __shared__ __align__(8) unsigned long long bars[4];  // full[2], empty[2]
  __shared__ int idx[kTopk];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int* row_idx = indices + (long long)blockIdx.x * kTopk;
  for (int i = tid; i < kTopk; i += 160) idx[i] = row_idx[i];
  if (tid == 0) {
    for (int s = 0; s < 2; ++s) {
      mbar_init(smem(&bars[s]), MODE == kCpAsync ? 128u : 1u);
      mbar_init(smem(&bars[2 + s]), 1u);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp < 4) {  // producers (bulk and tma: warp 0 alone)
    for (int t = 0; t < kTiles && (MODE == kCpAsync || warp == 0); ++t) {
      const int s = t & 1;
      if (t >= 2) mbar_wait(smem(&bars[2 + s]), uint32_t(((t >> 1) - 1) & 1));
      const uint32_t dst = smem(buf + s * kBufBytes), full = smem(&bars[s]);
      if (MODE == kCpAsync) {
        const int grp = tid >> 3, ch = tid & 7;
        for (int i = 0; i < 4; ++i) {
          const int r = grp + 16 * i;
          const uint16_t* src = pool + (long long)idx[t * kTileRows + r] * kDim + ch * 8;
#pragma unroll
          for (int k = 0; k < 9; ++k)
            asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst + k * kSub + swz(r, ch)),
                         "l"(src + k * 64) : "memory");
        }
        asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(full) : "memory");
      } else {
        if (lane == 0) mbar_expect(full, uint32_t(kTileRows * kRowBytes));
        __syncwarp();
        for (int h = 0; h < 2; ++h) {
          const int r = lane + 32 * h, slot = idx[t * kTileRows + r];
          if (MODE == kBulk) {
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(dst + r * kPadRow), "l"(pool + (long long)slot * kDim), "r"(kRowBytes), "r"(full) : "memory");
          } else {
#pragma unroll
            for (int k = 0; k < 9; ++k)
              asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                           ::"r"(dst + k * kSub + r * 128), "l"(&map), "r"(k * 64), "r"(slot), "r"(full) : "memory");
          }
        }
      }
    }
    if (MODE == kCpAsync) asm volatile("cp.async.wait_all;" ::: "memory");
  } else {  // the consumer warp
    unsigned bad = 0;
    for (int t = 0; t < kTiles; ++t) {
      const int s = t & 1;
      mbar_wait(smem(&bars[s]), uint32_t((t >> 1) & 1));
      if (t == 0 && blockIdx.x == 0) {  // the first tile's bytes against the pool
        for (int r = lane; r < kTileRows; r += 32) {
          const uint16_t* src = pool + (long long)idx[r] * kDim;
          for (int c = 0; c < kDim / 8; ++c) {
            const unsigned char* at = MODE == kBulk ? buf + r * kPadRow + c * 16 : buf + (c >> 3) * kSub + swz(r, c & 7);
            const uint4 got = *reinterpret_cast<const uint4*>(at), want = *reinterpret_cast<const uint4*>(src + c * 8);
            bad += got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w;
          }
        }
      }
      const long long start = clock64();
      while (clock64() - start < delay) {}
      __syncwarp();
      if (lane == 0) mbar_arrive(smem(&bars[2 + s]));
    }
    bad = __reduce_add_sync(0xffffffffu, bad);
    if (lane == 0 && blockIdx.x == 0) result[0] = bad;
  }
}

int main() {
  std::vector<uint16_t> h_pool(size_t(kSlots) * kDim);
  for (size_t i = 0; i < h_pool.size(); ++i) h_pool[i] = uint16_t(i * 2654435761u >> 7);
  uint16_t* pool;
  cudaMalloc(&pool, h_pool.size() * 2);
  cudaMemcpy(pool, h_pool.data(), h_pool.size() * 2, cudaMemcpyHostToDevice);
  const int max_rows = 264;
  std::vector<int> h_idx(size_t(max_rows) * kTopk);
  uint64_t x = 88172645463325252ull;
  for (auto& v : h_idx) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; v = int(x % uint64_t(kSlots)); }
  int* idx;
  cudaMalloc(&idx, h_idx.size() * 4);
  cudaMemcpy(idx, h_idx.data(), h_idx.size() * 4, cudaMemcpyHostToDevice);
  unsigned* result;
  cudaMalloc(&result, 4);
  void* flush;
  cudaMalloc(&flush, size_t(256) << 20);

  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(kDim), cuuint64_t(kSlots)};
  const cuuint64_t strides[1] = {cuuint64_t(kRowBytes)};
  const cuuint32_t box[2] = {64, 1}, estr[2] = {1, 1};
  CUresult e = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, pool, dims, strides, box, estr,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (e != CUDA_SUCCESS) { std::printf("cuTensorMapEncodeTiled: %d\n", int(e)); return 1; }

  const int smem_bytes = 2 * kBufBytes + 1024;
  void (*kernels[3])(const uint16_t*, const int*, long long, const CUtensorMap, unsigned*) = {gather<0>, gather<1>, gather<2>};
  const char* names[3] = {"cp.async", "bulk", "tma"};
  for (auto k : kernels) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::printf("%-9s %5s %6s %9s %8s %5s\n", "mode", "ctas", "delay", "us", "TB/s", "check");
  for (int ctas : {128, 132, 264}) {
    for (long long delay : {0LL, 2000LL, 4000LL}) {
      for (int m = 0; m < 3; ++m) {
        std::vector<float> ts;
        unsigned bad = 0;
        for (int it = 0; it < 23; ++it) {
          cudaMemsetAsync(flush, it, size_t(256) << 20);
          cudaMemsetAsync(result, 0xff, 4);
          cudaEventRecord(a);
          kernels[m]<<<ctas, 160, smem_bytes>>>(pool, idx, delay, map, result);
          cudaEventRecord(b);
          cudaEventSynchronize(b);
          float ms;
          cudaEventElapsedTime(&ms, a, b);
          if (it >= 3) ts.push_back(ms * 1e3f);
          cudaMemcpy(&bad, result, 4, cudaMemcpyDeviceToHost);
        }
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) { std::printf("%s: %s\n", names[m], cudaGetErrorString(err)); return 1; }
        std::sort(ts.begin(), ts.end());
        const double us = ts[ts.size() / 2];
        const double bytes = double(ctas) * kTopk * kRowBytes;
        std::printf("%-9s %5d %6lld %9.1f %8.2f %5s\n", names[m], ctas, delay, us, bytes / us * 1e-6, bad == 0 ? "ok" : "BAD");
      }
    }
  }
  return 0;
}
