// launch_probe.cu: what a launch costs in the benches' method (a 256 MB flush, then an event, the
// launch, an event), by the kernel's dynamic shared memory and by what ran just before it. The
// decode b1 and top-k 1x131072 lines (<= 12 and <= 9 us) sit a few microseconds above this floor
// (docs/notes/sparse_mla.md, "Twenty-fourth session").
// Build and run on the GPU machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o /tmp/launch_probe scripts/launch_probe.cu
//   /tmp/launch_probe
// Cases (medians of 50, us): an empty kernel of 32 or 132 CTAs x 256 threads with 0 or 200 KB of
// dynamic shared memory, timed right after the flush, or after the flush and an untimed launch of
// the same kernel (so that whatever the first launch after the flush sets up is done before the
// start event); and the same kernel followed by a programmatic dependent (the split-KV combine's
// launch: 16 CTAs waiting on griddepcontrol.wait).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

__global__ void empty_kernel(int* out) {
  extern __shared__ int smem[];
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (out != nullptr && threadIdx.x == 0) out[blockIdx.x] = smem[0];
}

__global__ void dependent_kernel(int* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0) out[blockIdx.x] += 1;
}

int main() {
  void* flush;
  cudaMalloc(&flush, size_t(256) << 20);
  int* out;
  cudaMalloc(&out, 4096);
  const int big = 200 * 1024;
  cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, big);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  auto launch = [&](int ctas, int smem, bool dependent) {
    empty_kernel<<<ctas, 256, smem>>>(nullptr);
    if (dependent) {
      cudaLaunchConfig_t c = {};
      c.gridDim = dim3(16);
      c.blockDim = dim3(128);
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      c.attrs = &attr;
      c.numAttrs = 1;
      cudaLaunchKernelEx(&c, dependent_kernel, out);
    }
  };
  std::printf("%5s %7s %-22s %9s %9s %9s\n", "ctas", "smem", "before the start event", "min us", "median", "max");
  for (int ctas : {32, 132}) {
    for (int smem : {0, big}) {
      for (int mode = 0; mode < 4; ++mode) {  // 0 flush; 1 flush + untimed launch; 2, 3: + PDL dependent
        const bool warm = mode % 2 == 1, dependent = mode >= 2;
        std::vector<float> ts;
        for (int it = 0; it < 55; ++it) {
          cudaMemsetAsync(flush, it, size_t(256) << 20);
          if (warm) launch(ctas, smem, false);
          cudaEventRecord(a);
          launch(ctas, smem, dependent);
          cudaEventRecord(b);
          cudaEventSynchronize(b);
          float ms;
          cudaEventElapsedTime(&ms, a, b);
          if (it >= 5) ts.push_back(ms * 1e3f);
        }
        if (cudaGetLastError() != cudaSuccess) { std::printf("launch failed\n"); return 1; }
        std::sort(ts.begin(), ts.end());
        std::printf("%5d %7d %-22s %9.2f %9.2f %9.2f\n", ctas, smem,
                    dependent ? (warm ? "flush, launch; + PDL" : "flush; + PDL dependent") : (warm ? "flush, launch" : "flush"),
                    ts.front(), ts[ts.size() / 2], ts.back());
      }
    }
  }
  return 0;
}
