// racecheck_probe.cu: a race-free named-barrier hand-off, to tell a compute-sanitizer racecheck
// artefact from a race in the sparse-MLA wgmma kernels (docs/notes/sparse_mla.md, "racecheck").
// Build and run on the GPU machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o /tmp/probe scripts/racecheck_probe.cu
//   compute-sanitizer --tool racecheck /tmp/probe
// WG0 writes a[] then bar.arrive(P_READY); WG1 bar.sync(P_READY), reads a[], bar.arrive(P_FREE);
// WG0 bar.sync(P_FREE) before the next write.
// Variants: 256 / 384 / 512 threads (the warpgroups past the first two, standing in for the
// producers, spin on a shared flag until the consumers finish), and 384 / 512 with the setmaxnreg
// budgets of the sparse-MLA wgmma kernels (384: 56 / 240 / 208; 512: 64 64 / 224 / 160).
#include <cstdio>
__device__ __forceinline__ void bsync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void barrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }
template <int R> __device__ __forceinline__ void inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R)); }
template <int R> __device__ __forceinline__ void dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R)); }

template <int THREADS, bool REGS>
__global__ void __launch_bounds__(THREADS, 1) k(int* out, int iters) {
  __shared__ float a[64];
  __shared__ int done;
  const int wg = threadIdx.x >> 7, t = threadIdx.x & 127;
  if (threadIdx.x == 0) done = 0;
  __syncthreads();
  float acc = 0.f;
  if (wg == 0) {
    if constexpr (REGS) { if constexpr (THREADS == 512) inc<224>(); else inc<240>(); }
    for (int k = 0; k < iters; ++k) {
      if (k > 0) bsync(2, 256);
      if ((t & 3) == 0) { a[t >> 1] = float(k); a[(t >> 1) + 1] = float(k + 1); }
      barrive(1, 256);
    }
  } else if (wg == 1) {
    if constexpr (REGS) { if constexpr (THREADS == 512) inc<160>(); else inc<208>(); }
    for (int k = 0; k < iters; ++k) {
      bsync(1, 256);
      acc += a[(t >> 1) & 62] + a[((t >> 1) & 62) + 1];  // a written pair: 2k + 1
      if (k + 1 < iters) barrive(2, 256);
    }
    if (t == 0) atomicExch(&done, 1);
  } else {
    if constexpr (REGS) { if constexpr (THREADS == 512) dec<64>(); else dec<56>(); }
    // producers: busy until the consumers finish (no shared accesses besides the flag)
    while (atomicAdd(&done, 0) == 0) __nanosleep(100);
  }
  if (wg == 1) out[blockIdx.x * 128 + t] = int(acc);
}
template <int THREADS, bool REGS>
void run(int* d) {
  k<THREADS, REGS><<<132, THREADS>>>(d, 32);
  cudaError_t e = cudaDeviceSynchronize();
  static int h[132 * 128];
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  int want = 0, wrong = 0;
  for (int k = 0; k < 32; ++k) want += 2 * k + 1;
  for (int v : h) wrong += v != want;
  printf("threads %d setmaxnreg %d: %s, %d of %d outputs differ from %d\n", THREADS, int(REGS), cudaGetErrorString(e),
         wrong, 132 * 128, want);
}
int main() {
  int* d;
  cudaMalloc(&d, 132 * 128 * 4);
  run<256, false>(d);
  run<384, false>(d);
  run<512, false>(d);
  run<384, true>(d);
  run<512, true>(d);
}
