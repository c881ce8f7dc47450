// device_scores.hpp — top-k scores on the device in a call's dtype, for the bench and autotune.
#pragma once

#include <cstdint>
#include <vector>

#include "nsajit/spec.hpp"
#include "reference/bf16.hpp"
#include "runtime/device_buffer.hpp"

namespace nsajit::tools::bench {

// `scores` uploaded as fp32, or rounded to bf16 (reference::to_bf16); `get()` is TopkArgs::scores
// for that score_dtype. Callers whose reference reads the bf16 values round `scores` first
// (reference::from_bf16 of to_bf16: widening back is exact).
class DeviceScores {
 public:
  DeviceScores(ScoreDtype dtype, const std::vector<float>& scores)
      : bf16_(dtype == ScoreDtype::bf16),
        fp32_(bf16_ ? std::vector<float>{0.0f} : scores),
        b16_(bf16_ ? reference::to_bf16(scores) : std::vector<std::uint16_t>{0}) {}
  const void* get() const { return bf16_ ? static_cast<const void*>(b16_.get()) : fp32_.get(); }

 private:
  bool bf16_;
  DeviceBuffer<float> fp32_;
  DeviceBuffer<std::uint16_t> b16_;
};

}  // namespace nsajit::tools::bench
