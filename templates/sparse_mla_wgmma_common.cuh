// sparse_mla_wgmma_common.cuh — what the two sparse MLA wgmma kernels (sm_90a) share: the
// launch constants, the 128-byte-swizzled subtile addressing and wgmma descriptors, the wgmma,
// cp.async, mbarrier, named-barrier, setmaxnreg and stmatrix wrappers, and the epilogue's store of
// O. Included by sparse_mla_wgmma.cuh (one math warpgroup issues QK and the softmax) and
// sparse_mla_seesaw.cuh (two math warpgroups on alternate KV tiles).
#pragma once
#include "device_common.cuh"

namespace mla {

constexpr int kDimQK = kMlaDimQK;
constexpr int kDimV = kMlaDimV;
constexpr int H_Q = NSAJIT_H_Q;
constexpr int TOPK = NSAJIT_TOPK;
constexpr int HEADS_PER_CTA = NSAJIT_HEADS_PER_CTA;
constexpr int TILE_TOKENS = NSAJIT_BLOCK_TOKENS;

constexpr uint32_t SUB = 8192;                   // [64 rows][128 B] swizzled subtile
constexpr uint32_t TILE = 9 * SUB;               // [64][576] bf16
// The launch's register allocation a thread (__launch_bounds__(NSAJIT_THREADS, 1)): setmaxnreg
// counts above it are .inc, below it .dec (set_max_regs).
constexpr int REG_LAUNCH = NSAJIT_THREADS == 512 ? 128 : 168;

struct alignas(8) f32x2 {
  float x, y;
};

// Byte offset of 16-byte chunk c (0..7) of row r in a swizzled subtile.
NSAJIT_DEVICE uint32_t swz(int r, int c) { return uint32_t(r) * 128u + (uint32_t(c ^ (r & 7)) << 4); }

// 16-byte cp.async; src_bytes 0 zero-fills the destination and reads nothing. No L2::256B
// prefetch-size hint: the single schedule's line prefetch two tiles ahead has brought the row's
// lines (the seesaw's copies take the hint instead: sparse_mla_seesaw.cuh).
NSAJIT_DEVICE void cp_async_16_zfill(uint32_t saddr, const void* gmem, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(saddr), "l"(gmem), "r"(src_bytes)
               : "memory");
}
// An L2 policy for data that crosses L2 once (q; a prefill-sized out): its lines are evicted
// first, so they do not push out the KV pool's (FlashMLA loads q under the same policy).
NSAJIT_DEVICE uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// cp_async_16_zfill under an L2 cache policy.
NSAJIT_DEVICE void cp_async_16_zfill_hint(uint32_t saddr, const void* gmem, uint32_t src_bytes, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(saddr), "l"(gmem), "r"(src_bytes),
               "l"(policy)
               : "memory");
}
// Asks L2 for the 128-byte line holding `gmem` (per thread; no completion).
NSAJIT_DEVICE void prefetch_l2_line(const void* gmem) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(gmem));
}
// An arrival on `bar` once every cp.async this thread issued so far has landed; .noinc: the
// barrier's expected count includes it (no wait here: the producer runs ahead to the next tile).
NSAJIT_DEVICE void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
NSAJIT_DEVICE u32x4 ld_global_nc_16(const void* ptr) {
  u32x4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(ptr));
  return v;
}
NSAJIT_DEVICE void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
template <int REGS>
NSAJIT_DEVICE void set_max_regs() {
  if constexpr (REGS > REG_LAUNCH) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
  else if constexpr (REGS < REG_LAUNCH) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
// Non-blocking: has the phase of parity `parity` completed?
NSAJIT_DEVICE bool mbar_test(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}
// Named barrier over `threads` threads that also returns whether `pred` held for all of them.
NSAJIT_DEVICE bool bar_and(int id, int threads, bool pred) {
  uint32_t all;
  asm volatile("{ .reg .pred p, q; setp.ne.u32 q, %3, 0; bar.red.and.pred p, %1, %2, q; selp.u32 %0, 1, 0, p; }"
               : "=r"(all)
               : "r"(id), "r"(threads), "r"(uint32_t(pred))
               : "memory");
  return all != 0;
}
NSAJIT_DEVICE void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}


