// gpu_clock.hpp — the SM clock and its limiters (power cap, thermal) read through NVML, which the
// driver ships (libnvidia-ml.so.1, dlopened; no build dependency). The bench records them beside
// each timing: a compute-bound kernel at an H100 SXM's 700 W cap ran at 1,350-1,665 MHz against
// 1,980 idle, so a figure means little without the state it was taken in
// (docs/notes/sparse_mla.md, "How much of a prefill figure is the card's power state").
#pragma once

#include <optional>

namespace nsajit::tools::bench {

struct ClockSample {
  unsigned sm_mhz = 0;
  bool limited = false;  // a power cap, power brake or thermal slowdown is holding the clocks down
};

// The current CUDA context's device, sampled now; nullopt where NVML or the device is not there.
// The first call starts NVML (dlopen, init: can take a while), so call it once before timing.
std::optional<ClockSample> sample_gpu_clock();

}  // namespace nsajit::tools::bench
