// traits.cpp — traits of the top-k family (templates/topk.cuh, §2), plain and
// fused with the §1 transform, optionally sorted.
#include <string>
#include <vector>

#include "generator/family.hpp"
#include "families/index_transform/transform_fields.hpp"
#include "templates/kernel_params.h"

namespace nsajit {
namespace {

static_assert(int(TopkAlgorithm::exact_sweeps) == NSAJIT_TOPK_EXACT_SWEEPS &&
                  int(TopkAlgorithm::cluster_sweeps) == NSAJIT_TOPK_CLUSTER_SWEEPS &&
                  int(TopkAlgorithm::speculative_sweep) == NSAJIT_TOPK_SPECULATIVE_SWEEP &&
                  int(TopkAlgorithm::dense_registers) == NSAJIT_TOPK_DENSE_REGISTERS &&
                  int(TopkAlgorithm::cluster_lists) == NSAJIT_TOPK_CLUSTER_LISTS,
              "the host's and the kernel's algorithm numbers (templates/kernel_params.h)");

void validate_topk(const KernelSpec& spec) {
  require_topk_multiple_of_64(spec, 4096);
  require_threads_power_of_two(spec);
  // The kernel's register and shared-memory layouts of these two paths exist at these counts only.
  if (spec.tile.algorithm == TopkAlgorithm::dense_registers && spec.tile.threads != 256)
    throw_bad_field(spec, "threads", spec.tile.threads, "256 for algorithm dense_registers");
  if (spec.tile.algorithm == TopkAlgorithm::cluster_lists && spec.tile.threads < 512)
    throw_bad_field(spec, "threads", spec.tile.threads, "512 or 1024 for algorithm cluster_lists");
  // Transform fields only mean something for fused specs: one kernel, one spec.
  if (!spec.fused_transform) {
    if (spec.mode != IndexMode::decode)
      throw_bad_field(spec, "mode", to_string(spec.mode), "decode: a plain top-k (fused_transform false) does not use mode");
    if (spec.page_size != 1) throw_bad_field(spec, "page_size", spec.page_size, "1: a plain top-k (fused_transform false) does not use page_size");
    if (spec.next_n != 1) throw_bad_field(spec, "next_n", spec.next_n, "1: a plain top-k (fused_transform false) does not use next_n");
    return;
  }
  validate_transform_fields(spec);
  if (spec.next_n < 1 || spec.next_n > 8)
    throw_bad_field(spec, "next_n", spec.next_n, "an integer in [1, 8]");
  if (spec.mode != IndexMode::decode && spec.next_n != 1)
    throw_bad_field(spec, "next_n", spec.next_n, "1 unless mode decode (MTP rows)");
}

long long sort_size(int topk) {
  long long n = 1;
  while (n < topk) n <<= 1;
  return n;
}

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {{"TOPK", spec.topk},
          {"THREADS", spec.tile.threads},
          {"FUSED", spec.fused_transform ? 1 : 0},
          {"MODE", transform_mode_constant(spec.mode)},
          {"PAGE_SIZE", spec.page_size},
          {"NEXT_N", spec.next_n},
          {"SORTED", spec.sorted ? 1 : 0},
          {"SCORE_BF16", spec.score_dtype == ScoreDtype::bf16 ? 1 : 0},
          {"TOPK_ALGORITHM", int(spec.tile.algorithm)},
          {"SORT_N", sort_size(spec.topk)}};
}

// "topk.topk2048", "topk.topk2048.fused.decode.ps64.n2.sorted.scores_bf16" (readable_name() appends a
// non-default tile and the arch).
std::string readable_stem(const KernelSpec& spec) {
  std::string s = "topk.topk" + std::to_string(spec.topk);
  if (spec.fused_transform) {
    s += ".fused." + to_string(spec.mode);
    if (spec.mode != IndexMode::ragged) s += ".ps" + std::to_string(spec.page_size);
    if (spec.next_n != 1) s += ".n" + std::to_string(spec.next_n);
  }
  if (spec.sorted) s += ".sorted";
  if (spec.score_dtype != ScoreDtype::fp32) s += ".scores_" + to_string(spec.score_dtype);
  return s;
}

unsigned max_dynamic_smem(const KernelSpec&) { return kTopkMaxDynamicSmem; }

// 512 threads, or 256 for dense_registers (the only count its kernel exists at).
void fill_default_tile(KernelSpec& spec) {
  if (spec.tile.threads == 0) spec.tile.threads = spec.tile.algorithm == TopkAlgorithm::dense_registers ? 256 : 512;
}

// The kernel; it includes the §1 transform and the family's parts.
std::string_view template_file(const KernelSpec&) { return "topk.cuh"; }

}  // namespace

extern const FamilyTraits topk_traits;
const FamilyTraits topk_traits = {
    Family::topk,
    uses_page_size | uses_mode | uses_next_n | uses_fused_transform | uses_sorted | uses_score_dtype |
        uses_topk_algorithm,
    "topk",
    "nsajit_topk",
    &template_file,
    &fill_default_tile,
    &validate_topk,
    &constants,
    &readable_stem,
    &max_dynamic_smem,
};

}  // namespace nsajit
