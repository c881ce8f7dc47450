/* c_abi_test.c — the C ABI from C99 (this file includes nsajit.h only): every error path that
 * needs no GPU returns the documented status and a message naming the argument, its value and
 * what was expected; nothing crashes. Built with -std=c99 -Wall -Wextra -Werror -pedantic. */
#include "nsajit/nsajit.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                               \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                 \
    }                                                             \
  } while (0)

/* status == expected and the message contains every non-NULL fragment. */
static void expect(nsajit_status status, nsajit_status expected, const char* a, const char* b, const char* c,
                   int line) {
  const char* message = nsajit_last_error();
  const char* parts[3];
  int i;
  parts[0] = a;
  parts[1] = b;
  parts[2] = c;
  if (status != expected) {
    fprintf(stderr, "line %d: status %s, expected %s (message: %s)\n", line, nsajit_status_name(status),
            nsajit_status_name(expected), message);
    ++failures;
    return;
  }
  for (i = 0; i < 3; ++i) {
    if (parts[i] != NULL && strstr(message, parts[i]) == NULL) {
      fprintf(stderr, "line %d: message \"%s\" lacks \"%s\"\n", line, message, parts[i]);
      ++failures;
    }
  }
}
#define EXPECT(call, status, a, b, c) expect((call), (status), (a), (b), (c), __LINE__)

/* A fake but aligned, non-null device address: every call below fails its checks before any use. */
#define FAKE(type, offset) ((type)(void*)(size_t)(0x10000 + (offset)))