// Four 8x8 bf16 matrices to shared memory; lane L gives the address of row L % 8 of matrix L / 8,
// and r[m] holds this lane's two elements of matrix m (the mma accumulator fragment layout).
NSAJIT_DEVICE void stmatrix_x4(uint32_t saddr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(saddr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

// O (this thread's m64n256 accumulator fragment: rows r0, r1 alternate in pairs) *= alpha of its row.
NSAJIT_DEVICE void scale_o_rows(float (&o)[128], float alpha_r0, float alpha_r1) {
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    o[4 * j + 0] *= alpha_r0;
    o[4 * j + 1] *= alpha_r0;
    o[4 * j + 2] *= alpha_r1;
    o[4 * j + 3] *= alpha_r1;
  }
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle. K-major operands: rows of 128 bytes,
// 8-row groups 1024 bytes apart (SBO); the K offset inside the 128-byte row is added to the start
// address. MN-major (V): LBO = bytes between 64-element column blocks, SBO = between 8-row groups.
NSAJIT_DEVICE uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) | (1ull << 62);
}
NSAJIT_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
NSAJIT_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
NSAJIT_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across wgmma issue / wait.
template <int N>
NSAJIT_DEVICE void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
NSAJIT_DEVICE void fence_regs_u(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

NSAJIT_DEVICE void wgmma_m64n64k16_ss(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d));
}
NSAJIT_DEVICE void wgmma_m64n256k16_rs_tb(float (&d)[128], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
NSAJIT_DEVICE void wgmma_m64n256k16_ss_tb(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(scale_d));
}

// O[:, 128 columns] (accumulators d[B, B + 64): the m64n256 fragment's columns 128 * (B / 64) onward)
// += A B, both from shared memory, B MN-major: the 512-thread FP8 kernel's PV, whose launch cap of
// 128 registers a thread is below what one m64n256 wgmma needs (128 accumulators + operands).
template <int B>
NSAJIT_DEVICE void wgmma_m64n128k16_ss_tb(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[B + 0]), "+f"(d[B + 1]), "+f"(d[B + 2]), "+f"(d[B + 3]), "+f"(d[B + 4]), "+f"(d[B + 5]), "+f"(d[B + 6]), "+f"(d[B + 7]), "+f"(d[B + 8]), "+f"(d[B + 9]), "+f"(d[B + 10]), "+f"(d[B + 11]), "+f"(d[B + 12]), "+f"(d[B + 13]), "+f"(d[B + 14]), "+f"(d[B + 15]), "+f"(d[B + 16]), "+f"(d[B + 17]), "+f"(d[B + 18]), "+f"(d[B + 19]), "+f"(d[B + 20]), "+f"(d[B + 21]), "+f"(d[B + 22]), "+f"(d[B + 23]), "+f"(d[B + 24]), "+f"(d[B + 25]), "+f"(d[B + 26]), "+f"(d[B + 27]), "+f"(d[B + 28]), "+f"(d[B + 29]), "+f"(d[B + 30]), "+f"(d[B + 31]), "+f"(d[B + 32]), "+f"(d[B + 33]), "+f"(d[B + 34]), "+f"(d[B + 35]), "+f"(d[B + 36]), "+f"(d[B + 37]), "+f"(d[B + 38]), "+f"(d[B + 39]), "+f"(d[B + 40]), "+f"(d[B + 41]), "+f"(d[B + 42]), "+f"(d[B + 43]), "+f"(d[B + 44]), "+f"(d[B + 45]), "+f"(d[B + 46]), "+f"(d[B + 47]), "+f"(d[B + 48]), "+f"(d[B + 49]), "+f"(d[B + 50]), "+f"(d[B + 51]), "+f"(d[B + 52]), "+f"(d[B + 53]), "+f"(d[B + 54]), "+f"(d[B + 55]), "+f"(d[B + 56]), "+f"(d[B + 57]), "+f"(d[B + 58]), "+f"(d[B + 59]), "+f"(d[B + 60]), "+f"(d[B + 61]), "+f"(d[B + 62]), "+f"(d[B + 63])
      : "l"(da), "l"(db), "r"(1));
}

