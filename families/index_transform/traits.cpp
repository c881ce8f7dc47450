// traits.cpp — traits of the index-transform family
// (templates/index_transform.cuh, §1).
#include <string>
#include <vector>

#include "generator/family.hpp"
#include "families/index_transform/transform_fields.hpp"

namespace nsajit {
namespace {

constexpr int kDefaultThreads = 256;

void fill_default_tile(KernelSpec& spec) {
  if (spec.tile.threads == 0) spec.tile.threads = kDefaultThreads;
}

void validate_index_transform(const KernelSpec& spec) {
  if (spec.topk < 64 || spec.topk > 16384 || spec.topk % 64 != 0)
    throw_bad_field(spec, "topk", spec.topk, "a multiple of 64 in [64, 16384]");
  validate_transform_fields(spec);
  const int t = spec.tile.threads;
  if (t != 128 && t != 256 && t != 512 && t != 1024)
    throw_bad_field(spec, "threads", t, "one of 128, 256, 512, 1024");
}

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {{"TOPK", spec.topk},
          {"PAGE_SIZE", spec.page_size},
          {"MODE", transform_mode_constant(spec.mode)},
          {"THREADS", spec.tile.threads}};
}

// "index_transform.decode.ps64.topk2048" (readable_name() appends a non-default tile and the arch).
std::string readable_stem(const KernelSpec& spec) {
  return "index_transform." + to_string(spec.mode) + ".ps" + std::to_string(spec.page_size) +
         ".topk" + std::to_string(spec.topk);
}

unsigned max_dynamic_smem(const KernelSpec&) { return 0; }

std::string_view template_file(const KernelSpec&) { return "index_transform.cuh"; }

}  // namespace

extern const FamilyTraits index_transform_traits;
const FamilyTraits index_transform_traits = {
    Family::index_transform,
    uses_page_size | uses_mode,
    "index_transform",
    "nsajit_index_transform",
    &template_file,
    &fill_default_tile,
    &validate_index_transform,
    &constants,
    &readable_stem,
    &max_dynamic_smem,
};

}  // namespace nsajit
