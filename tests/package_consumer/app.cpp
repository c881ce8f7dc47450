// A downstream program built against the installed package (find_package(nsajit)).
#include <nsajit/jit.hpp>
#include <nsajit/kernels.hpp>

#include <cstdio>

int main() {
  const nsajit::KernelRecord r = nsajit::precompile({.family = nsajit::Family::topk, .topk = 1024});
  std::printf("%s: %zu-byte cubin, NVRTC %s\n", r.name.c_str(), r.cubin_bytes, nsajit::nvrtc_version().c_str());
  return r.cubin_bytes > 0 ? 0 : 1;
}
