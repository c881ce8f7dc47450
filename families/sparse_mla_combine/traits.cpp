// traits.cpp — family traits of the split-KV combine kernel (templates/sparse_mla_combine.cuh).
#include <string>
#include <vector>

#include "generator/family.hpp"
#include "nsajit/errors.hpp"

namespace nsajit {
namespace {

void validate_spec(const KernelSpec& spec) {
  // One kernel for every shape: rows, h_q and the split count are launch parameters.
  require_topk_unused(spec);
  if (spec.tile.threads != 128) throw_bad_field(spec, "threads", spec.tile.threads, "128 (4 dims per thread)");
}

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {{"TOPK", spec.topk}, {"THREADS", spec.tile.threads}};  // TOPK: unused, every source names it
}

std::string readable_stem(const KernelSpec&) { return "sparse_mla_combine"; }

}  // namespace

extern const FamilyTraits sparse_mla_combine_traits;
const FamilyTraits sparse_mla_combine_traits = {
    .family = Family::sparse_mla_combine,
    .used_fields = 0,
    .name = "sparse_mla_combine",
    .kernel_entry = "nsajit_sparse_mla_combine",
    .template_file = [](const KernelSpec&) -> std::string_view { return "sparse_mla_combine.cuh"; },
    .fill_default_tile = &default_threads<128>,
    .validate = &validate_spec,
    .constants = &constants,
    .readable_stem = &readable_stem,
    .max_dynamic_smem = &no_dynamic_smem,
};

}  // namespace nsajit
