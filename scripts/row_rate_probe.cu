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
#include <algorithm>
#include <random>
#include <vector>

#include "probe_common.cuh"

constexpr int kThreads = kGatherThreads, kCtas = 128, kRowsPerCta = kGatherRowsPerCta;
constexpr long long kPoolBytes = 1ll << 30;

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
        const float us = probe_time_gather(flush, pool, indices, kCtas, row_bytes, stride, depth, sink);
        if (us < 0) return 1;
        const double rows = double(kCtas) * kRowsPerCta;
        std::printf("%9d %7lld %6d %10.1f %9.2f %8.2f\n", row_bytes, stride, depth, us, rows / us / 1e3,
                    rows * row_bytes / us / 1e6);
      }
    }
  return 0;
}