template <int B>
NSAJIT_DEVICE void wgmma_m64n128k16_rs_tb(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[B + 0]), "+f"(d[B + 1]), "+f"(d[B + 2]), "+f"(d[B + 3]), "+f"(d[B + 4]), "+f"(d[B + 5]), "+f"(d[B + 6]), "+f"(d[B + 7]), "+f"(d[B + 8]), "+f"(d[B + 9]), "+f"(d[B + 10]), "+f"(d[B + 11]), "+f"(d[B + 12]), "+f"(d[B + 13]), "+f"(d[B + 14]), "+f"(d[B + 15]), "+f"(d[B + 16]), "+f"(d[B + 17]), "+f"(d[B + 18]), "+f"(d[B + 19]), "+f"(d[B + 20]), "+f"(d[B + 21]), "+f"(d[B + 22]), "+f"(d[B + 23]), "+f"(d[B + 24]), "+f"(d[B + 25]), "+f"(d[B + 26]), "+f"(d[B + 27]), "+f"(d[B + 28]), "+f"(d[B + 29]), "+f"(d[B + 30]), "+f"(d[B + 31]), "+f"(d[B + 32]), "+f"(d[B + 33]), "+f"(d[B + 34]), "+f"(d[B + 35]), "+f"(d[B + 36]), "+f"(d[B + 37]), "+f"(d[B + 38]), "+f"(d[B + 39]), "+f"(d[B + 40]), "+f"(d[B + 41]), "+f"(d[B + 42]), "+f"(d[B + 43]), "+f"(d[B + 44]), "+f"(d[B + 45]), "+f"(d[B + 46]), "+f"(d[B + 47]), "+f"(d[B + 48]), "+f"(d[B + 49]), "+f"(d[B + 50]), "+f"(d[B + 51]), "+f"(d[B + 52]), "+f"(d[B + 53]), "+f"(d[B + 54]), "+f"(d[B + 55]), "+f"(d[B + 56]), "+f"(d[B + 57]), "+f"(d[B + 58]), "+f"(d[B + 59]), "+f"(d[B + 60]), "+f"(d[B + 61]), "+f"(d[B + 62]), "+f"(d[B + 63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// A 64-token S tile's fragment: invalid tokens (validity flags vf) -> -inf, the rest scaled to base 2;
// mx0 / mx1 = the tile's max of the thread's two rows (reduced over the quad that shares them).
NSAJIT_DEVICE void mask_scale_row_max(float (&s)[32], const int* vf, int t4, float scale_log2, float& mx0,
                                      float& mx1) {
  mx0 = neg_inf();
  mx1 = neg_inf();
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int2 v = *reinterpret_cast<const int2*>(vf + 8 * j + 2 * t4);
    s[4 * j + 0] = v.x ? s[4 * j + 0] * scale_log2 : neg_inf();
    s[4 * j + 1] = v.y ? s[4 * j + 1] * scale_log2 : neg_inf();
    s[4 * j + 2] = v.x ? s[4 * j + 2] * scale_log2 : neg_inf();
    s[4 * j + 3] = v.y ? s[4 * j + 3] * scale_log2 : neg_inf();
    mx0 = fmaxf(mx0, fmaxf(s[4 * j + 0], s[4 * j + 1]));
    mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
}

// Epilogue of a consumer warpgroup: its 256 output dims [dim0, dim0 + 256) of O (rows r0, r1 of
// this thread's fragment) times 1 / l, as bf16 out or, with splits, the fp32 partial. Called at
// the end of each warpgroup's branch rather than after they join: joined, ptxas must give o the
// same registers under both warpgroups' register budgets.
NSAJIT_DEVICE void store_o(const SparseMlaDecodeParams& p, const float (&o)[128], int dim0, int r0, int r1, int t4,
                           float inv0, float inv1, long long row, int head0, int split, bool partial) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = hh ? r1 : r0;
    const float inv = hh ? inv1 : inv0;
    if (r >= HEADS_PER_CTA) continue;  // padding row
    const long long head = row * H_Q + head0 + r;
    if (!partial) {
      unsigned short* out = p.out + head * kDimV + dim0 + 2 * t4;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<uint32_t*>(out + 8 * j) = pack_bf16x2_rn(o[4 * j + 2 * hh] * inv, o[4 * j + 2 * hh + 1] * inv);
    } else {
      const long long part_row = (long long)split * p.rows * H_Q + head;
      float* out = p.o_part + part_row * kDimV + dim0 + 2 * t4;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<f32x2*>(out + 8 * j) = f32x2{o[4 * j + 2 * hh] * inv, o[4 * j + 2 * hh + 1] * inv};
    }
  }
}

