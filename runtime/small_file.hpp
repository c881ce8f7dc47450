// small_file.hpp — reading a small input file (a tuning database, a config) without trusting what
// its path names: a FIFO or device is refused instead of waited on, a large file instead of read.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace nsajit {

inline constexpr std::uint64_t kMaxSmallFileBytes = std::uint64_t(16) << 20;

// What a stat(2) mode is, for messages: "a regular file", "a directory", "a FIFO", ...
const char* file_type_name(mode_t mode);

// The whole content of the regular file `path` (symbolic links followed): opened O_NONBLOCK (a
// FIFO never blocks the open), checked with fstat to be a regular file of at most `max_bytes`
// before anything is read, then read exactly its size. Throws InvalidArgument
// "<label>: cannot read the file: <why>", e.g. "--config /tmp/x: cannot read the file: it is a
// FIFO; expected a regular file of at most 16 MiB"; `label` is how the caller names the file
// (the path, or the flag and the path).
std::string read_small_file(const std::string& path, const std::string& label,
                            std::uint64_t max_bytes = kMaxSmallFileBytes);

}  // namespace nsajit
