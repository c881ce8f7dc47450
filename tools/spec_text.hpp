// spec_text.hpp — a KernelSpec from the text a user types: its canonical text or readable name.
#pragma once

#include <string>

#include "nsajit/spec.hpp"

namespace nsajit::tools {

// Parses either form nsajit prints for a spec:
// - canonical text, "family=topk topk=2048 ... arch=sm_90a" (canonical_text): any subset of its
//   fields in any order, the rest at their defaults (arch: default_arch);
// - readable name, "sparse_mla.h16.topk2048.kv_bf16.mma_sync.hpc16.pw2.sm_90a" (readable_name), which must
//   name the spec exactly (parsing it back gives the same name).
// Returns the spec with its default tile filled, validated. Throws InvalidArgument naming the
// text, the part that is wrong and what was expected.
KernelSpec parse_spec_text(const std::string& text, Arch default_arch = Arch{});

}  // namespace nsajit::tools
