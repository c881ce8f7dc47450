// generator/families/topk.cpp — traits of the top-k family (templates/topk.cuh, §2).
#include <string>
#include <vector>

#include "generator/embedded_templates.hpp"
#include "generator/family.hpp"

namespace nsajit {
namespace {

constexpr int kDefaultThreads = 1024;

void fill_default_tile(KernelSpec& spec) {
  if (spec.tile.threads == 0) spec.tile.threads = kDefaultThreads;
}

void validate_topk(const KernelSpec& spec) {
  if (spec.topk < 64 || spec.topk > 4096 || spec.topk % 64 != 0)
    throw_bad_field(spec, "topk", spec.topk, "a multiple of 64 in [64, 4096]");
  const int t = spec.tile.threads;
  if (t != 128 && t != 256 && t != 512 && t != 1024)
    throw_bad_field(spec, "threads", t, "one of 128, 256, 512, 1024");
}

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {{"TOPK", spec.topk}, {"THREADS", spec.tile.threads}};
}

// "topk.topk2048" (readable_name() appends a non-default tile and the arch).
std::string readable_stem(const KernelSpec& spec) { return "topk.topk" + std::to_string(spec.topk); }

unsigned max_dynamic_smem(const KernelSpec&) { return 0; }  // static shared memory only

}  // namespace

extern const FamilyTraits topk_traits;
const FamilyTraits topk_traits = {
    Family::topk,
    0u,  // reads only topk and threads
    "topk",
    "nsajit_topk",
    &embedded::topk,
    &fill_default_tile,
    &validate_topk,
    &constants,
    &readable_stem,
    &max_dynamic_smem,
};

}  // namespace nsajit
