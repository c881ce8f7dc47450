// test_generator.cpp — generated sources: deterministic, self-contained, parameterised (CPU only).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <set>
#include <string>

#include "generator/generator.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "tests/spec_matrix.hpp"

using namespace nsajit;

TEST_CASE("the same spec renders byte-identical source; different specs differ") {
  std::set<std::string> distinct;
  for (const KernelSpec& spec : test::deepseek_v32_matrix()) {
    const std::string a = render_source(spec);
    const std::string b = render_source(KernelSpec(spec));
    CHECK(a == b);
    CHECK(generate_source(spec) == a);
    distinct.insert(a);
  }
  CHECK(distinct.size() == test::deepseek_v32_matrix().size());
}

TEST_CASE("generated sources include no header and carry their parameters as constants") {
  for (const KernelSpec& spec : test::deepseek_v32_matrix()) {
    const std::string src = render_source(spec);
    INFO(readable_name(spec));
    CHECK(src.find("#include") == std::string::npos);
    CHECK(src.find("#pragma once") == std::string::npos);
    CHECK(src.find(fmt::format("#define NSAJIT_TOPK {}\n", spec.topk)) != std::string::npos);
    CHECK(src.find(canonical_text(spec)) != std::string::npos);
    if (spec.family == Family::sparse_mla_decode)
      CHECK(src.find(fmt::format("#define NSAJIT_H_Q {}\n", spec.h_q)) != std::string::npos);
    if (spec.family == Family::index_transform)
      CHECK(src.find(fmt::format("#define NSAJIT_PAGE_SIZE {}\n", spec.page_size)) != std::string::npos);
  }
}

TEST_CASE("rendering an invalid spec throws before generating anything") {
  CHECK_THROWS_AS(render_source({.family = Family::sparse_mla_decode, .h_q = 48}), InvalidArgument);
  CHECK_THROWS_AS(render_source({.family = Family::topk, .topk = 0}), InvalidArgument);
}
