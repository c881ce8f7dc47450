// family.cpp — the registry of kernel families.
#include "generator/family.hpp"

#include <fmt/format.h>

#include "nsajit/errors.hpp"

namespace nsajit {

extern const FamilyTraits index_transform_traits;
extern const FamilyTraits topk_traits;
extern const FamilyTraits sparse_mla_decode_traits;

const FamilyTraits& traits(Family family) {
  switch (family) {
    case Family::index_transform: return index_transform_traits;
    case Family::topk: return topk_traits;
    case Family::sparse_mla_decode: return sparse_mla_decode_traits;
  }
  throw InvalidArgument(fmt::format("kernel spec: field family = {}: expected index_transform, topk "
                                    "or sparse_mla_decode",
                                    int(family)));
}

}  // namespace nsajit
