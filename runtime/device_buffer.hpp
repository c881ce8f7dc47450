// device_buffer.hpp — owning device memory through the loaded Driver API, for the tool and tests
// (not part of the public API: the kernels take the caller's pointers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "nsajit/errors.hpp"
#include "runtime/driver.hpp"

namespace nsajit {

// Device memory for n elements of T in the current context; freed on destruction.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    driver::current_context();
    if (n_ > 0) NSAJIT_CU(cuMemAlloc, &ptr_, n_ * sizeof(T));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) driver::api().cuMemFree(ptr_);
  }
  T* get() const { return reinterpret_cast<T*>(ptr_); }
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return n_ * sizeof(T); }
  void upload(const std::vector<T>& host) {
    if (host.size() != n_)
      throw InvalidArgument(fmt::format("DeviceBuffer::upload: {} elements for a buffer of {}", host.size(), n_));
    if (n_ > 0) NSAJIT_CU(cuMemcpyHtoD, ptr_, host.data(), bytes());
  }
  // Synchronizes the context, then copies everything back.
  std::vector<T> download() const {
    NSAJIT_CU(cuCtxSynchronize);
    std::vector<T> host(n_);
    if (n_ > 0) NSAJIT_CU(cuMemcpyDtoH, host.data(), ptr_, bytes());
    return host;
  }
  // Fills every byte with `byte`: poison outputs before a launch. The default 0x5A is no valid
  // output (int32 0x5A5A5A5A, bf16 ~1.5e16, fp32 ~1.5e16), unlike 0xFF (-1).
  void poison(std::uint8_t byte = 0x5A) {
    if (n_ > 0) NSAJIT_CU(cuMemsetD8, ptr_, byte, bytes());
  }

 private:
  std::size_t n_ = 0;
  CUdeviceptr ptr_ = 0;
};

}  // namespace nsajit
