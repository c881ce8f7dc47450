// family.cpp — the registry of kernel families.
#include "generator/family.hpp"

#include <fmt/format.h>

#include "nsajit/errors.hpp"

namespace nsajit {

extern const FamilyTraits index_transform_traits;
extern const FamilyTraits topk_traits;
extern const FamilyTraits sparse_mla_traits;
extern const FamilyTraits sparse_mla_combine_traits;
extern const FamilyTraits fp8_kv_quantize_traits;
extern const FamilyTraits fp8_kv_gather_traits;

const FamilyTraits& traits(Family family) {
  switch (family) {
    case Family::index_transform: return index_transform_traits;
    case Family::topk: return topk_traits;
    case Family::sparse_mla: return sparse_mla_traits;
    case Family::sparse_mla_combine: return sparse_mla_combine_traits;
    case Family::fp8_kv_quantize: return fp8_kv_quantize_traits;
    case Family::fp8_kv_gather: return fp8_kv_gather_traits;
  }
  throw InvalidArgument(fmt::format("kernel spec: field family = {}: expected one of index_transform, topk, "
                                    "sparse_mla, sparse_mla_combine, fp8_kv_quantize, fp8_kv_gather",
                                    int(family)));
}

}  // namespace nsajit
