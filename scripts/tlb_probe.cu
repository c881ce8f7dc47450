// tlb_probe.cu: does address translation cost the KV gathers time, apart from DRAM and L2?
// Sparse MLA gathers rows at random from a pool of num_slots x 1,152 bytes (302 MB at the benches'
// 262,144 slots): at that size prefill h64 is 23 % slower than over 8,192 slots, and the same rows
// in slot order were 22.5 % faster (docs/notes/sparse_mla.md, "Thirty-first session"); the split
// kernel's first KV tile lands 3.5-4.9 us after entry where two DRAM trips take ~1.5 ("Twenty-fifth
// session"). Both were read as L2 effects; a page walk per row would explain them too, and would
// make a slot-ordered gather pay without any row repeating another row's slots.
// Build and run on the GPU machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o /tmp/tlb_probe scripts/tlb_probe.cu
//   /tmp/tlb_probe
// Part 1, latency: one thread chases pointers through 1,024 distinct 128-byte lines, each hop to a
// random line of a random 2 MB page of the first R bytes of a 4 GB buffer (R = 2 MB .. 4 GB), after
// a 256 MB L2 flush (every hop a DRAM read), then again after also touching one line of each 2 MB
// page of a 16 GB buffer (evicting translations). Printed: ns a hop (%globaltimer), median of 5.
// Part 2, throughput: 128 CTAs (one an SM, 64 threads) bulk-copy 2,048 rows of 1,152 bytes each
// into shared memory (the row_rate_probe's loop, 2 tiles of 64 in flight, no math), in these orders:
//   spread         each row of a 302 MB pool read once, rows dealt to CTAs at random, random order
//   spread-sorted  the same rows per CTA, each CTA's list in ascending order
//   local          each row read once, CTA c's 2,048 rows the c-th 2.4 MB of the pool, shuffled
//   uniform P      262,144 draws with replacement from a pool of P slots (the benches' indices)
//   uniform-sorted the same draws, each CTA's list sorted
// "spread" against "local" reads the same lines once each and differs in the pages a CTA touches at
// a time; "spread-sorted" is a slot-ordered row without any repeat between rows. Median of 15
// launches after a 256 MB L2 flush (CUDA events).
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "probe_common.cuh"

constexpr long long kPage = 2ll << 20, kLine = 128;
constexpr long long kChaseBytes = 4ll << 30, kFlushBytes = 256ll << 20;
constexpr int kHops = 1024;
constexpr int kCtas = 128, kDepth = 2, kRowBytes = 1152;
constexpr int kRows = kCtas * kGatherRowsPerCta;  // 262,144
constexpr int kRowsPerCta = kGatherRowsPerCta;

// buf[hop[i]] = hop[i + 1] (byte offsets; the last points to itself).
__global__ void build_chain(unsigned long long* buf, const long long* hop, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    buf[hop[i] / 8] = (unsigned long long)(i + 1 < n ? hop[i + 1] : hop[i]);
}

__global__ void chase(const unsigned long long* buf, long long start, int n, unsigned long long* result) {
  unsigned long long p = (unsigned long long)start;
  const unsigned long long t0 = probe_now_ns();
  for (int i = 0; i < n; ++i) p = __ldcg(buf + p / 8);
  const unsigned long long t1 = probe_now_ns();
  result[0] = t1 - t0;
  result[1] = p;  // keeps the chain live
}

