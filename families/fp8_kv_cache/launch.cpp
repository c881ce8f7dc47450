// launch.cpp — nsajit::fp8_kv_quantize and nsajit::fp8_kv_gather (§4): argument
// checks, spec, launch of templates/fp8_kv_quantize.cuh and templates/fp8_kv_gather.cuh.
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
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

struct RowPointer {
  std::string_view name;
  const void* p;
  unsigned alignment;
};

// The checks both directions share, before any driver call: n, the bf16 rows' stride (elements),
// the cache, then (n > 0) the pointers of the rows. The cache layout, or nullopt when n == 0.
std::optional<CacheLayout> check_common(std::string_view fn, int n, std::string_view stride_name,
                                        long long row_stride, const void* cache, std::int64_t num_pages,
                                        int page_size, std::int64_t page_stride_bytes,
                                        std::initializer_list<RowPointer> row_pointers) {
  if (n < 0) detail::throw_bad_argument(fn, "n", n, ">= 0");
  if (row_stride < kDims) detail::throw_bad_argument(fn, stride_name, row_stride, "elements, >= 576");
  const CacheLayout layout = check_cache(fn, cache, num_pages, page_size, page_stride_bytes, n > 0);
  if (n == 0) return std::nullopt;
  for (const RowPointer& r : row_pointers) check_pointer(fn, r.name, r.p, r.alignment);
  return layout;
}

// One warp per token (spec_for_current_device queries the device: after every check).
template <class Params>
void launch_rows(Family family, int page_size, const Params& params, CUstream stream) {
  KernelSpec spec;
  spec.family = family;
  spec.page_size = page_size;
  spec = spec_for_current_device(spec);
  LaunchGeometry g;
  g.block = unsigned(spec.tile.threads);
  const unsigned rows_per_cta = g.block / 32;
  g.grid_x = unsigned((static_cast<long long>(params.n) + rows_per_cta - 1) / rows_per_cta);
  launch(kernel(spec), g, &params, stream);
}

}  // namespace

void fp8_kv_quantize(const Fp8KvQuantizeArgs& a, CUstream stream) {
  constexpr std::string_view fn = "nsajit::fp8_kv_quantize";
  if (a.scale_fmt != Fp8ScaleFormat::fp32 && a.scale_fmt != Fp8ScaleFormat::ue8m0)
    detail::throw_bad_argument(fn, "scale_fmt", static_cast<long long>(a.scale_fmt), "fp32 or ue8m0");
  const auto layout = check_common(fn, a.n, "kv_row_stride", a.kv_row_stride, a.cache, a.num_pages, a.page_size,
                                   a.page_stride_bytes, {{"kv", a.kv, 2}, {"slots", a.slots, 4}});
  if (!layout) return;
  launch_rows(Family::fp8_kv_quantize, a.page_size,
              Fp8KvQuantizeParams{.kv = static_cast<const unsigned short*>(a.kv), .kv_row_stride = a.kv_row_stride,
                                  .slots = a.slots, .cache = static_cast<unsigned char*>(a.cache),
                                  .page_stride = layout->page_stride, .num_slots = layout->num_slots, .n = a.n,
                                  .scale_fmt = a.scale_fmt == Fp8ScaleFormat::ue8m0 ? 1 : 0},
              stream);
}

void fp8_kv_gather(const Fp8KvGatherArgs& a, CUstream stream) {
  constexpr std::string_view fn = "nsajit::fp8_kv_gather";
  const auto layout = check_common(fn, a.n, "out_row_stride", a.out_row_stride, a.cache, a.num_pages, a.page_size,
                                   a.page_stride_bytes, {{"slots", a.slots, 4}, {"out", a.out, 2}});
  if (!layout) return;
  launch_rows(Family::fp8_kv_gather, a.page_size,
              Fp8KvGatherParams{.cache = static_cast<const unsigned char*>(a.cache), .page_stride = layout->page_stride,
                                .num_slots = layout->num_slots, .slots = a.slots,
                                .out = static_cast<unsigned short*>(a.out), .out_row_stride = a.out_row_stride,
                                .n = a.n},
              stream);
}

}  // namespace nsajit
