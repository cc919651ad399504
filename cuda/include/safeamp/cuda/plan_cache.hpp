// A cache of per-shape GEMM plans (descriptors + the algorithm cuBLASLt's heuristic chose), so the
// heuristic query runs once per distinct problem. Generic over the plan type: host-side tests use it
// with a counting factory; gemm_engine stores its cuBLASLt plans in it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

#include "safeamp/cuda/gemm_problem.hpp"

namespace safeamp::cuda {

struct plan_cache_stats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;  // = plans created (heuristic queries)
  std::uint64_t entries = 0;

  friend constexpr bool operator==(const plan_cache_stats&, const plan_cache_stats&) = default;
};

template <class Plan, class Key = gemm_problem, class Hash = gemm_problem_hash>
class plan_cache {
 public:
  /// The plan for `key`, created by `make(key)` on the first request. A throwing factory leaves the cache
  /// unchanged (the next request tries again). References stay valid until clear().
  template <class Factory>
  Plan& get_or_create(const Key& key, Factory&& make) {
    if (auto it = plans_.find(key); it != plans_.end()) {
      ++hits_;
      return *it->second;
    }
    auto plan = std::make_unique<Plan>(std::forward<Factory>(make)(key));
    ++misses_;
    return *plans_.emplace(key, std::move(plan)).first->second;
  }

  [[nodiscard]] bool contains(const Key& key) const { return plans_.find(key) != plans_.end(); }
  [[nodiscard]] plan_cache_stats stats() const noexcept {
    return plan_cache_stats{hits_, misses_, static_cast<std::uint64_t>(plans_.size())};
  }
  void clear() noexcept { plans_.clear(); }

 private:
  std::unordered_map<Key, std::unique_ptr<Plan>, Hash> plans_;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
};

}  // namespace safeamp::cuda
