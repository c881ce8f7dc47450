// runtime.hpp — from a spec to a launched kernel.
//
// Runtime::kernel(spec) returns the function for the current context: a warm call is one lookup
// in a per-context map keyed by the spec's fields (no source text, no file I/O, no strings). A cold
// call generates the source, gets the cubin from the cache (compiling on a miss; concurrent first
// calls of one spec compile once), loads the module into the context and sets the function's
// dynamic shared memory limit once.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "nsajit/spec.hpp"

namespace nsajit {

struct LaunchGeometry {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block = 1;         // threads per CTA (1-D blocks)
  unsigned dynamic_smem = 0;  // bytes, <= the family's max_dynamic_smem(spec)
  unsigned cluster_x = 0;     // > 0: launch as thread-block clusters of cluster_x CTAs along x
                              // (cuLaunchKernelEx; grid_x must be a multiple; <= 8 portable)
  // Programmatic dependent launch (sm_90+): the grid may be scheduled while the previous kernel of
  // the stream is still finishing; the kernel must execute griddepcontrol.wait before touching
  // memory that kernel writes (or that later work reads). Hides the launch gap of a short
  // follow-up kernel such as the split-KV combine.
  bool programmatic = false;
};

struct LoadedKernel {
  CUfunction function = nullptr;
};

// The current device's arch (sm_90a for compute capability 9.0). Needs a GPU.
Arch current_device_arch();

// The spec for `family`-specific fields with the current device's arch and default tile,
// validated. Used by the public launch functions.
KernelSpec spec_for_current_device(KernelSpec spec);

// The loaded kernel of `spec` (arch must be filled) in the current context.
const LoadedKernel& kernel(const KernelSpec& spec);

// cuLaunchKernel (cuLaunchKernelEx with a cluster dimension when cluster_x > 0 and/or the
// programmatic-serialization attribute when programmatic) with the parameter block as the
// kernel's single argument. No sync, no allocation.
// A zero-sized grid launches nothing.
void launch(const LoadedKernel& kernel, const LaunchGeometry& geometry, const void* params,
            CUstream stream);

// How many CTAs of this cluster launch shape (clusters of geometry.cluster_x > 1 CTAs of
// geometry.block threads and dynamic_smem bytes each) the current device runs at once: whole
// clusters (cuOccupancyMaxActiveClusters) times the cluster size. 0 when not even one cluster
// fits: a non-portable cluster size (> 8) may not fit a part with fewer SMs per GPC or a MIG
// slice. Sets the function's non-portable-cluster opt-in before the first query of a cluster
// above 8 (the launch needs it too). Cached per loaded kernel and shape. std::logic_error for
// cluster_x <= 1.
int resident_ctas(const LoadedKernel& kernel, const LaunchGeometry& geometry);

// While alive, kernels compiled on this thread are for a launch on `stream`: a compile while that
// stream is capturing a CUDA graph throws CaptureError instead (NVRTC inside a capture would
// stall it for seconds). Set by the C ABI.
class LaunchStreamScope {
 public:
  explicit LaunchStreamScope(CUstream stream);
  ~LaunchStreamScope();
  LaunchStreamScope(const LaunchStreamScope&) = delete;
  LaunchStreamScope& operator=(const LaunchStreamScope&) = delete;

 private:
  CUstream previous_;
  bool previous_active_;
};

}  // namespace nsajit
