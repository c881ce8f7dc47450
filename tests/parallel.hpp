// parallel.hpp — runs a test's independent compiles on every core: they dominate the suite's time
// (sequentially, ~90 s of its ~280 s on the H200's host). NVRTC and the runtime's cache are
// thread-safe; the callers keep doctest's assertions on their own thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace nsajit::test {

template <class Result>
struct Outcome {
  Result value{};
  std::string error;  // the exception's message when work threw (then value is default)
};

// work(i) for every i in [0, n), on max(2, hardware threads) threads; outcome i is its result.
template <class Result, class Work>
std::vector<Outcome<Result>> run_in_parallel(std::size_t n, Work work) {
  std::vector<Outcome<Result>> outcomes(n);
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i; (i = next++) < n;) {
      try {
        outcomes[i].value = work(i);
      } catch (const std::exception& e) {
        outcomes[i].error = e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return outcomes;
}

}  // namespace nsajit::test