// One line of each 2 MB page, from every CTA (one an SM): each SM's translations and the shared
// ones are filled with the buffer's pages, none of the chase's.
__global__ void touch_pages(unsigned char* buf, long long pages) {
  for (long long i = threadIdx.x; i < pages; i += blockDim.x) buf[i * kPage + 64] = 1;
}

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::size_t free_bytes = 0, total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("%s, %d SMs, L2 %d MB, %.1f GB free\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
              free_bytes / 1e9);

  unsigned char* flush = nullptr;
  CHECK(cudaMalloc(&flush, kFlushBytes));
  const auto flush_l2 = [&](int it) { return cudaMemset(flush, it & 0xff, kFlushBytes); };

  // Part 1: latency a hop.
  unsigned long long* chase_buf = nullptr;
  long long* hops = nullptr;
  unsigned long long* result = nullptr;
  CHECK(cudaMalloc(&chase_buf, kChaseBytes));
  CHECK(cudaMalloc(&hops, sizeof(long long) * kHops));
  CHECK(cudaMalloc(&result, 2 * sizeof(unsigned long long)));
  const long long thrash_bytes = std::min<long long>(16ll << 30, ((long long)free_bytes - (kChaseBytes + (2ll << 30))) / kPage * kPage);
  unsigned char* thrash = nullptr;
  if (thrash_bytes >= (1ll << 30)) CHECK(cudaMalloc(&thrash, thrash_bytes));
  std::printf("\nlatency: %d dependent loads (__ldcg), each to a new line of a random 2 MB page of R; ns a hop\n", kHops);
  std::printf("%10s %14s %22s\n", "R (MB)", "after flush", "after flush + thrash");
  for (const long long region_mb : {2ll, 8ll, 16ll, 32ll, 64ll, 128ll, 256ll, 512ll, 1024ll, 2048ll, 4096ll}) {
    const long long region = region_mb << 20, pages = region / kPage;
    std::mt19937_64 rng{std::uint64_t(region_mb)};
    std::vector<long long> h(kHops);
    std::vector<long long> used;
    for (int i = 0; i < kHops; ++i) {
      long long off;
      do {
        off = std::int64_t(rng() % std::uint64_t(pages)) * kPage + std::int64_t(rng() % std::uint64_t(kPage / kLine)) * kLine;
      } while (std::find(used.begin(), used.end(), off) != used.end());
      used.push_back(off);
      h[i] = off;
    }
    CHECK(cudaMemcpy(hops, h.data(), sizeof(long long) * kHops, cudaMemcpyHostToDevice));
    build_chain<<<1, 256>>>(chase_buf, hops, kHops);
    CHECK(cudaGetLastError());
    double med[2] = {0, 0};
    for (int mode = 0; mode < 2; ++mode) {
      if (mode == 1 && !thrash) break;
      std::vector<double> ns;
      for (int it = 0; it < 6; ++it) {
        CHECK(flush_l2(it));
        if (mode == 1) touch_pages<<<prop.multiProcessorCount, 256>>>(thrash, thrash_bytes / kPage);
        CHECK(cudaGetLastError());
        chase<<<1, 1>>>(chase_buf, h[0], kHops, result);
        CHECK(cudaGetLastError());
        unsigned long long r[2];
        CHECK(cudaMemcpy(r, result, sizeof r, cudaMemcpyDeviceToHost));
        if (it > 0) ns.push_back(double(r[0]) / kHops);
      }
      std::sort(ns.begin(), ns.end());
      med[mode] = ns[ns.size() / 2];
    }
    std::printf("%10lld %14.0f %22.0f\n", region_mb, med[0], med[1]);
  }
  CHECK(cudaFree(chase_buf));
  if (thrash) CHECK(cudaFree(thrash));

  // Part 2: gather throughput by order.
  unsigned char* pool = nullptr;
  int* indices = nullptr;
  unsigned* sink = nullptr;
  const long long max_slots = 1 << 20;  // 1.2 GB, the largest uniform pool
  CHECK(cudaMalloc(&pool, max_slots * kRowBytes));
  CHECK(cudaMemset(pool, 1, max_slots * kRowBytes));
  CHECK(cudaMalloc(&indices, sizeof(int) * kRows));
  CHECK(cudaMalloc(&sink, sizeof(unsigned) * kCtas));
  std::printf("\nthroughput: %d CTAs x %d rows of %d B (bulk copies, %d tiles of %d in flight)\n", kCtas, kRowsPerCta,
              kRowBytes, kDepth, kGatherThreads);
  std::printf("%-24s %9s %10s %9s %8s\n", "order", "pool MB", "median us", "G rows/s", "TB/s");
  const auto sort_each_cta = [](std::vector<int>& v) {
    for (int c = 0; c < kCtas; ++c) std::sort(v.begin() + c * kRowsPerCta, v.begin() + (c + 1) * kRowsPerCta);
  };
  struct Order {
    const char* name;
    long long slots;
    std::vector<int> rows;
  };
  std::vector<Order> orders;
  std::mt19937 rng{7};
  {
    std::vector<int> perm(kRows);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    orders.push_back({"spread", kRows, perm});
    sort_each_cta(perm);
    orders.push_back({"spread-sorted", kRows, perm});
    std::vector<int> local(kRows);
    std::iota(local.begin(), local.end(), 0);
    for (int c = 0; c < kCtas; ++c) std::shuffle(local.begin() + c * kRowsPerCta, local.begin() + (c + 1) * kRowsPerCta, rng);
    orders.push_back({"local", kRows, local});
  }
  for (const long long slots : {32768ll, 262144ll, max_slots}) {
    std::uniform_int_distribution<int> pick(0, int(slots) - 1);
    std::vector<int> v(kRows);
    for (int& x : v) x = pick(rng);
    orders.push_back({"uniform", slots, v});
    sort_each_cta(v);
    orders.push_back({"uniform-sorted", slots, v});
  }
  for (const Order& o : orders) {
    CHECK(cudaMemcpy(indices, o.rows.data(), sizeof(int) * kRows, cudaMemcpyHostToDevice));
    const float us = probe_time_gather(flush, pool, indices, kCtas, kRowBytes, kRowBytes, kDepth, sink);
    if (us < 0) return 1;
    std::printf("%-24s %9.0f %10.1f %9.2f %8.2f\n", o.name, o.slots * double(kRowBytes) / 1e6, us, kRows / us / 1e3,
                double(kRows) * kRowBytes / us / 1e6);
  }
  return 0;
}
