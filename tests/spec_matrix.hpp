// spec_matrix.hpp — the DeepSeek-V3.2 spec matrix the tests compile: h_q 16..128, page sizes 1
// and 64, topk 512/1024/2048, for every family (plus sparse MLA's bf16 wgmma variant below 64 heads per CTA).
#pragma once

#include <vector>

#include "nsajit/spec.hpp"

namespace nsajit::test {

inline std::vector<KernelSpec> deepseek_v32_matrix() {
  std::vector<KernelSpec> specs;
  for (int topk : {512, 1024, 2048}) {
    for (int h_q : {16, 32, 64, 128}) specs.push_back({.family = Family::sparse_mla_decode, .h_q = h_q, .topk = topk});
    for (int h_q : {16, 32, 64, 128})
      specs.push_back({.family = Family::sparse_mla_decode, .h_q = h_q, .topk = topk, .kv_dtype = KvDtype::fp8_e4m3});
    specs.push_back({.family = Family::topk, .topk = topk});
    for (IndexMode mode : {IndexMode::decode, IndexMode::prefill})
      for (int page_size : {1, 64})
        specs.push_back({.family = Family::index_transform, .topk = topk, .page_size = page_size, .mode = mode});
    specs.push_back({.family = Family::index_transform, .topk = topk, .mode = IndexMode::ragged});
  }
  for (Family family : {Family::fp8_kv_quantize, Family::fp8_kv_gather})  // §4: no topk
    for (int page_size : {1, 64}) specs.push_back({.family = family, .page_size = page_size});
  specs.push_back({.family = Family::sparse_mla_decode, .h_q = 8, .topk = 2048});
  specs.push_back({.family = Family::sparse_mla_combine});
  for (KernelSpec& s : specs) s = with_default_tile(s);
  // The bf16 sparse MLA wgmma kernel below 64 heads per CTA (sm_90a; not a default).
  for (KvDtype kv : {KvDtype::bf16})
    for (int h_q : {16, 32}) {
      KernelSpec w = {.family = Family::sparse_mla, .h_q = h_q, .topk = 2048, .kv_dtype = kv,
                      .tile = {.kernel = MlaKernel::wgmma, .producer_warps = 4}};
      w = with_default_tile(w);
      bool present = false;
      for (const KernelSpec& s : specs) present = present || s == w;
      if (!present) specs.push_back(w);
    }
  return specs;
}

}  // namespace nsajit::test