// Without splits, a consumer warpgroup's 256 dims of O go through shared memory: stmatrix into
// the Q tile (no QK reads it by then), then one 512-byte bulk copy a head row. Written by the
// threads straight from the fragment (64 4-byte stores a thread, a head row's 16 bytes a partial
// sector each) the epilogue held the consumer warps ~13 % of a prefill CTA's time.
constexpr int BAR_STAGED_O = 13;                  // + warpgroup: named barriers 13 and 14
constexpr uint32_t kStagePitch = 2u * kDimV + 16u;  // bytes a staged head row: +16 puts a stmatrix block's 8 rows in distinct 16-byte bank groups
static_assert(64u * kStagePitch <= TILE, "the staged O fits the Q tile");

// out larger than this (bytes) is stored under evict_first: it cannot stay in L2 for the next
// kernel anyway (prefill: 268 MB at h64, s_q 4096), while a decode batch's may (16.8 MB at h128,
// 128 rows), so that one keeps the default policy.
constexpr long long kOutStreamBytes = 32ll << 20;

// One bulk store of `bytes` from shared memory, evict_first when `streamed`; waits until the
// staging has been read.
NSAJIT_DEVICE void bulk_store_wait_read(void* gmem, uint32_t saddr, uint32_t bytes, bool streamed) {
  if (streamed)
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;" ::"l"(gmem), "r"(saddr),
                 "r"(bytes), "l"(l2_evict_first_policy())
                 : "memory");
  else
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(gmem), "r"(saddr), "r"(bytes)
                 : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the staging may be released after
}

// Epilogue of consumer warpgroup w (dims [256 w, 256 w + 256)) without splits; s_stage: the Q
// tile, free once every QK of the CTA is done and no copy into it is in flight.
NSAJIT_DEVICE void store_o_staged(const SparseMlaDecodeParams& p, const float (&o)[128], int w, uint32_t s_stage,
                                  float inv0, float inv1, long long row, int head0) {
  const int ct = threadIdx.x & 127, lane = ct & 31;
  // stmatrix.x4 jj: the 8x8 blocks (rows 16 warp + [0, 8) / [8, 16)) x (dims 16 jj + [0, 8) / [8, 16)) in
  // the fragment's order; lane L gives the address of row L % 8 of block L / 8.
  const int srow = 16 * (ct >> 5) + (lane & 7) + 8 * ((lane >> 3) & 1);
  const uint32_t base = s_stage + uint32_t(srow) * kStagePitch + 512u * uint32_t(w) + 16u * uint32_t(lane >> 4);
#pragma unroll
  for (int jj = 0; jj < 16; ++jj) {
    const int a = 8 * jj, b = 8 * jj + 4;  // o[] of dims 16 jj + 2 t4 and 16 jj + 8 + 2 t4
    const uint32_t r[4] = {pack_bf16x2_rn(o[a] * inv0, o[a + 1] * inv0), pack_bf16x2_rn(o[a + 2] * inv1, o[a + 3] * inv1),
                           pack_bf16x2_rn(o[b] * inv0, o[b + 1] * inv0), pack_bf16x2_rn(o[b + 2] * inv1, o[b + 3] * inv1)};
    stmatrix_x4(base + 32u * uint32_t(jj), r);
  }
  fence_proxy_async();  // stmatrix (generic proxy) -> the bulk copies' reads (async proxy)
  bar_sync(BAR_STAGED_O + w, 128);
  if (ct < HEADS_PER_CTA)  // padding rows (fewer heads a CTA) are not written
    bulk_store_wait_read(p.out + (row * H_Q + head0 + ct) * kDimV + 256 * w, s_stage + uint32_t(ct) * kStagePitch + 512u * uint32_t(w), 512u,
                         (long long)p.rows * H_Q * kDimV * 2 > kOutStreamBytes);
}

}  // namespace mla
