// bench_sparse_mla.cpp — placeholder until the family's benchmark lands (being written).
#include "nsajit/errors.hpp"
#include "tools/bench/bench_common.hpp"

namespace nsajit::tools::bench {
int bench_sparse_mla(const BenchOptions&) { throw Error("nsajit bench: this family's benchmark is not implemented yet"); }
}  // namespace nsajit::tools::bench
