// embedded_templates.hpp — the files of templates/, embedded at build time
// (cmake/embed_templates.cmake writes the definitions).
#pragma once

#include <string_view>

namespace nsajit::embedded {
std::string_view kernel_params();      // templates/kernel_params.h
std::string_view device_common();      // templates/device_common.cuh
std::string_view kv_slot_transform();  // templates/kv_slot_transform.cuh
std::string_view index_transform();    // templates/index_transform.cuh
std::string_view topk_common();        // templates/topk_common.cuh
std::string_view topk_radix();         // templates/topk_radix.cuh
std::string_view topk_speculative();   // templates/topk_speculative.cuh
std::string_view topk_cluster_lists(); // templates/topk_cluster_lists.cuh
std::string_view topk_sort();          // templates/topk_sort.cuh
std::string_view topk_dense();         // templates/topk_dense.cuh
std::string_view topk();               // templates/topk.cuh (the kernel; the parts above come first)
std::string_view sparse_mla_mma_sync(); // templates/sparse_mla_mma_sync.cuh
std::string_view sparse_mla_wgmma();   // templates/sparse_mla_wgmma.cuh
std::string_view sparse_mla_combine(); // templates/sparse_mla_combine.cuh
std::string_view fp8_kv_quantize();    // templates/fp8_kv_quantize.cuh
std::string_view fp8_kv_gather();      // templates/fp8_kv_gather.cuh
}  // namespace nsajit::embedded
