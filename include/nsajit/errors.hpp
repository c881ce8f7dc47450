// nsajit/errors.hpp — the exceptions nsajit throws.
//
// Every error message names what failed: the argument with its value and what was expected
// (InvalidArgument), the spec, options and full NVRTC log (CompileError), or the Driver API call
// and its CUresult (CudaError). Nothing is launched after an error is detected.
#pragma once

#include <stdexcept>
#include <string>

namespace nsajit {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Bad user input: a spec field or a launch argument. Raised before anything is compiled or launched.
struct InvalidArgument : Error {
  using Error::Error;
};

// NVRTC rejected a generated source. what() holds the spec name, the options and the whole log.
struct CompileError : Error {
  using Error::Error;
};

// A CUDA Driver API call failed (or libcuda.so.1 could not be loaded). what() names the call and
// the CUresult name and description.
struct CudaError : Error {
  CudaError(const std::string& message, int result) : Error(message), result(result) {}
  int result;  // the CUresult, or -1 when libcuda.so.1 or one of its symbols is missing
};

// Strict mode (nsajit/jit.hpp, NSAJIT_NO_JIT=1) found no cubin for a kernel. what() names the
// kernel's readable name, the cache directory and the `nsajit precompile` command that produces it.
struct KernelNotPrecompiled : Error {
  using Error::Error;
};

// A kernel would have to be compiled, or its cache entry waited for while another process holds
// its lock (compiling it), while the launch's stream is capturing a CUDA graph (raised by calls
// through the C ABI, nsajit.h, which knows the stream before the kernel is looked up).
// what() names the kernel and the precompile call that avoids it.
struct CaptureError : Error {
  using Error::Error;
};

// The on-disk cache never throws: an entry that cannot be written, or a cache directory that is not
// trusted, is reported on stderr and the kernel is used from memory; a corrupt entry is reported,
// removed and rebuilt.

}  // namespace nsajit
