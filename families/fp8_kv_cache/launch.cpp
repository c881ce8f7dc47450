// launch.cpp — nsajit::fp8_kv_quantize and nsajit::fp8_kv_gather (§4): argument
// checks, spec, launch of templates/fp8_kv_quantize.cuh and templates/fp8_kv_gather.cuh.
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>

#include "nsajit/kernels.hpp"
#include "runtime/argument_checks.hpp"
#include "runtime/runtime.hpp"
#include "templates/kernel_params.h"

namespace nsajit {
namespace {

constexpr long long kTokenBytes = kFp8KvTokenBytes;
constexpr long long kDims = kMlaDimQK;

// Non-null and `alignment`-byte aligned.
void check_pointer(std::string_view fn, std::string_view name, const void* p, unsigned alignment) {
  detail::require_pointer(fn, name, p, alignment);
}

struct CacheLayout {
  long long page_stride = 0;  // bytes
  long long num_slots = 0;    // num_pages * page_size
};

// Checks the paged-cache arguments shared by both functions and resolves page_stride_bytes == 0.
CacheLayout check_cache(std::string_view fn, const void* cache, std::int64_t num_pages,
                        int page_size, std::int64_t page_stride_bytes, bool used) {
  if (page_size < 1 || page_size > 4096)
    detail::throw_bad_argument(fn, "page_size", page_size, "an integer in [1, 4096]");
  if (num_pages < 0) detail::throw_bad_argument(fn, "num_pages", num_pages, ">= 0");
  const long long min_stride = page_size * kTokenBytes;
  CacheLayout layout;
  layout.page_stride = page_stride_bytes == 0 ? min_stride : page_stride_bytes;
  if (page_stride_bytes != 0 && (page_stride_bytes < min_stride || page_stride_bytes % 16 != 0))
    detail::throw_bad_argument(fn, "page_stride_bytes", page_stride_bytes,
                               "0 (= page_size * 656) or a multiple of 16 >= page_size * 656 = " +
                                   std::to_string(min_stride));
  if (num_pages > std::numeric_limits<long long>::max() / layout.page_stride)
    detail::throw_bad_argument(fn, "num_pages", num_pages,
                               "num_pages * page stride (" + std::to_string(layout.page_stride) +
                                   " bytes) to fit in 64 bits");
  layout.num_slots = num_pages * page_size;
  // With no pages every slot is invalid and the cache is never touched, so it may be null.
  if (used && (num_pages > 0 || cache != nullptr)) check_pointer(fn, "cache", cache, 16);
  return layout;
}

KernelSpec spec_of(Family family, int page_size) {
  KernelSpec spec;
  spec.family = family;
  spec.page_size = page_size;
  return spec_for_current_device(spec);
}

LaunchGeometry geometry_for(int n, const KernelSpec& spec) {
  LaunchGeometry g;
  g.block = unsigned(spec.tile.threads);
  const unsigned rows_per_cta = g.block / 32;
  g.grid_x = unsigned((static_cast<long long>(n) + rows_per_cta - 1) / rows_per_cta);
  return g;
}

}  // namespace

void fp8_kv_quantize(const Fp8KvQuantizeArgs& a, CUstream stream) {
  constexpr std::string_view fn = "nsajit::fp8_kv_quantize";
  // Every check comes before any driver call (spec_for_current_device queries the device).
  if (a.n < 0) detail::throw_bad_argument(fn, "n", a.n, ">= 0");
  if (a.kv_row_stride < kDims)
    detail::throw_bad_argument(fn, "kv_row_stride", a.kv_row_stride, "elements, >= 576");
  if (a.scale_fmt != Fp8ScaleFormat::fp32 && a.scale_fmt != Fp8ScaleFormat::ue8m0)
    detail::throw_bad_argument(fn, "scale_fmt", static_cast<long long>(a.scale_fmt), "fp32 or ue8m0");
  const CacheLayout layout = check_cache(fn, a.cache, a.num_pages, a.page_size, a.page_stride_bytes, a.n > 0);
  if (a.n == 0) return;
  check_pointer(fn, "kv", a.kv, 2);
  check_pointer(fn, "slots", a.slots, 4);

  const KernelSpec spec = spec_of(Family::fp8_kv_quantize, a.page_size);
  const LoadedKernel& loaded = kernel(spec);
  Fp8KvQuantizeParams params{};
  params.kv = static_cast<const unsigned short*>(a.kv);
  params.kv_row_stride = a.kv_row_stride;
  params.slots = a.slots;
  params.cache = static_cast<unsigned char*>(a.cache);
  params.page_stride = layout.page_stride;
  params.num_slots = layout.num_slots;
  params.n = a.n;
  params.scale_fmt = a.scale_fmt == Fp8ScaleFormat::ue8m0 ? 1 : 0;
  launch(loaded, geometry_for(a.n, spec), &params, stream);
}

void fp8_kv_gather(const Fp8KvGatherArgs& a, CUstream stream) {
  constexpr std::string_view fn = "nsajit::fp8_kv_gather";
  if (a.n < 0) detail::throw_bad_argument(fn, "n", a.n, ">= 0");
  if (a.out_row_stride < kDims)
    detail::throw_bad_argument(fn, "out_row_stride", a.out_row_stride, "elements, >= 576");
  const CacheLayout layout = check_cache(fn, a.cache, a.num_pages, a.page_size, a.page_stride_bytes, a.n > 0);
  if (a.n == 0) return;
  check_pointer(fn, "slots", a.slots, 4);
  check_pointer(fn, "out", a.out, 2);

  const KernelSpec spec = spec_of(Family::fp8_kv_gather, a.page_size);
  const LoadedKernel& loaded = kernel(spec);
  Fp8KvGatherParams params{};
  params.cache = static_cast<const unsigned char*>(a.cache);
  params.page_stride = layout.page_stride;
  params.num_slots = layout.num_slots;
  params.slots = a.slots;
  params.out = static_cast<unsigned short*>(a.out);
  params.out_row_stride = a.out_row_stride;
  params.n = a.n;
  launch(loaded, geometry_for(a.n, spec), &params, stream);
}

}  // namespace nsajit
