// kv_slot_transform.cuh — §1 for one row: top-k positions -> KV-cache slots (or -1). Shared by
// the index_transform kernel and the fused top-k, which therefore cannot disagree.
//   NSAJIT_MODE 0 (decode):  row r uses page-table row r / NSAJIT_NEXT_N (MTP rows share one).
//   NSAJIT_MODE 1 (prefill): row r uses page-table row b, cu_seqlens_q[b] <= r < cu_seqlens_q[b+1];
//                            a row outside [cu_seqlens_q[0], cu_seqlens_q[num_requests]) is all -1.
//   NSAJIT_MODE 2 (ragged):  idx + offsets[r] for idx >= 0 (wrapping, as the CPU reference), else -1.
// decode / prefill: idx is valid iff 0 <= idx < max_position (= page_table_width * page_size);
// slot = page_table[b, idx / P] * P + idx % P in 64 bits, stored as int32; a negative page-table
// entry gives -1. P = NSAJIT_PAGE_SIZE is a compile-time constant, so / and % are cheap for any P.
#pragma once
#include "device_common.cuh"

#ifndef NSAJIT_PAGE_SIZE
#define NSAJIT_PAGE_SIZE 1
#endif
#ifndef NSAJIT_MODE
#define NSAJIT_MODE 0
#endif
#ifndef NSAJIT_NEXT_N
#define NSAJIT_NEXT_N 1
#endif

static_assert(NSAJIT_PAGE_SIZE >= 1, "page size must be >= 1");
static_assert(NSAJIT_MODE >= 0 && NSAJIT_MODE <= 2, "mode: 0 decode, 1 prefill, 2 ragged");
static_assert(NSAJIT_NEXT_N >= 1, "next_n must be >= 1");

// What one row maps through: a page-table row (null: the whole row maps to -1, a prefill row of
// no request) with the positions [0, limit) that reach it, or a ragged offset.
struct KvSlotRow {
  const int* table_row;
  int limit;  // min(max_position, 2^31 - 1); 0 without a table row
  int offset;
};

// Params: IndexTransformParams or TopkParams (the same field names).
template <class Params>
NSAJIT_DEVICE KvSlotRow kv_slot_row(const Params& p, int r) {
  KvSlotRow row;
  row.table_row = nullptr;
  row.limit = 0;
  row.offset = 0;
#if NSAJIT_MODE == 0
  row.table_row = p.page_table + (long long)(r / NSAJIT_NEXT_N) * p.page_table_row_stride;
#elif NSAJIT_MODE == 1
  const int b = find_request(p.cu_seqlens_q, p.num_requests, r);
  if (b >= 0) row.table_row = p.page_table + (long long)b * p.page_table_row_stride;
#else
  row.offset = p.offsets[r];
#endif
  if (row.table_row != nullptr) row.limit = int(min(p.max_position, 0x7fffffffll));
  return row;
}

// Without branches: a branch around the table read made the compiler issue the reads of an
// unrolled caller one after another, each waiting for the previous one's use. A predicated read lets it issue them all before the first use.
NSAJIT_DEVICE int kv_slot(const KvSlotRow& row, int idx) {
#if NSAJIT_MODE == 2
  return idx >= 0 ? int(uint32_t(idx) + uint32_t(row.offset)) : -1;  // unsigned: wraps, no UB
#else
  const bool reaches = uint32_t(idx) < uint32_t(row.limit);  // 0 <= idx < limit
  int entry = -1;
  // The table is not written while a kernel reads it: the non-coherent read-only path.
  asm("{\n\t.reg .pred p;\n\tsetp.ne.u32 p, %2, 0;\n\t@p ld.global.nc.s32 %0, [%1];\n\t}"
      : "+r"(entry)
      : "l"(row.table_row + uint32_t(idx) / NSAJIT_PAGE_SIZE), "r"(uint32_t(reaches)));
  // The slot's low 32 bits (the 64-bit entry * P + idx % P stored as int32), or -1 for a negative
  // entry (entry >> 31 is all ones then): an OR, not a branch after the read.
  return int(uint32_t(entry) * NSAJIT_PAGE_SIZE + uint32_t(idx) % NSAJIT_PAGE_SIZE) | (entry >> 31);
#endif
}
