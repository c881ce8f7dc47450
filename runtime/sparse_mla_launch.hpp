// sparse_mla_launch.hpp — a test hook of the sparse-MLA decode launch (internal, not installed).
#pragma once

namespace nsajit::detail {

// Test hook (not thread-safe): threads > 0 replaces the thread count the runtime would give the
// decode kernel's spec (256: the mma.sync kernel without producer warps, 320: with two bf16
// producer warps, 512: with eight FP8 producer warps, or at 64 heads per CTA the FP8 wgmma kernel
// with two producer warpgroups, 384: the wgmma kernel with one), validated like any
// spec (an invalid choice throws InvalidArgument before any launch). 0 restores the default. Lets
// the tests reach kernels the defaults no longer pick.
void set_sparse_mla_threads_override(int threads);

}  // namespace nsajit::detail
