// bf16.hpp — host bf16 helpers (raw uint16 bits), shared by tests, references and the CLI.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace nsajit::reference {

// bf16 bits -> float (exact).
float bf16_to_float(std::uint16_t bits);

// float -> bf16 bits, round to nearest even. inf stays inf; NaN stays NaN (sign kept, quiet bit set,
// so a NaN whose payload sits only in the low 16 bits does not become inf). Matches the device's
// float_to_bf16 in templates/device_common.cuh bit for bit.
std::uint16_t float_to_bf16(float value);

std::vector<std::uint16_t> to_bf16(std::span<const float> values);
std::vector<float> from_bf16(std::span<const std::uint16_t> bits);

inline constexpr std::uint16_t kBf16QuietNaN = 0x7fc0;
inline constexpr std::uint16_t kBf16PosInf = 0x7f80;
inline constexpr std::uint16_t kBf16NegInf = 0xff80;

}  // namespace nsajit::reference
