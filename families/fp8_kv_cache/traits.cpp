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

void fill_default_tile(KernelSpec& spec) {
  if (spec.tile.threads == 0) spec.tile.threads = kDefaultThreads;
}

void validate_fp8_kv(const KernelSpec& spec) {
  if (spec.topk != KernelSpec{}.topk)
    throw_bad_field(spec, "topk", spec.topk,
                    std::to_string(KernelSpec{}.topk) + " (the " + to_string(spec.family) +
                        " family does not use it)");
  if (spec.page_size < 1 || spec.page_size > 4096)
    throw_bad_field(spec, "page_size", spec.page_size, "an integer in [1, 4096]");
  const int t = spec.tile.threads;
  if (t != 128 && t != 256 && t != 512 && t != 1024)
    throw_bad_field(spec, "threads", t, "one of 128, 256, 512, 1024");
}

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {{"TOPK", spec.topk}, {"PAGE_SIZE", spec.page_size}, {"THREADS", spec.tile.threads}};
}

// "fp8_kv_quantize.ps64" / "fp8_kv_gather.ps64" (readable_name() appends a non-default tile and
// the arch).
std::string readable_stem(const KernelSpec& spec) {
  return to_string(spec.family) + ".ps" + std::to_string(spec.page_size);
}

unsigned max_dynamic_smem(const KernelSpec&) { return 0; }

}  // namespace

extern const FamilyTraits fp8_kv_quantize_traits;
const FamilyTraits fp8_kv_quantize_traits = {
    .family = Family::fp8_kv_quantize,
    .used_fields = uses_page_size,
    .name = "fp8_kv_quantize",
    .kernel_entry = "nsajit_fp8_kv_quantize",
    .template_file = [](const KernelSpec&) -> std::string_view { return "fp8_kv_quantize.cuh"; },
    .fill_default_tile = &fill_default_tile,
    .validate = &validate_fp8_kv,
    .constants = &constants,
    .readable_stem = &readable_stem,
    .max_dynamic_smem = &max_dynamic_smem,
};

extern const FamilyTraits fp8_kv_gather_traits;
const FamilyTraits fp8_kv_gather_traits = {
    .family = Family::fp8_kv_gather,
    .used_fields = uses_page_size,
    .name = "fp8_kv_gather",
    .kernel_entry = "nsajit_fp8_kv_gather",
    .template_file = [](const KernelSpec&) -> std::string_view { return "fp8_kv_gather.cuh"; },
    .fill_default_tile = &fill_default_tile,
    .validate = &validate_fp8_kv,
    .constants = &constants,
    .readable_stem = &readable_stem,
    .max_dynamic_smem = &max_dynamic_smem,
};

}  // namespace nsajit
