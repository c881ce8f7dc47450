// sparse_mla_mma_common.cuh — the PTX wrappers of the mma.sync sparse MLA kernels
// (sparse_mla_mma_sync.cuh, sparse_mla_fp8_direct.cuh): copies into shared memory, mbarrier
// arrivals, ldmatrix and the m16n8k16 tensor-core MMAs.
#pragma once
#include "device_common.cuh"

namespace mla {

struct alignas(8) f32x2 {
  float x, y;
};

// Byte offset of 16-byte chunk `c` of row `r` in a [rows][72 chunks] tile / a [rows][8 chunks] tile,
// the chunk index xor-ed with the row's low 3 bits (conflict-free ldmatrix of 8 rows).
NSAJIT_DEVICE uint32_t sw576(int r, int c) { return uint32_t(r) * 1152u + (uint32_t(c ^ (r & 7)) << 4); }
NSAJIT_DEVICE uint32_t sw64(int r, int c) { return uint32_t(r) * 128u + (uint32_t(c ^ (r & 7)) << 4); }

NSAJIT_DEVICE void cp_async_16(uint32_t saddr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(saddr), "l"(gmem) : "memory");
}
NSAJIT_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
NSAJIT_DEVICE void cp_async_wait_1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
NSAJIT_DEVICE void mbar_arrive_plain(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
NSAJIT_DEVICE void mbar_arrive_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
NSAJIT_DEVICE void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
NSAJIT_DEVICE void ldsm_x4(uint32_t a, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(a));
}
NSAJIT_DEVICE void ldsm_x2(uint32_t a, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r0), "=r"(r1) : "r"(a));
}
NSAJIT_DEVICE void ldsm_x4_t(uint32_t a, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(a));
}
// c += a . b (16x8x16, bf16 inputs, fp32 accumulate).
NSAJIT_DEVICE void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace mla
