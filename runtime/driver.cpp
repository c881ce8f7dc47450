// driver.cpp — dlopen("libcuda.so.1") and resolve the Driver API entry points we use.
#include "runtime/driver.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "nsajit/errors.hpp"

namespace nsajit::driver {
namespace {

// Two-step stringification so that cuda.h's versioning macros apply: cuMemAlloc -> "cuMemAlloc_v2".
#define NSAJIT_STRINGIFY_EXPANDED(x) NSAJIT_STRINGIFY(x)
#define NSAJIT_STRINGIFY(x) #x

struct Loaded {
  Api api;
  std::string error;  // empty when usable
  int result = -1;    // the CUresult of a failed cuInit, else -1
};

Loaded load() {
  Loaded l;
  void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = ::dlerror();
    l.error = fmt::format("cannot load the CUDA driver library libcuda.so.1 ({}); is an NVIDIA driver installed?",
                          e ? e : "unknown error");
    return l;
  }
#define NSAJIT_DRIVER_FN(name)                                                                    \
  l.api.name = reinterpret_cast<decltype(l.api.name)>(::dlsym(handle, NSAJIT_STRINGIFY_EXPANDED(name))); \
  if (!l.api.name && l.error.empty())                                                              \
    l.error = fmt::format("libcuda.so.1 has no symbol {} (driver too old?)", NSAJIT_STRINGIFY_EXPANDED(name));
#include "runtime/driver_functions.inc"
#undef NSAJIT_DRIVER_FN
  if (l.error.empty()) {
    if (CUresult r = l.api.cuInit(0); r != CUDA_SUCCESS) {
      const char* name = nullptr;
      l.api.cuGetErrorName(r, &name);
      const char* text = nullptr;
      l.api.cuGetErrorString(r, &text);
      l.error = fmt::format("cuInit failed: {} ({})", name ? name : "?", text ? text : "no description");
      l.result = int(r);
    }
  }
  return l;  // the handle stays open for the life of the process
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

bool available() {
  const Loaded& l = loaded();
  if (!l.error.empty()) return false;
  int count = 0;
  return l.api.cuDeviceGetCount(&count) == CUDA_SUCCESS && count > 0;
}

const Api& api() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw CudaError(l.error, l.result);
  return l.api;
}

void check(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  const Api& a = api();
  a.cuGetErrorName(result, &name);
  a.cuGetErrorString(result, &text);
  throw CudaError(fmt::format("{} failed: {} ({})", call, name ? name : "unknown CUresult", text ? text : ""),
                  int(result));
}

CUcontext current_context() {
  CUcontext ctx = nullptr;
  NSAJIT_CU(cuCtxGetCurrent, &ctx);
  if (ctx) return ctx;
  // No context on this thread: use device 0's primary context, the one the runtime API uses too.
  static std::once_flag once;
  static CUcontext primary = nullptr;
  std::call_once(once, [] {
    CUdevice dev = 0;
    NSAJIT_CU(cuDeviceGet, &dev, 0);
    NSAJIT_CU(cuDevicePrimaryCtxRetain, &primary, dev);
  });
  NSAJIT_CU(cuCtxSetCurrent, primary);
  return primary;
}

const ContextInfo& current_context_info() {
  thread_local ContextInfo info;
  const CUcontext ctx = current_context();
  unsigned long long id = 0;
  NSAJIT_CU(cuCtxGetId, ctx, &id);
  if (id != info.id || ctx != info.context) {
    CUdevice dev = 0;
    NSAJIT_CU(cuCtxGetDevice, &dev);
    ContextInfo fresh{ctx, id, 0, 0, 0};
    NSAJIT_CU(cuDeviceGetAttribute, &fresh.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    NSAJIT_CU(cuDeviceGetAttribute, &fresh.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    NSAJIT_CU(cuDeviceGetAttribute, &fresh.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    info = fresh;
  }
  return info;
}

}  // namespace nsajit::driver
