// gpu_support.hpp — skipping GPU tests without a GPU, and device buffers (through nsajit's own
// driver loader).
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/device_buffer.hpp"
#include "runtime/driver.hpp"

namespace nsajit::test {

// True when a GPU is usable; makes its primary context current on first call.
inline bool gpu_available() {
  static const bool ok = [] {
    if (!driver::available()) return false;
    driver::current_context();
    return true;
  }();
  return ok;
}

// Skips the rest of a GPU test case (with a message) when there is no GPU.
#define NSAJIT_REQUIRE_GPU()                                              \
  do {                                                                    \
    if (!::nsajit::test::gpu_available()) {                               \
      MESSAGE("skipped: no GPU (libcuda.so.1 or a CUDA device missing)"); \
      return;                                                             \
    }                                                                     \
  } while (0)

// The start of a GPU test on fresh random inputs: skips without a GPU, else declares the
// generator `rng` (std::mt19937) from a fresh seed that every failure of the test case reports.
#define NSAJIT_REQUIRE_GPU_WITH_RNG(rng)                \
  NSAJIT_REQUIRE_GPU();                                 \
  const unsigned rng##_seed = std::random_device{}();   \
  INFO("seed " << rng##_seed);                          \
  std::mt19937 rng(rng##_seed)

using nsajit::DeviceBuffer;  // runtime/device_buffer.hpp

inline void synchronize() { NSAJIT_CU(cuCtxSynchronize); }

}  // namespace nsajit::test
