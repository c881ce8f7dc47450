// once_map.hpp — values built once per key, shared by threads (the runtime's cubin and kernel maps).
#pragma once

#include <chrono>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "nsajit/errors.hpp"

namespace nsajit::detail {

// A map whose values are built once per key: concurrent callers of one key wait for the first
// builder; other keys never wait behind a build (the lock is not held while building). A build
// that throws is forgotten, so a later call retries. Before waiting for another caller's build,
// `before_wait` may throw (a capturing caller must not stall on a compile); a waiter handed that
// builder's CaptureError (its stream's, not the waiter's) builds again itself.
template <class Key, class Value, class Hash>
class OnceMap {
 public:
  template <class Build, class BeforeWait>
  const Value& get(const Key& key, Build&& build, BeforeWait&& before_wait) {
    for (;;) {
      std::shared_future<Value> future;
      std::promise<Value> promise;
      bool builder = false;
      {
        std::shared_lock lock(mutex_);  // the common case: built long ago
        if (auto it = map_.find(key); it != map_.end()) future = it->second;
      }
      if (!future.valid()) {
        std::unique_lock lock(mutex_);
        if (auto it = map_.find(key); it != map_.end()) {
          future = it->second;
        } else {
          future = promise.get_future().share();
          map_.emplace(key, future);
          builder = true;
        }
      }
      if (builder) {
        try {
          promise.set_value(build());
        } catch (...) {
          promise.set_exception(std::current_exception());
          std::unique_lock relock(mutex_);
          map_.erase(key);
        }
        return future.get();
      }
      if (future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) before_wait();
      try {
        return future.get();
      } catch (const CaptureError&) {
        // another caller's capture: not this caller's error
      }
    }
  }

  // Whether key's value is built (not in flight, not failed).
  bool ready(const Key& key) {
    std::shared_lock lock(mutex_);
    const auto it = map_.find(key);
    return it != map_.end() && it->second.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

 private:
  std::shared_mutex mutex_;
  std::unordered_map<Key, std::shared_future<Value>, Hash> map_;
};

}  // namespace nsajit::detail
