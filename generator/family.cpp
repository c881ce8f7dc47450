// family.cpp — the registry of kernel families.
#include "generator/family.hpp"

#include <fmt/format.h>

#include "nsajit/errors.hpp"

namespace nsajit {

#define NSAJIT_DECLARE_TRAITS(name) extern const FamilyTraits name##_traits;
NSAJIT_FAMILIES(NSAJIT_DECLARE_TRAITS)
#undef NSAJIT_DECLARE_TRAITS

const FamilyTraits& traits(Family family) {
  switch (family) {
#define NSAJIT_TRAITS_CASE(name) \
  case Family::name: return name##_traits;
    NSAJIT_FAMILIES(NSAJIT_TRAITS_CASE)
#undef NSAJIT_TRAITS_CASE
  }
#define NSAJIT_FAMILY_NAME(name) #name ", "
  static const std::string names = std::string(NSAJIT_FAMILIES(NSAJIT_FAMILY_NAME));
#undef NSAJIT_FAMILY_NAME
  throw InvalidArgument(fmt::format("kernel spec: field family = {}: expected one of {}", int(family),
                                    names.substr(0, names.size() - 2)));
}

}  // namespace nsajit
