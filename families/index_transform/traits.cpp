// traits.cpp — traits of the index-transform family
// (templates/index_transform.cuh, §1).
#include <string>
#include <vector>

#include "generator/family.hpp"
#include "families/index_transform/transform_fields.hpp"

namespace nsajit {
namespace {

void validate_index_transform(const KernelSpec& spec) {
  require_topk_multiple_of_64(spec, 16384);
  validate_transform_fields(spec);
  require_threads_power_of_two(spec);
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


std::string_view template_file(const KernelSpec&) { return "index_transform.cuh"; }

}  // namespace

extern const FamilyTraits index_transform_traits;
const FamilyTraits index_transform_traits = {
    Family::index_transform,
    uses_page_size | uses_mode,
    "index_transform",
    "nsajit_index_transform",
    &template_file,
    &default_threads<256>,
    &validate_index_transform,
    &constants,
    &readable_stem,
    &no_dynamic_smem,
};

}  // namespace nsajit