int main(void) {
  nsajit_topk_args t;
  nsajit_index_transform_args x;
  nsajit_sparse_mla_args m;
  nsajit_fp8_kv_quantize_args qz;
  nsajit_fp8_kv_gather_args g;
  nsajit_kernel_spec spec;
  nsajit_kernel_record record;
  unsigned char bigger[sizeof(nsajit_topk_args) + 16];
  char small[4];
  static char text[1 << 20];
  size_t needed = 0, count = 0, bytes = 0;
  int32_t splits = 0;

  CHECK(nsajit_abi_version() == NSAJIT_ABI_VERSION);
  CHECK(strcmp(nsajit_version(), "") != 0);
  CHECK(strcmp(nsajit_status_name(NSAJIT_ERROR_CAPTURE), "NSAJIT_ERROR_CAPTURE") == 0);

  /* Null structs, struct sizes. */
  EXPECT(nsajit_topk(NULL, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument args", "null", "pointer");
  t = nsajit_topk_defaults();
  CHECK(t.struct_size == sizeof t && t.topk == 2048 && t.next_n == 1 && t.page_size == 1);
  t.struct_size = 8;
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "args->struct_size = 8", "expected >=", NULL);
  /* ABI 1's first topk struct ended at byte 132 (sizeof 136): ABI 2 refuses anything below its sizeof. */
  t.struct_size = offsetof(nsajit_topk_args, score_dtype);
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "args->struct_size", "ABI 2", NULL);
  t.struct_size = sizeof t + 4097; /* a garbage size is refused before anything past sizeof is read */
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "args->struct_size", "at most 4096", NULL);
  /* A newer caller's larger struct: accepted only with zero tail bytes. */
  t = nsajit_topk_defaults();
  memset(bigger, 0, sizeof bigger);
  t.struct_size = sizeof bigger;
  t.topk = 100;
  memcpy(bigger, &t, sizeof t);
  EXPECT(nsajit_topk((const nsajit_topk_args*)(const void*)bigger, NULL), NSAJIT_ERROR_INVALID_ARGUMENT,
         "argument topk = 100", "multiple of 64", NULL);
  bigger[sizeof bigger - 1] = 1;
  EXPECT(nsajit_topk((const nsajit_topk_args*)(const void*)bigger, NULL), NSAJIT_ERROR_INVALID_ARGUMENT,
         "struct_size", "to be zero", NULL);

  /* Top-k: every argument error names the argument. */
  t = nsajit_topk_defaults();
  t.rows = -1;
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument rows = -1", NULL, NULL);
  t = nsajit_topk_defaults();
  t.rows = 2;
  t.width = 4096;
  t.scores = FAKE(const float*, 0);
  t.lengths = FAKE(const int32_t*, 0);
  t.out = NULL;
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument out = null", "device pointer", NULL);
  t.out = FAKE(int32_t*, 2);
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument out = 0x10002", "4-byte aligned", NULL);
  t.out = FAKE(int32_t*, 0);
  t.sorted = 2;
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument sorted = 2", "0 or 1", NULL);
  t.sorted = 0;
  t.fused_transform = 1;
  t.mode = 7;
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument mode = 7", "NSAJIT_MODE_DECODE", NULL);
  t.mode = NSAJIT_MODE_DECODE;
  t.num_requests = 3;
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument num_requests = 3", "rows = 2", NULL);
  t.mode = NSAJIT_MODE_RAGGED;
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument offsets = null", NULL, NULL);
  t = nsajit_topk_defaults();
  t.score_row_stride = 10;
  t.width = 20;
  EXPECT(nsajit_topk(&t, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument score_row_stride = 10", ">= width", NULL);

  /* Index transform. */
  x = nsajit_index_transform_defaults();
  x.rows = 1;
  x.topk = 64;
  x.topk_indices = FAKE(const int32_t*, 0);
  x.out = FAKE(int32_t*, 0);
  x.num_requests = 1;
  x.page_table_width = 8;
  x.page_size = 0;
  EXPECT(nsajit_index_transform(&x, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument page_size = 0", "[1, 4096]",
         NULL);
  x.page_size = 1;
  x.page_table = NULL;
  EXPECT(nsajit_index_transform(&x, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument page_table = null", NULL,
         NULL);
  x.mode = -1;
  EXPECT(nsajit_index_transform(&x, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument mode = -1", NULL, NULL);

  /* Sparse MLA. */
  m = nsajit_sparse_mla_defaults();
  CHECK(m.kv_row_stride == 576 && m.h_q == 16 && m.topk == 2048);
  m.rows = 1;
  m.sm_scale = 0.f;
  EXPECT(nsajit_sparse_mla_decode(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument sm_scale = 0", "> 0", NULL);
  m.sm_scale = 0.5f;
  m.h_q = 12;
  EXPECT(nsajit_sparse_mla_decode(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument h_q = 12", "8, 16", NULL);
  m.h_q = 16;
  CHECK(m.precise == 0);
  m.precise = 2;
  EXPECT(nsajit_sparse_mla_decode(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument precise = 2", "0 or 1", NULL);
  m.precise = 0;
  m.kv_dtype = 5;
  EXPECT(nsajit_sparse_mla_decode(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument kv_dtype = 5", NULL, NULL);
  m.kv_dtype = NSAJIT_KV_BF16;
  m.num_slots = 10;
  m.q = FAKE(const void*, 8);
  m.kv = FAKE(const void*, 0);
  m.indices = FAKE(const int32_t*, 0);
  m.out = FAKE(void*, 0);
  m.lse = FAKE(float*, 0);
  EXPECT(nsajit_sparse_mla_decode(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument q = 0x10008",
         "16-byte aligned", NULL);
  m.q = FAKE(const void*, 0);
  /* attn_sink: NULL by default; checked for alignment. */
  CHECK(m.attn_sink == NULL);
  m.attn_sink = FAKE(const float*, 2);
  EXPECT(nsajit_sparse_mla_decode(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument attn_sink = 0x10002",
         "4-byte aligned", NULL);
  m.attn_sink = NULL;
  m.workspace_bytes = 64;
  EXPECT(nsajit_sparse_mla_decode(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument workspace_bytes = 64",
         "workspace is null", NULL);
  m.workspace_bytes = 0;
  m.num_splits = 4;
  EXPECT(nsajit_sparse_mla_decode(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument num_splits = 4",
         "without a workspace", NULL);
  m.num_splits = 0;
  m.next_n = 2;
  EXPECT(nsajit_sparse_mla_prefill(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument next_n = 2", NULL, NULL);
  m.next_n = 1;
  m.kv_dtype = NSAJIT_KV_FP8_E4M3;
  m.page_size = 64;
  m.num_slots = 128;
  m.kv_page_stride = 64 * 656 + 8;
  EXPECT(nsajit_sparse_mla_decode(&m, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument kv_page_stride = 41992",
         "multiple of 16", NULL);
  EXPECT(nsajit_sparse_mla_num_splits(1, 16, 2048, 4, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "splits_out", NULL,
         NULL);
  EXPECT(nsajit_sparse_mla_num_splits(1, 16, 2048, 4, &splits), NSAJIT_OK, NULL, NULL, NULL);
  CHECK(splits == 4);
  EXPECT(nsajit_sparse_mla_workspace_bytes(3, 16, 2048, 4, &bytes), NSAJIT_OK, NULL, NULL, NULL);
  CHECK(bytes == (size_t)4 * 3 * 16 * (512 + 2) * 4);
  EXPECT(nsajit_sparse_mla_workspace_bytes(3, 16, 2048, 65, &bytes), NSAJIT_ERROR_INVALID_ARGUMENT,
         "argument num_splits = 65", NULL, NULL);

  /* FP8 cache. */
  qz = nsajit_fp8_kv_quantize_defaults();
  qz.scale_fmt = 3;
  EXPECT(nsajit_fp8_kv_quantize(&qz, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument scale_fmt = 3", NULL, NULL);
  qz.scale_fmt = NSAJIT_SCALE_UE8M0;
  qz.reserved = 2;
  EXPECT(nsajit_fp8_kv_quantize(&qz, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument reserved = 2", "expected 0", NULL);
  qz.reserved = 0;
  qz.n = 1;
  qz.kv = FAKE(const void*, 1);
  qz.slots = FAKE(const int32_t*, 0);
  qz.cache = FAKE(void*, 0);
  qz.num_pages = 1;
  EXPECT(nsajit_fp8_kv_quantize(&qz, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument kv", "aligned", NULL);
  g = nsajit_fp8_kv_gather_defaults();
  g.n = 1;
  g.cache = FAKE(const void*, 0);
  g.num_pages = 1;
  g.slots = FAKE(const int32_t*, 0);
  g.out = FAKE(void*, 0);
  g.out_row_stride = 100;
  EXPECT(nsajit_fp8_kv_gather(&g, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "argument out_row_stride = 100", NULL,
         NULL);

  /* JIT: names, sources and precompiling for an explicit arch need no GPU. */
  spec = nsajit_kernel_spec_defaults();
  spec.arch_sm = 90;
  spec.arch_suffix = 'a';
  spec.topk = 100;
  EXPECT(nsajit_kernel_name(&spec, text, sizeof text, &needed), NSAJIT_ERROR_INVALID_ARGUMENT, "topk", "100",
         NULL);
  spec.topk = 2048;
  EXPECT(nsajit_kernel_name(&spec, text, sizeof text, &needed), NSAJIT_OK, NULL, NULL, NULL);
  CHECK(strcmp(text, "topk.topk2048.sm_90a") == 0 || strstr(text, "topk") == text);
  CHECK(needed == strlen(text) + 1);
  EXPECT(nsajit_kernel_name(&spec, small, sizeof small, &needed), NSAJIT_ERROR_BUFFER_TOO_SMALL,
         "argument capacity = 4", "expected >=", NULL);
  CHECK(small[0] == '\0' && needed > sizeof small);
  EXPECT(nsajit_kernel_name(&spec, NULL, 16, &needed), NSAJIT_ERROR_INVALID_ARGUMENT, "buffer", NULL, NULL);
  EXPECT(nsajit_generate_source(&spec, text, sizeof text, &needed), NSAJIT_OK, NULL, NULL, NULL);
  CHECK(strlen(text) + 1 == needed && strlen(text) > 1000);
  /* precise: named when set; 0 or 1. */
  spec = nsajit_kernel_spec_defaults();
  spec.arch_sm = 90;
  spec.arch_suffix = 'a';
  spec.family = NSAJIT_FAMILY_SPARSE_MLA_DECODE;
  spec.h_q = 128;
  spec.kv_dtype = NSAJIT_KV_FP8_E4M3;
  CHECK(spec.precise == 0);
  spec.precise = 1;
  EXPECT(nsajit_kernel_name(&spec, text, sizeof text, &needed), NSAJIT_OK, NULL, NULL, NULL);
  CHECK(strstr(text, ".precise.sm_90a") != NULL);
  spec.struct_size = offsetof(nsajit_kernel_spec, reserved);
  EXPECT(nsajit_kernel_name(&spec, text, sizeof text, &needed), NSAJIT_ERROR_INVALID_ARGUMENT, "spec->struct_size",
         "expected >=", NULL);
  spec.struct_size = sizeof spec;
  spec.reserved = 1;
  EXPECT(nsajit_kernel_name(&spec, text, sizeof text, &needed), NSAJIT_ERROR_INVALID_ARGUMENT, "spec->reserved = 1",
         "expected 0", NULL);
  spec.reserved = 0;
  spec.precise = 2;
  EXPECT(nsajit_kernel_name(&spec, text, sizeof text, &needed), NSAJIT_ERROR_INVALID_ARGUMENT, "spec->precise = 2",
         "0 or 1", NULL);
  spec.family = 9;
  EXPECT(nsajit_precompile(&spec, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "spec->family = 9", NULL, NULL);
  /* topk_algorithm: named when not exact sweeps; checked. */
  spec = nsajit_kernel_spec_defaults();
  spec.arch_sm = 90;
  spec.arch_suffix = 'a';
  CHECK(spec.topk_algorithm == NSAJIT_TOPK_ALGORITHM_EXACT_SWEEPS);
  spec.threads = 256;
  spec.topk_algorithm = NSAJIT_TOPK_ALGORITHM_DENSE_REGISTERS;
  EXPECT(nsajit_kernel_name(&spec, text, sizeof text, &needed), NSAJIT_OK, NULL, NULL, NULL);
  CHECK(strcmp(text, "topk.topk2048.t256.dense_registers.sm_90a") == 0);
  spec.threads = 512;
  EXPECT(nsajit_kernel_name(&spec, text, sizeof text, &needed), NSAJIT_ERROR_INVALID_ARGUMENT, "threads = 512",
         "dense_registers", NULL);
  spec.topk_algorithm = 7;
  EXPECT(nsajit_kernel_name(&spec, text, sizeof text, &needed), NSAJIT_ERROR_INVALID_ARGUMENT,
         "spec->topk_algorithm = 7", "NSAJIT_TOPK_ALGORITHM_", NULL);
  spec = nsajit_kernel_spec_defaults();
  spec.arch_sm = 90;
  spec.arch_suffix = 'a';
  record.struct_size = 4;
  EXPECT(nsajit_precompile(&spec, &record), NSAJIT_ERROR_INVALID_ARGUMENT, "record_out->struct_size = 4", NULL,
         NULL);
  /* A spec as text reaches the variant fields nsajit_kernel_spec lacks (sparse MLA's schedule). */
  EXPECT(nsajit_precompile_text(NULL, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "spec_text", "null", NULL);
  EXPECT(nsajit_precompile_text("sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.bogus.sm_90a", NULL),
         NSAJIT_ERROR_INVALID_ARGUMENT, "bogus", NULL, NULL);
  EXPECT(nsajit_precompile_text("family=topk colour=3 arch=sm_90a", NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "colour",
         NULL, NULL);
  /* Without arch= the current device is asked only once the text parses: a bad field is named first. */
  EXPECT(nsajit_precompile_text("family=topk threds=512", NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "threds", NULL, NULL);
  EXPECT(nsajit_precompile_text("family=sparse_mla h_q=64 kernel=mma_sync producer_warps=67108856", NULL),
         NSAJIT_ERROR_INVALID_ARGUMENT, "producer_warps = 67108856", "[0, 24]", NULL);
  EXPECT(nsajit_precompile_text("family=topk sorted=7 arch=sm_90a", NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "sorted=7",
         "0 or 1", NULL);
  {
    char text_4096[4097];
    memset(text_4096, 'x', 4096);
    text_4096[4096] = '\0';
    EXPECT(nsajit_precompile_text(text_4096, NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "spec_text", "fewer than 4096 bytes",
           NULL);
  }
  EXPECT(nsajit_precompile_text("family=topk topk=2048 arch=sm_90a", &record), NSAJIT_ERROR_INVALID_ARGUMENT,
         "record_out->struct_size = 4", NULL, NULL);
  record.struct_size = sizeof record;
  EXPECT(nsajit_precompile_text("sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a", &record), NSAJIT_OK,
         NULL, NULL, NULL);
  CHECK(strcmp(record.name, "sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a") == 0);
  CHECK(record.on_disk == 1 && record.cubin_bytes > 0);
  EXPECT(nsajit_precompile_text("family=sparse_mla h_q=64 kernel=wgmma schedule=seesaw arch=sm_90a", &record),
         NSAJIT_OK, NULL, NULL, NULL);
  CHECK(strcmp(record.name, "sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a") == 0);
  CHECK(record.source != NSAJIT_SOURCE_COMPILED);
  EXPECT(nsajit_cache_dir(NULL, 0, &needed), NSAJIT_ERROR_BUFFER_TOO_SMALL, NULL, NULL, NULL);
  CHECK(needed > 1);
  EXPECT(nsajit_cache_dir(text, sizeof text, &needed), NSAJIT_OK, NULL, NULL, NULL);
  CHECK(strlen(text) + 1 == needed);
  CHECK(strcmp(nsajit_last_error(), "") == 0);
  EXPECT(nsajit_jit_record_count(&count), NSAJIT_OK, NULL, NULL, NULL);
  record.struct_size = sizeof record;
  EXPECT(nsajit_jit_record(count, &record), NSAJIT_ERROR_INVALID_ARGUMENT, "argument index", NULL, NULL);
  EXPECT(nsajit_jit_record_count(NULL), NSAJIT_ERROR_INVALID_ARGUMENT, "count_out", NULL, NULL);

  if (failures != 0) {
    fprintf(stderr, "%d C ABI check(s) failed\n", failures);
    return 1;
  }
  printf("C ABI: all checks passed\n");
  return 0;
}
