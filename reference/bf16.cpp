#include "reference/bf16.hpp"

#include <bit>

namespace nsajit::reference {

float bf16_to_float(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

std::uint16_t float_to_bf16(float value) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // ties go to the even (low bit 0) neighbour
  return std::uint16_t(u >> 16);
}

std::vector<std::uint16_t> to_bf16(std::span<const float> values) {
  std::vector<std::uint16_t> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = float_to_bf16(values[i]);
  return out;
}

std::vector<float> from_bf16(std::span<const std::uint16_t> bits) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

}  // namespace nsajit::reference
