// traits.cpp — family traits of the split-KV combine kernel (templates/sparse_mla_combine.cuh).
#include <string>
#include <vector>

#include "generator/family.hpp"
#include "nsajit/errors.hpp"

namespace nsajit {
namespace {

void fill_default_tile(KernelSpec& spec) {
  if (spec.tile.threads == 0) spec.tile.threads = 128;
}

void validate_spec(const KernelSpec& spec) {
  // One kernel for every shape: rows, h_q and the split count are launch parameters.
  if (spec.topk != KernelSpec{}.topk)
    throw_bad_field(spec, "topk", spec.topk, "2048 (the combine kernel does not use topk)");
  if (spec.tile.threads != 128) throw_bad_field(spec, "threads", spec.tile.threads, "128 (4 dims per thread)");
}

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {{"TOPK", spec.topk}, {"THREADS", spec.tile.threads}};  // TOPK: unused, every source names it
}

std::string readable_stem(const KernelSpec&) { return "sparse_mla_combine"; }

unsigned max_dynamic_smem(const KernelSpec&) { return 0; }

}  // namespace

extern const FamilyTraits sparse_mla_combine_traits;
const FamilyTraits sparse_mla_combine_traits = {
    .family = Family::sparse_mla_combine,
    .used_fields = 0,
    .name = "sparse_mla_combine",
    .kernel_entry = "nsajit_sparse_mla_combine",
    .template_file = [](const KernelSpec&) -> std::string_view { return "sparse_mla_combine.cuh"; },
    .fill_default_tile = &fill_default_tile,
    .validate = &validate_spec,
    .constants = &constants,
    .readable_stem = &readable_stem,
    .max_dynamic_smem = &max_dynamic_smem,
};

}  // namespace nsajit
