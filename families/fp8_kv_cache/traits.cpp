// traits.cpp — traits of the two FP8 KV-cache families (§4):
// fp8_kv_quantize (templates/fp8_kv_quantize.cuh: quantize bf16 rows into slots of the paged
// cache) and fp8_kv_gather (templates/fp8_kv_gather.cuh: gather slots and dequantize to bf16).
// Spec fields: page_size (compile-time, so slot / P and slot % P are cheap) and threads. The scale
// format, sizes and strides are runtime parameters: one kernel per page size. topk is not used
// and must keep its default (emitted as NSAJIT_TOPK like every family's).
#include <string>
#include <vector>

#include "generator/family.hpp"

namespace nsajit {
namespace {

constexpr int kDefaultThreads = 256;  // 8 rows (one per warp) per CTA

void validate_fp8_kv(const KernelSpec& spec) {
  require_topk_unused(spec);
  if (spec.page_size < 1 || spec.page_size > 4096)
    throw_bad_field(spec, "page_size", spec.page_size, "an integer in [1, 4096]");
  require_threads_power_of_two(spec);
}

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {{"TOPK", spec.topk}, {"PAGE_SIZE", spec.page_size}, {"THREADS", spec.tile.threads}};
}

// "fp8_kv_quantize.ps64" / "fp8_kv_gather.ps64" (readable_name() appends a non-default tile and
// the arch).
std::string readable_stem(const KernelSpec& spec) {
  return to_string(spec.family) + ".ps" + std::to_string(spec.page_size);
}

// The two directions differ only in their template.
constexpr FamilyTraits fp8_kv_traits(Family family, const char* name, const char* entry,
                                     std::string_view (*template_file)(const KernelSpec&)) {
  return {.family = family,
          .used_fields = uses_page_size,
          .name = name,
          .kernel_entry = entry,
          .template_file = template_file,
          .fill_default_tile = &default_threads<kDefaultThreads>,
          .validate = &validate_fp8_kv,
          .constants = &constants,
          .readable_stem = &readable_stem,
          .max_dynamic_smem = &no_dynamic_smem};
}

}  // namespace

extern const FamilyTraits fp8_kv_quantize_traits;
const FamilyTraits fp8_kv_quantize_traits =
    fp8_kv_traits(Family::fp8_kv_quantize, "fp8_kv_quantize", "nsajit_fp8_kv_quantize",
                  [](const KernelSpec&) -> std::string_view { return "fp8_kv_quantize.cuh"; });

extern const FamilyTraits fp8_kv_gather_traits;
const FamilyTraits fp8_kv_gather_traits =
    fp8_kv_traits(Family::fp8_kv_gather, "fp8_kv_gather", "nsajit_fp8_kv_gather",
                  [](const KernelSpec&) -> std::string_view { return "fp8_kv_gather.cuh"; });

}  // namespace nsajit
