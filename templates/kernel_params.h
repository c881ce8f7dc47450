// kernel_params.h — launch parameter blocks, one per family.
//
// Included by the host runtime (C++) and embedded into every generated source, so both sides see
// one definition: builtin types only, no headers, identical layout on host and device. Each kernel
// takes its block by value as its single parameter.
#pragma once

struct IndexTransformParams {
  const int* topk_indices;          // [rows, topk]
  int* out;                         // [rows, topk]
  const int* page_table;            // [num_requests, page_table_width]
  long long page_table_row_stride;  // elements
  const int* cu_seqlens_q;          // prefill: [num_requests + 1]
  const int* offsets;               // ragged: [rows]
  long long max_position;           // page_table_width * page_size: positions the table covers
  int rows;
  int num_requests;
};

struct TopkParams {
  const float* scores;         // [rows, width]
  long long score_row_stride;  // elements
  const int* lengths;          // [rows]
  const int* row_starts;       // [rows] or null
  int* out;                    // [rows, topk]
  int rows;
  int width;
};

struct SparseMlaDecodeParams {
  const unsigned short* q;   // bf16 [rows, h_q, 576]
  const unsigned short* kv;  // bf16 [num_slots, kv_row_stride]
  long long num_slots;
  long long kv_row_stride;   // elements
  const int* indices;        // [rows, topk]
  const int* topk_length;    // [rows] or null
  unsigned short* out;       // bf16 [rows, h_q, 512]
  float* lse;                // [rows, h_q]
  float sm_scale;
  int rows;
};
