// test_once_map.cpp — the runtime's build-once map (runtime/once_map.hpp): a capturing caller's
// CaptureError stays that caller's, other errors reach every waiter, before_wait guards the wait.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "nsajit/errors.hpp"
#include "runtime/once_map.hpp"

using nsajit::CaptureError;
using nsajit::detail::OnceMap;

namespace {

using Map = OnceMap<int, int, std::hash<int>>;

// Runs `get` of key 1 on a thread whose build blocks until released, then ends as `finish` says.
struct BlockedBuilder {
  std::promise<void> started, release;
  std::thread thread;
  std::exception_ptr error;
  int value = -1;

  template <class Finish>
  BlockedBuilder(Map& map, Finish finish) {
    auto released = release.get_future().share();
    thread = std::thread([this, &map, released, finish] {
      try {
        value = map.get(1, [&] {
          started.set_value();
          released.wait();
          return finish();
        }, [] {});
      } catch (...) {
        error = std::current_exception();
      }
    });
    REQUIRE(started.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  }
  void finish() {
    release.set_value();
    thread.join();
  }
};

// A waiter on key 1 (the builder above holds it); returns once it waits for that build.
std::future<int> waiter(Map& map, std::atomic<int>& builds, int result) {
  auto waiting = std::make_shared<std::promise<void>>();
  auto started = waiting->get_future();
  auto f = std::async(std::launch::async, [&map, &builds, result, waiting] {
    return map.get(1, [&] {
      ++builds;
      return result;
    }, [&] { waiting->set_value(); });
  });
  REQUIRE(started.wait_for(std::chrono::seconds(30)) == std::future_status::ready);  // never a hang
  return f;
}

}  // namespace

TEST_CASE("once map: a waiter handed another caller's CaptureError builds the value itself") {
  Map map;
  BlockedBuilder capturing(map, []() -> int { throw CaptureError("the builder's stream is capturing"); });
  CHECK_FALSE(map.ready(1));
  std::atomic<int> builds{0};
  std::future<int> other = waiter(map, builds, 7);
  capturing.finish();
  CHECK(other.get() == 7);
  CHECK(builds == 1);
  REQUIRE(capturing.error);
  CHECK_THROWS_AS(std::rethrow_exception(capturing.error), CaptureError);
  CHECK(map.ready(1));
  CHECK(map.get(1, [] { return 0; }, [] { throw std::logic_error("no wait on a built value"); }) == 7);
}

TEST_CASE("once map: another error reaches the waiters and is forgotten for later calls") {
  Map map;
  BlockedBuilder failing(map, []() -> int { throw std::runtime_error("compile failed"); });
  std::atomic<int> builds{0};
  std::future<int> other = waiter(map, builds, 1);
  failing.finish();
  CHECK_THROWS_AS(other.get(), std::runtime_error);
  CHECK(builds == 0);
  CHECK_FALSE(map.ready(1));
  CHECK(map.get(1, [] { return 5; }, [] {}) == 5);  // a later call builds again
  CHECK(map.ready(1));
}

TEST_CASE("once map: before_wait may refuse to wait for a build in flight") {
  Map map;
  BlockedBuilder slow(map, [] { return 3; });
  CHECK_THROWS_AS(map.get(1, [] { return 4; }, [] { throw CaptureError("this caller is capturing"); }),
                  CaptureError);
  slow.finish();
  CHECK(slow.value == 3);
  CHECK(map.get(1, [] { return 4; }, [] { throw CaptureError("not called: built"); }) == 3);
}
