// test_spec.cpp — spec validation messages, canonical text, readable names (CPU only).
#include <doctest/doctest.h>

#include <string>

#include "generator/family.hpp"
#include "generator/generator.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/spec.hpp"
#include "templates/kernel_params.h"

using namespace nsajit;

namespace {

// The message of the InvalidArgument that validate() throws for `spec` ("" if none).
std::string validation_error(const KernelSpec& spec) {
  try {
    validate(with_default_tile(spec));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

KernelSpec sparse(int h_q, int topk = 2048) {
  return {.family = Family::sparse_mla_decode, .h_q = h_q, .topk = topk};
}

// A bf16 wgmma spec at 64 heads per CTA, the only combination the seesaw schedule supports.
KernelSpec seesaw(int h_q, int topk = 2048) {
  KernelSpec s = sparse(h_q, topk);
  s.tile = {.threads = 384, .block_tokens = 64, .heads_per_cta = 64, .kernel = MlaKernel::wgmma,
            .producer_warps = 4, .schedule = MlaSchedule::seesaw};
  return s;
}

bool has(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("valid specs of the DeepSeek-V3.2 matrix pass validation") {
  for (int h_q : {16, 32, 64, 128})
    for (int topk : {512, 1024, 2048}) CHECK(validation_error(sparse(h_q, topk)) == "");
  for (int topk : {512, 1024, 2048, 4096}) CHECK(validation_error({.family = Family::topk, .topk = topk}) == "");
  for (int ps : {1, 64})
    CHECK(validation_error({.family = Family::index_transform, .page_size = ps}) == "");
}

TEST_CASE("validation names the bad field, its value and what is allowed") {
  const std::string h = validation_error(sparse(24));
  CHECK(h.find("h_q") != std::string::npos);
  CHECK(h.find("24") != std::string::npos);
  CHECK(h.find("128") != std::string::npos);  // the allowed values are listed

  const std::string k = validation_error({.family = Family::topk, .topk = 100});
  CHECK(k.find("topk") != std::string::npos);
  CHECK(k.find("100") != std::string::npos);
  CHECK(k.find("multiple of 64") != std::string::npos);

  CHECK(validation_error({.family = Family::topk, .topk = 8192}).find("8192") != std::string::npos);
  CHECK(validation_error({.family = Family::index_transform, .page_size = 0}).find("page_size = 0") != std::string::npos);

  // Fields a family does not use must keep their defaults (one kernel, one spec).
  const std::string unused = validation_error({.family = Family::topk, .page_size = 64});
  CHECK(unused.find("page_size = 64") != std::string::npos);
  CHECK(unused.find("does not use") != std::string::npos);
  CHECK(validation_error({.family = Family::topk, .h_q = 16}).find("h_q = 16") != std::string::npos);
  KernelSpec bf16_scores = sparse(16);
  bf16_scores.score_dtype = ScoreDtype::bf16;
  CHECK(validation_error(bf16_scores).find("score_dtype = 1") != std::string::npos);
  CHECK(validation_error({.family = Family::topk, .score_dtype = static_cast<ScoreDtype>(5)}).find(
            "score_dtype = 5: expected fp32 (0) or bf16 (1)") != std::string::npos);

  // The top-k algorithm: top-k only, a known value, at the thread counts its kernel exists for.
  KernelSpec mla_algorithm = sparse(16);
  mla_algorithm.tile.algorithm = TopkAlgorithm::cluster_lists;
  CHECK(validation_error(mla_algorithm).find("algorithm = 4") != std::string::npos);
  CHECK(with_default_tile({.family = Family::topk, .tile = {.algorithm = TopkAlgorithm::dense_registers}}).tile.threads ==
        256);
  CHECK(validation_error({.family = Family::topk, .tile = {.threads = 512, .algorithm = TopkAlgorithm::dense_registers}})
            .find("threads = 512: expected 256 for algorithm dense_registers") != std::string::npos);
  CHECK(validation_error({.family = Family::topk, .tile = {.threads = 256, .algorithm = TopkAlgorithm::cluster_lists}})
            .find("threads = 256: expected 512 or 1024 for algorithm cluster_lists") != std::string::npos);
  CHECK(validation_error({.family = Family::topk, .tile = {.threads = 512, .algorithm = static_cast<TopkAlgorithm>(9)}})
            .find("algorithm = 9: expected exact_sweeps, cluster_sweeps") != std::string::npos);
  CHECK(to_string(parse_topk_algorithm("speculative_sweep")) == "speculative_sweep");
  CHECK_THROWS_WITH_AS(parse_topk_algorithm("lists"), doctest::Contains("\"lists\": expected exact_sweeps"),
                       InvalidArgument);

  KernelSpec threads = sparse(16);
  threads.tile.threads = 100;
  CHECK(validation_error(threads).find("threads = 100") != std::string::npos);

  // FP8 wgmma at 16 heads per CTA: the heads are named, not the producer warps they imply.
  KernelSpec fp8_wgmma = sparse(128);
  fp8_wgmma.kv_dtype = KvDtype::fp8_e4m3;
  fp8_wgmma.tile = {.heads_per_cta = 16, .kernel = MlaKernel::wgmma, .producer_warps = 8};
  CHECK(validation_error(fp8_wgmma).find("field heads_per_cta = 16: expected 64 for kernel wgmma with FP8 KV") !=
        std::string::npos);
  fp8_wgmma.tile = {.heads_per_cta = 64, .kernel = MlaKernel::wgmma, .producer_warps = 4};
  CHECK(validation_error(fp8_wgmma).find("field producer_warps = 4: expected 8 for kernel wgmma with FP8 KV") !=
        std::string::npos);

  KernelSpec old_arch = sparse(16);
  old_arch.arch = {70, 0};
  CHECK(validation_error(old_arch).find("arch.sm = 70") != std::string::npos);
}

TEST_CASE("arch text round-trips and bad arch text is rejected") {
  CHECK(to_string(parse_arch("sm_90a")) == "sm_90a");
  CHECK(to_string(parse_arch("90")) == "sm_90");
  CHECK(to_string(parse_arch("sm_100f")) == "sm_100f");
  CHECK_THROWS_WITH_AS(parse_arch("sm90x"), doctest::Contains("sm90x"), InvalidArgument);
  CHECK_THROWS_AS(parse_arch("sm_75"), InvalidArgument);
  CHECK_THROWS_WITH_AS(parse_arch("sm_80"), doctest::Contains("Hopper"), InvalidArgument);
  CHECK_THROWS_AS(parse_arch(""), InvalidArgument);
}

TEST_CASE("readable names are stable and carry only the fields the family uses") {
  CHECK(readable_name(sparse(16)) == "sparse_mla.h16.topk2048.kv_bf16.mma_sync.hpc16.pw2.sm_90a");
  CHECK(readable_name({.family = Family::topk}) == "topk.topk2048.sm_90a");
  CHECK(readable_name({.family = Family::index_transform, .page_size = 64}) ==
        "index_transform.decode.ps64.topk2048.sm_90a");
  KernelSpec tiled = sparse(64);
  tiled.tile.threads = 128;
  CHECK(readable_name(tiled).find(".mma_sync.hpc64.pw0") != std::string::npos);  // variants are named
  CHECK(readable_name({.family = Family::topk, .tile = {.threads = 1024}}) == "topk.topk2048.t1024.sm_90a");
  CHECK(readable_name({.family = Family::topk, .score_dtype = ScoreDtype::bf16}) == "topk.topk2048.scores_bf16.sm_90a");
  CHECK(readable_name({.family = Family::topk, .tile = {.threads = 256, .algorithm = TopkAlgorithm::dense_registers}}) ==
        "topk.topk2048.t256.dense_registers.sm_90a");
  CHECK(readable_name({.family = Family::topk, .tile = {.algorithm = TopkAlgorithm::cluster_lists}}) ==
        "topk.topk2048.cluster_lists.sm_90a");  // 512 threads: the default
  KernelSpec other_arch = sparse(16);
  other_arch.arch = {100, 'a'};
  CHECK(readable_name(other_arch) == "sparse_mla.h16.topk2048.kv_bf16.mma_sync.hpc16.pw2.sm_100a");
}

TEST_CASE("canonical text lists every field and separates different specs") {
  const KernelSpec a = with_default_tile(sparse(16));
  const std::string text = canonical_text(a);
  for (const char* field : {"family=sparse_mla", "h_q=16", "topk=2048", "page_size=1", "mode=decode",
                            "kv_dtype=bf16", "next_n=1", "fused_transform=0", "sorted=0", "precise=0", "score_dtype=fp32", "threads=", "block_tokens=", "heads_per_cta=", "kernel=mma_sync", "producer_warps=2", "algorithm=exact_sweeps",
                            "arch=sm_90a"})
    CHECK(text.find(field) != std::string::npos);
  CHECK(canonical_text(a) == canonical_text(with_default_tile(sparse(16))));
  CHECK(canonical_text(a) != canonical_text(with_default_tile(sparse(32))));
  CHECK(KernelSpecHash{}(a) == KernelSpecHash{}(with_default_tile(sparse(16))));
  CHECK(KernelSpecHash{}(a) != KernelSpecHash{}(with_default_tile(sparse(32))));
  KernelSpec precise = a;
  precise.precise = true;
  CHECK(canonical_text(precise) != canonical_text(a));
  CHECK(KernelSpecHash{}(precise) != KernelSpecHash{}(a));
  const KernelSpec topk = with_default_tile({.family = Family::topk});
  KernelSpec lists = topk;
  lists.tile.algorithm = TopkAlgorithm::cluster_lists;
  CHECK(canonical_text(lists) != canonical_text(topk));
  CHECK(canonical_text(lists).find("algorithm=cluster_lists") != std::string::npos);
  CHECK(KernelSpecHash{}(lists) != KernelSpecHash{}(topk));
}

TEST_CASE("the seesaw schedule: a named field, its combinations checked, its own kernel") {
  CHECK(to_string(MlaSchedule::single) == "single");
  CHECK(to_string(MlaSchedule::seesaw) == "seesaw");
  CHECK(readable_name(seesaw(64)) == "sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a");
  KernelSpec single = seesaw(64);
  single.tile.schedule = MlaSchedule::single;
  CHECK(readable_name(single) == "sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.sm_90a");  // unchanged
  CHECK(has(canonical_text(seesaw(64)), "schedule=seesaw"));
  CHECK(has(canonical_text(single), "schedule=single"));
  CHECK(canonical_text(seesaw(64)) != canonical_text(single));
  CHECK(KernelSpecHash{}(seesaw(64)) != KernelSpecHash{}(single));
  CHECK(validation_error(single) == "");
  CHECK(with_default_tile(sparse(64)).tile.schedule == MlaSchedule::single);  // not the default

  // Unsupported combinations name the field, its value and what is allowed.
  KernelSpec fp8 = seesaw(64);
  fp8.kv_dtype = KvDtype::fp8_e4m3;
  fp8.tile.producer_warps = 8;
  fp8.tile.threads = 512;
  CHECK(has(validation_error(fp8), "field kv_dtype = fp8: expected bf16 for schedule seesaw"));
  KernelSpec precise = seesaw(64);
  precise.precise = true;
  CHECK(has(validation_error(precise), "field precise = 1: expected 0 for schedule seesaw"));
  KernelSpec hpc32 = seesaw(64);
  hpc32.tile.heads_per_cta = 32;
  CHECK(has(validation_error(hpc32), "field heads_per_cta = 32: expected 64 for schedule seesaw"));
  CHECK(has(validation_error(seesaw(64, 576)), "field topk = 576: expected a multiple of 128 for schedule seesaw"));
  KernelSpec mma = sparse(64);
  mma.tile = {.kernel = MlaKernel::mma_sync, .producer_warps = 0, .schedule = MlaSchedule::seesaw};
  CHECK(has(validation_error(mma), "field schedule = seesaw: expected single for kernel mma_sync"));
  // The topk family does not read the field.
  CHECK(has(validation_error({.family = Family::topk, .tile = {.schedule = MlaSchedule::seesaw}}),
            "field schedule = 1: expected 0 (the topk family does not use it)"));

  // Every supported combination is accepted and renders templates/sparse_mla_seesaw.cuh with its
  // own shared-memory plan.
  for (int h_q : {64, 128})
    for (int topk : {128, 512, 2048}) {
      CHECK(validation_error(seesaw(h_q, topk)) == "");
      CHECK(has(render_source(seesaw(h_q, topk)), "BAR_P1_READY"));  // sparse_mla_seesaw.cuh
      CHECK(traits(Family::sparse_mla).max_dynamic_smem(seesaw(h_q, topk)) == sparse_mla_seesaw_smem_bytes());
    }
  CHECK(!has(render_source(single), "BAR_P1_READY"));
  CHECK(traits(Family::sparse_mla).max_dynamic_smem(single) == sparse_mla_wgmma_smem_bytes());
}

TEST_CASE("the cluster combine: a named field, the seesaw only, its own kernel") {
  auto cluster = [](int h_q) {
    KernelSpec s = seesaw(h_q);
    s.tile.combine = MlaCombine::cluster;
    return with_default_tile(s);
  };
  CHECK(to_string(MlaCombine::kernel) == "kernel");
  CHECK(to_string(MlaCombine::cluster) == "cluster");
  CHECK(readable_name(cluster(64)) == "sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.cluster_combine.sm_90a");
  KernelSpec plain = cluster(64);
  plain.tile.combine = MlaCombine::kernel;
  CHECK(readable_name(plain) == "sparse_mla.h64.topk2048.kv_bf16.wgmma.hpc64.pw4.seesaw.sm_90a");
  CHECK(has(canonical_text(cluster(64)), "combine=cluster"));
  CHECK(has(canonical_text(plain), "combine=kernel"));
  CHECK(KernelSpecHash{}(cluster(64)) != KernelSpecHash{}(plain));
  CHECK(with_default_tile(sparse(64)).tile.combine == MlaCombine::kernel);  // not a spec's default
  // Both printed forms read back to the spec.
  CHECK(parse_spec_text(readable_name(cluster(128))) == cluster(128));
  CHECK(parse_spec_text(canonical_text(cluster(64))) == cluster(64));
  CHECK(has(render_source(cluster(64)), "#define NSAJIT_CLUSTER_COMBINE 1"));
  CHECK(has(render_source(plain), "#define NSAJIT_CLUSTER_COMBINE 0"));
  CHECK(validation_error(cluster(64)) == "");
  CHECK(validation_error(cluster(128)) == "");

  // Unsupported combinations name the field, its value and what is allowed.
  KernelSpec single = cluster(64);
  single.tile.schedule = MlaSchedule::single;
  CHECK(has(validation_error(single), "field combine = cluster: expected kernel for schedule single"));
  KernelSpec mma = sparse(64);
  mma.tile = {.heads_per_cta = 16, .kernel = MlaKernel::mma_sync, .combine = MlaCombine::cluster};
  CHECK(has(validation_error(with_default_tile(mma)), "field combine = cluster: expected kernel for schedule single"));
  CHECK(has(validation_error({.family = Family::topk, .tile = {.combine = MlaCombine::cluster}}),
            "field combine = 1: expected 0 (the topk family does not use it)"));
  CHECK_THROWS_WITH_AS(parse_spec_text("family=sparse_mla h_q=16 combine=tree"), doctest::Contains("kernel or cluster"),
                       InvalidArgument);
}
