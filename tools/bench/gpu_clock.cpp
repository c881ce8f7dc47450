// gpu_clock.cpp — NVML through dlopen: only the four entry points the bench samples with.
#include "tools/bench/gpu_clock.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <string>

#include "runtime/driver.hpp"

namespace nsajit::tools::bench {
namespace {

using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM
// nvmlClocksEventReason*: SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20,
// HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80.
constexpr unsigned long long kLimitingReasons = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

struct Nvml {
  int (*init)() = nullptr;
  int (*device_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;
  int (*event_reasons)(NvmlDevice, unsigned long long*) = nullptr;
  bool ok = false;
};

const Nvml& nvml() {
  static const Nvml api = [] {
    Nvml n;
    void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return n;
    n.init = reinterpret_cast<int (*)()>(::dlsym(lib, "nvmlInit_v2"));
    n.device_by_pci_bus_id =
        reinterpret_cast<int (*)(const char*, NvmlDevice*)>(::dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.clock_info = reinterpret_cast<int (*)(NvmlDevice, int, unsigned*)>(::dlsym(lib, "nvmlDeviceGetClockInfo"));
    void* reasons = ::dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (reasons == nullptr) reasons = ::dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");  // before R535
    n.event_reasons = reinterpret_cast<int (*)(NvmlDevice, unsigned long long*)>(reasons);
    n.ok = n.init && n.device_by_pci_bus_id && n.clock_info && n.event_reasons && n.init() == kNvmlSuccess;
    return n;
  }();
  return api;
}

// NVML names a device by its PCI address; CUDA's ordinal may differ from NVML's index. Found
// handles are kept per CUDA device (a failure is asked again next time).
std::optional<NvmlDevice> current_device() {
  const Nvml& n = nvml();
  if (!n.ok) return std::nullopt;
  const auto& cu = driver::api();
  CUdevice device = 0;
  if (cu.cuCtxGetDevice(&device) != CUDA_SUCCESS) return std::nullopt;
  static std::mutex mutex;
  static std::map<CUdevice, NvmlDevice> found;
  const std::lock_guard lock(mutex);
  if (const auto it = found.find(device); it != found.end()) return it->second;
  int domain = 0, bus = 0, slot = 0;
  if (cu.cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, device) != CUDA_SUCCESS ||
      cu.cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device) != CUDA_SUCCESS ||
      cu.cuDeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, device) != CUDA_SUCCESS)
    return std::nullopt;
  const std::string address = fmt::format("{:08x}:{:02x}:{:02x}.0", unsigned(domain), unsigned(bus), unsigned(slot));
  NvmlDevice handle = nullptr;
  if (n.device_by_pci_bus_id(address.c_str(), &handle) != kNvmlSuccess) return std::nullopt;
  found.emplace(device, handle);
  return handle;
}

}  // namespace

std::optional<ClockSample> sample_gpu_clock() {
  const std::optional<NvmlDevice> device = current_device();
  if (!device) return std::nullopt;
  const Nvml& n = nvml();
  ClockSample s;
  unsigned long long reasons = 0;
  if (n.clock_info(*device, kNvmlClockSm, &s.sm_mhz) != kNvmlSuccess ||
      n.event_reasons(*device, &reasons) != kNvmlSuccess)
    return std::nullopt;
  s.limited = (reasons & kLimitingReasons) != 0;
  return s;
}

}  // namespace nsajit::tools::bench
