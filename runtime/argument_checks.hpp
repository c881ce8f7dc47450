// argument_checks.hpp — InvalidArgument messages of the public launch functions (header-only).
//
// Message form: "<function>: argument <name> = <value>: expected <what>", e.g.
// "nsajit::topk: argument topk = 100: expected a multiple of 64 in [64, 4096]".
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "nsajit/errors.hpp"

namespace nsajit::detail {

[[noreturn]] inline void throw_bad_argument(std::string_view function, std::string_view argument,
                                            std::string_view value, std::string_view expected) {
  std::string message(function);
  message += ": argument ";
  message += argument;
  message += " = ";
  message += value;
  message += ": expected ";
  message += expected;
  throw InvalidArgument(message);
}

[[noreturn]] inline void throw_bad_argument(std::string_view function, std::string_view argument,
                                            long long value, std::string_view expected) {
  throw_bad_argument(function, argument, std::to_string(value), expected);
}

// "0x7f12abcd0004", or "null".
inline std::string pointer_text(const void* pointer) {
  if (pointer == nullptr) return "null";
  char text[2 + 2 * sizeof(void*) + 1];
  std::snprintf(text, sizeof text, "%#llx", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(pointer)));
  return text;
}

// Throws unless `pointer` is non-null and `alignment`-byte aligned (4 for every int32 / fp32
// tensor: a misaligned pointer would fault in the kernel and poison the context).
inline void require_pointer(std::string_view function, std::string_view argument, const void* pointer,
                            unsigned alignment = 4) {
  if (pointer == nullptr) throw_bad_argument(function, argument, "null", "a device pointer");
  if (reinterpret_cast<std::uintptr_t>(pointer) % alignment != 0)
    throw_bad_argument(function, argument, pointer_text(pointer),
                       "a " + std::to_string(alignment) + "-byte aligned device pointer");
}

// Optional tensors: null, or as require_pointer.
inline void require_pointer_or_null(std::string_view function, std::string_view argument, const void* pointer,
                                    unsigned alignment = 4) {
  if (pointer != nullptr) require_pointer(function, argument, pointer, alignment);
}

// Throws unless value is a multiple of 64 in [64, max].
inline void require_topk(std::string_view function, long long value, long long max) {
  if (value < 64 || value > max || value % 64 != 0)
    throw_bad_argument(function, "topk", value,
                       "a multiple of 64 in [64, " + std::to_string(max) + "]");
}

}  // namespace nsajit::detail
