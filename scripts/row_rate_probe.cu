// row_rate_probe.cu: how many random KV rows a second can the whole GPU gather into shared memory,
// and does it depend on the rows' bytes? The sparse-MLA decode kernels at 16 heads took the same
// time for 1,152-byte bf16 rows and 656-byte FP8 rows on the H200 (docs/notes/sparse_mla.md,
// "Twenty-seventh session"); if a row costs about the same whatever its size, the decode lines that
// ask for more rows a second than this probe reaches are beyond any kernel's gather.
// Build and run on the GPU machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o /tmp/row_rate_probe scripts/row_rate_probe.cu
//   /tmp/row_rate_probe
// Each of 128 CTAs (one an SM, 64 threads) gathers 2,048 rows (262,144 in all: the decode bench's
// b128 n1) in tiles of 64, thread i one bulk copy of row i of a tile, with `depth` tiles in flight
// (the next tile waits for the oldest); no math. Rows are uniform random slots of a 1 GB pool, at
// a stride of the row's bytes (as the caches store them) or rounded up to 128 bytes. Printed per
// (row bytes, stride, depth): the median of 15 launches after a 256 MB L2 flush (CUDA events), G
// rows/s and TB/s.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

constexpr int kThreads = 64, kCtas = 128, kRowsPerCta = 2048, kMaxDepth = 8;
constexpr long long kPoolBytes = 1ll << 30;

#define CHECK(x)                                                                            \
  do {                                                                                      \
    cudaError_t e = (x);                                                                    \
    if (e != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

__global__ void __launch_bounds__(kThreads, 1) gather(const unsigned char* pool, const int* indices, int row_bytes,
                                                      long long stride, int depth, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ __align__(8) unsigned long long bars[kMaxDepth];
  if (threadIdx.x < depth) {
    const uint32_t b = uint32_t(__cvta_generic_to_shared(&bars[threadIdx.x]));
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(b), "r"(unsigned(kThreads)));
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const int* idx = indices + (long long)blockIdx.x * kRowsPerCta;
  const int tiles = kRowsPerCta / kThreads;
  const unsigned slot_bytes = (unsigned(row_bytes) + 15u) & ~15u;
  for (int t = 0; t < tiles + depth; ++t) {
    if (t >= depth) {  // the oldest tile in flight must land before its buffer is refilled
      const int u = t - depth;
      const uint32_t b = uint32_t(__cvta_generic_to_shared(&bars[u % depth]));
      const uint32_t parity = uint32_t((u / depth) & 1);
      uint32_t done = 0;
      while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(b), "r"(parity)
                     : "memory");
    }
    if (t < tiles) {
      const int slot = idx[t * kThreads + threadIdx.x];
      const uint32_t b = uint32_t(__cvta_generic_to_shared(&bars[t % depth]));
      const uint32_t dst = uint32_t(__cvta_generic_to_shared(buf + ((t % depth) * kThreads + threadIdx.x) * slot_bytes));
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(unsigned(row_bytes)) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                   "l"(pool + slot * stride), "r"(unsigned(row_bytes)), "r"(b)
                   : "memory");
    }
  }
  if (threadIdx.x == 0 && buf[0] == 0xAB && buf[1] == 0xCD) sink[blockIdx.x] = 1;  // keeps the copies live
}

int main() {
  unsigned char* pool = nullptr;
  unsigned char* flush = nullptr;
  int* indices = nullptr;
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&pool, kPoolBytes));
  CHECK(cudaMemset(pool, 1, kPoolBytes));
  CHECK(cudaMalloc(&flush, 256 << 20));
  CHECK(cudaMalloc(&indices, sizeof(int) * kCtas * kRowsPerCta));
  CHECK(cudaMalloc(&sink, sizeof(unsigned) * kCtas));
  CHECK(cudaFuncSetAttribute(gather, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::printf("%9s %7s %6s %10s %9s %8s\n", "row B", "stride", "depth", "median us", "G rows/s", "TB/s");
  for (const int row_bytes : {128, 256, 512, 656, 1152, 2304})
    for (const bool aligned : {false, true}) {
      const long long stride = aligned ? (row_bytes + 127) / 128 * 128 : row_bytes;
      if (aligned && stride == row_bytes) continue;
      std::mt19937 rng{unsigned(row_bytes)};
      std::uniform_int_distribution<int> pick(0, int(kPoolBytes / stride) - 1);
      std::vector<int> host(std::size_t(kCtas) * kRowsPerCta);
      for (int& v : host) v = pick(rng);
      CHECK(cudaMemcpy(indices, host.data(), sizeof(int) * host.size(), cudaMemcpyHostToDevice));
      const unsigned slot_bytes = (unsigned(row_bytes) + 15u) & ~15u;
      for (const int depth : {1, 2, 4, 8}) {
        const std::size_t smem = std::size_t(depth) * kThreads * slot_bytes;
        if (smem > 200 * 1024) continue;
        std::vector<float> times;
        for (int it = 0; it < 16; ++it) {
          CHECK(cudaMemset(flush, it, 256 << 20));
          CHECK(cudaEventRecord(e0));
          gather<<<kCtas, kThreads, smem>>>(pool, indices, row_bytes, stride, depth, sink);
          CHECK(cudaEventRecord(e1));
          CHECK(cudaEventSynchronize(e1));
          CHECK(cudaGetLastError());
          float ms = 0.f;
          CHECK(cudaEventElapsedTime(&ms, e0, e1));
          if (it > 0) times.push_back(ms * 1000.f);
        }
        std::sort(times.begin(), times.end());
        const float us = times[times.size() / 2];
        const double rows = double(kCtas) * kRowsPerCta;
        std::printf("%9d %7lld %6d %10.1f %9.2f %8.2f\n", row_bytes, stride, depth, us, rows / us / 1e3,
                    rows * row_bytes / us / 1e6);
      }
    }
  return 0;
}
