// driver.hpp — the CUDA Driver API, loaded at run time.
//
// libcuda is never linked: the first use dlopens libcuda.so.1 and resolves the entry points we
// call, so generating, compiling and caching work on machines with no GPU or driver. Every call
// goes through check(), which names the call and its CUresult on failure.
#pragma once

#include <cuda.h>

#include <string>

namespace nsajit::driver {

struct Api {
#define NSAJIT_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "runtime/driver_functions.inc"
#undef NSAJIT_DRIVER_FN
};

// True when libcuda.so.1 loads, cuInit succeeds and at least one device exists. Never throws.
bool available();

// The loaded API. Throws CudaError (result -1) if libcuda.so.1 cannot be loaded or cuInit fails.
const Api& api();

// Throws CudaError("<call>: <CUresult name> (<description>)") unless result is CUDA_SUCCESS.
void check(CUresult result, const char* call);

// The context current on this thread; if none, retains device 0's primary context and makes it
// current (so a host with no runtime-API state still works). Returns it.
CUcontext current_context();

// The current context (see current_context) and the facts about its device that launches need,
// remembered per thread for the last context seen: a warm call is cuCtxGetCurrent + cuCtxGetId.
// Contexts are told apart by cuCtxGetId, unique for the life of the process, not by the handle,
// which the driver may reuse after cuCtxDestroy or a primary-context reset.
struct ContextInfo {
  CUcontext context = nullptr;
  unsigned long long id = 0;  // cuCtxGetId
  int major = 0;              // compute capability
  int minor = 0;
  int sm_count = 0;           // streaming multiprocessors
};
const ContextInfo& current_context_info();

}  // namespace nsajit::driver

// Calls a driver entry point through the loaded table and checks the result:
// NSAJIT_CU(cuMemAlloc, &ptr, bytes);
#define NSAJIT_CU(fn, ...) ::nsajit::driver::check(::nsajit::driver::api().fn(__VA_ARGS__), #fn)
