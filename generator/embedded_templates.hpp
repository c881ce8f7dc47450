// embedded_templates.hpp — the files of templates/, embedded at build time
// (cmake/embed_templates.cmake writes the definitions).
#pragma once

#include <string_view>

namespace nsajit::embedded {
std::string_view kernel_params();      // templates/kernel_params.h
std::string_view device_common();      // templates/device_common.cuh
std::string_view kv_slot_transform();  // templates/kv_slot_transform.cuh
std::string_view index_transform();    // templates/index_transform.cuh
std::string_view topk();               // templates/topk.cuh
std::string_view sparse_mla_decode();  // templates/sparse_mla_decode.cuh
std::string_view sparse_mla_wgmma();   // templates/sparse_mla_wgmma.cuh
std::string_view sparse_mla_combine(); // templates/sparse_mla_combine.cuh
std::string_view fp8_kv_quantize();    // templates/fp8_kv_quantize.cuh
std::string_view fp8_kv_gather();      // templates/fp8_kv_gather.cuh
}  // namespace nsajit::embedded
