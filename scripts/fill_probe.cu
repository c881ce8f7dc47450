// fill_probe.cu: decode b1's first tiles. How long do N CTAs (one an SM) take to bulk-copy R random
// 1152-byte KV rows each into shared memory after an L2 flush, when groups of S CTAs copy the same
// rows (the head groups of one split: S = 4 at h_q 64, 8 at 128, with 16 heads a CTA) or every CTA
// its own (S = 1)? If the time grows with S at equal R, the L2's reads of the repeated rows bound
// the fill and one load a group (multicast) would pay; if it does not, the chain is latency
// (docs/notes/sparse_mla.md, "Twenty-fifth session").
// Build and run on the GPU machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o /tmp/fill_probe scripts/fill_probe.cu
//   /tmp/fill_probe
// Each CTA: thread 0 stamps %globaltimer, 64 threads load their rows' indices (cold, as the
// kernels' first index entries) and issue one cp.async.bulk of 1152 bytes a row into rows padded
// to 1168 bytes, completing on one mbarrier; thread 0 stamps again once it has completed. Printed
// per (N, S, R): medians over 25 launches of the slowest CTA's and of the median CTA's time, in us.
// The second table fills the same rows with 16-byte cp.async from 128 threads (indices staged in
// shared memory first): is the bulk copy, one a row, what limits one SM's fill rate?
#include <algorithm>
#include <random>
#include <vector>

#include "probe_common.cuh"

constexpr int kRowBytes = 1152, kPadRow = 1168, kMaxRows = 128, kThreads = 64;
constexpr long long kSlots = 262144;

// indices: [N / S groups][R]; out: [N] nanoseconds from the CTA's start to its rows' arrival.
__global__ void __launch_bounds__(kThreads, 1) fill(const unsigned char* pool, const int* indices, int rows, int share,
                                                    unsigned long long* out) {
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned long long t0 = probe_now_ns();
  const uint32_t b = uint32_t(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(b), "r"(unsigned(rows)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int* idx = indices + (long long)(blockIdx.x / share) * rows;
  for (int r = threadIdx.x; r < rows; r += kThreads) {
    const long long slot = idx[r];
    const uint32_t dst = uint32_t(__cvta_generic_to_shared(buf + r * kPadRow));
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(unsigned(kRowBytes)) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(pool + slot * kRowBytes), "r"(unsigned(kRowBytes)), "r"(b)
                 : "memory");
  }
  if (threadIdx.x == 0) {
    uint32_t done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(b) : "memory");
    out[blockIdx.x] = probe_now_ns() - t0;
  }
}

// The same fill as 16-byte cp.async.cg from kCpThreads threads: the row indices go to shared
// memory first (one barrier), then thread t copies chunks t, t + kCpThreads, ... of the R x 72.
constexpr int kCpThreads = 128, kChunks = kRowBytes / 16;
__global__ void __launch_bounds__(kCpThreads, 1) fill_cp(const unsigned char* pool, const int* indices, int rows,
                                                        int share, unsigned long long* out) {
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ int slot_of[kMaxRows];
  const unsigned long long t0 = probe_now_ns();
  const int* idx = indices + (long long)(blockIdx.x / share) * rows;
  for (int r = threadIdx.x; r < rows; r += kCpThreads) slot_of[r] = idx[r];
  __syncthreads();
  for (int i = threadIdx.x; i < rows * kChunks; i += kCpThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const uint32_t dst = uint32_t(__cvta_generic_to_shared(buf + r * kPadRow + c * 16));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst),
                 "l"(pool + (long long)slot_of[r] * kRowBytes + c * 16)
                 : "memory");
  }
  asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = probe_now_ns() - t0;
}

int main() {
  unsigned char* pool = nullptr;
  unsigned char* flush = nullptr;
  int* indices = nullptr;
  unsigned long long* out = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  CHECK(cudaMalloc(&pool, size_t(kSlots) * kRowBytes));
  CHECK(cudaMemset(pool, 1, size_t(kSlots) * kRowBytes));
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&indices, sizeof(int) * 132 * kMaxRows));
  CHECK(cudaMalloc(&out, sizeof(unsigned long long) * 132));
  CHECK(cudaFuncSetAttribute(fill, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxRows * kPadRow));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> slot(0, int(kSlots) - 1);
  CHECK(cudaFuncSetAttribute(fill_cp, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxRows * kPadRow));
  for (const int mode : {0, 1}) {
    std::printf("%s\n%5s %3s %4s %12s %12s\n", mode == 0 ? "bulk, one copy a row, 64 threads" : "cp.async 16 B, 128 threads",
                "ctas", "S", "rows", "slowest us", "median us");
    for (const int rows : {64, 128})
      for (const int ctas : {32, 64, 128})
        for (const int share : {1, 4, 8}) {
          std::vector<double> slowest, median;
          for (int launch = 0; launch < 27; ++launch) {
            std::vector<int> h(static_cast<size_t>(ctas / share) * rows);
            for (int& v : h) v = slot(rng);
            CHECK(cudaMemcpy(indices, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
            CHECK(cudaMemset(flush, launch, flush_bytes));  // evicts the pool's and the indices' lines
            if (mode == 0) fill<<<ctas, kThreads, rows * kPadRow>>>(pool, indices, rows, share, out);
            else fill_cp<<<ctas, kCpThreads, rows * kPadRow>>>(pool, indices, rows, share, out);
            CHECK(cudaGetLastError());
            std::vector<unsigned long long> t(static_cast<size_t>(ctas));
            CHECK(cudaMemcpy(t.data(), out, t.size() * sizeof(t[0]), cudaMemcpyDeviceToHost));
            if (launch < 2) continue;  // warm-up: code and TLB set-up
            std::sort(t.begin(), t.end());
            slowest.push_back(t.back() / 1e3);
            median.push_back(t[t.size() / 2] / 1e3);
          }
          std::sort(slowest.begin(), slowest.end());
          std::sort(median.begin(), median.end());
          std::printf("%5d %3d %4d %12.2f %12.2f\n", ctas, share, rows, slowest[slowest.size() / 2], median[median.size() / 2]);
        }
  }
  return 0;
}
