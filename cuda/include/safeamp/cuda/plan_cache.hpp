// A cache of per-shape GEMM plans (descriptors + the algorithm cuBLASLt's heuristic chose), so the
// heuristic query runs once per distinct problem and operand alignment. Generic over the plan type: host-side
// tests use it with a counting factory; gemm_engine keeps one cache of cuBLASLt plans per stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

#include "safeamp/cuda/gemm_problem.hpp"

namespace safeamp::cuda {

/// The largest power of two (at most 256 bytes, cuBLASLt's largest alignment requirement) dividing the
/// address; 256 for a null pointer (an absent operand constrains nothing).
[[nodiscard]] inline std::uint32_t pointer_alignment(const void* p) noexcept {
  constexpr std::uint32_t max_alignment = 256;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 1;
  while (align < max_alignment && (a & align) == 0) align <<= 1;
  return a == 0 ? max_alignment : align;
}

/// What a plan depends on: the problem and the alignment of each operand's pointer. An algorithm chosen for
/// 256-byte-aligned operands may need that alignment, so an operand at an offset into a larger buffer gets a
/// plan of its own (the heuristic is told the alignment: CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES).
struct plan_key {
  gemm_problem problem{};
  std::uint32_t align_a = 256, align_b = 256, align_c = 256, align_d = 256;
  friend constexpr bool operator==(const plan_key&, const plan_key&) = default;
};

[[nodiscard]] inline plan_key make_plan_key(const gemm_problem& p, const void* a, const void* b, const void* c,
                                            const void* d) noexcept {
  return plan_key{.problem = p,
                  .align_a = pointer_alignment(a),
                  .align_b = pointer_alignment(b),
                  .align_c = pointer_alignment(c),
                  .align_d = pointer_alignment(d)};
}

struct plan_key_hash {
  [[nodiscard]] std::size_t operator()(const plan_key& k) const noexcept {
    std::size_t h = gemm_problem_hash{}(k.problem);
    for (const std::uint32_t a : {k.align_a, k.align_b, k.align_c, k.align_d}) {
      h = (h ^ a) * static_cast<std::size_t>(0x100000001b3ull);
    }
    return h;
  }
};

struct plan_cache_stats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;  // = plans created (heuristic queries)
  std::uint64_t entries = 0;

  friend constexpr bool operator==(const plan_cache_stats&, const plan_cache_stats&) = default;
  plan_cache_stats& operator+=(const plan_cache_stats& o) noexcept {
    hits += o.hits;
    misses += o.misses;
    entries += o.entries;
    return *this;
  }
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
