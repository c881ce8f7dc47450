// index_transform.cuh — §1: raw top-k positions -> KV-cache slots (or -1).
//
// One CTA per row of NSAJIT_TOPK indices; every output element is written.
//   NSAJIT_MODE 0 (decode):  row r uses page-table row r.
//   NSAJIT_MODE 1 (prefill): row r uses page-table row b, cu_seqlens_q[b] <= r < cu_seqlens_q[b+1];
//                            a row outside [cu_seqlens_q[0], cu_seqlens_q[num_requests]) is all -1.
//   NSAJIT_MODE 2 (ragged):  out = idx + offsets[r] for idx >= 0, else -1 (no page table).
// decode / prefill: idx is valid iff 0 <= idx < max_position (= page_table_width * page_size);
// slot = page_table[b, idx / P] * P + idx % P in 64 bits, stored as int32; a negative page-table
// entry gives -1. P = NSAJIT_PAGE_SIZE is a compile-time constant, so / and % are cheap for any P.

#ifndef NSAJIT_TOPK
#error "NSAJIT_TOPK must be defined"
#endif
#ifndef NSAJIT_PAGE_SIZE
#define NSAJIT_PAGE_SIZE 1
#endif
#ifndef NSAJIT_MODE
#define NSAJIT_MODE 0
#endif
#ifndef NSAJIT_THREADS
#define NSAJIT_THREADS 256
#endif

static_assert(NSAJIT_TOPK % 64 == 0, "topk must be a multiple of 64");
static_assert(NSAJIT_PAGE_SIZE >= 1, "page size must be >= 1");
static_assert(NSAJIT_MODE >= 0 && NSAJIT_MODE <= 2, "mode: 0 decode, 1 prefill, 2 ragged");
static_assert(NSAJIT_THREADS % 32 == 0 && NSAJIT_THREADS <= 1024, "threads: whole warps, <= 1024");

// What one row maps through: a page-table row (null = the whole row is -1) or a ragged offset.
struct IndexTransformRow {
  const int* table_row;
  long long max_position;
  int offset;
};

NSAJIT_DEVICE int index_transform_one(const IndexTransformRow& row, int idx) {
#if NSAJIT_MODE == 2
  // Unsigned add: wraps instead of signed-overflow UB; identical to the CPU reference.
  return idx >= 0 ? int(uint32_t(idx) + uint32_t(row.offset)) : -1;
#else
  if (row.table_row == nullptr || idx < 0 || (long long)idx >= row.max_position) return -1;
  const int entry = row.table_row[idx / NSAJIT_PAGE_SIZE];
  if (entry < 0) return -1;
  return int((long long)entry * NSAJIT_PAGE_SIZE + idx % NSAJIT_PAGE_SIZE);
#endif
}

extern "C" __global__ void __launch_bounds__(NSAJIT_THREADS)
    nsajit_index_transform(const IndexTransformParams p) {
  const int r = blockIdx.x;
  if (r >= p.rows) return;

  IndexTransformRow row;
  row.table_row = nullptr;
  row.max_position = p.max_position;
  row.offset = 0;
#if NSAJIT_MODE == 0
  row.table_row = p.page_table + (long long)r * p.page_table_row_stride;
#elif NSAJIT_MODE == 1
  const int b = find_request(p.cu_seqlens_q, p.num_requests, r);
  if (b >= 0) row.table_row = p.page_table + (long long)b * p.page_table_row_stride;
#else
  row.offset = p.offsets[r];
#endif

  const int* in = p.topk_indices + (long long)r * NSAJIT_TOPK;
  int* out = p.out + (long long)r * NSAJIT_TOPK;

  // A row is NSAJIT_TOPK * 4 bytes, a multiple of 256, so every row is 16-byte aligned exactly
  // when the base pointers are. In-place (in == out) is fine: each element is read, then written,
  // by the same thread.
  if ((((unsigned long long)p.topk_indices | (unsigned long long)p.out) & 15ull) == 0) {
    const u32x4* in4 = reinterpret_cast<const u32x4*>(in);
    u32x4* out4 = reinterpret_cast<u32x4*>(out);
    for (int v = threadIdx.x; v < NSAJIT_TOPK / 4; v += NSAJIT_THREADS) {
      const u32x4 x = in4[v];
      u32x4 y;
      y.x = uint32_t(index_transform_one(row, int(x.x)));
      y.y = uint32_t(index_transform_one(row, int(x.y)));
      y.z = uint32_t(index_transform_one(row, int(x.z)));
      y.w = uint32_t(index_transform_one(row, int(x.w)));
      out4[v] = y;
    }
  } else {
    for (int j = threadIdx.x; j < NSAJIT_TOPK; j += NSAJIT_THREADS)
      out[j] = index_transform_one(row, in[j]);
  }
}
