// Per-stream state of an engine that several host threads may call: each stream gets its own slot, made on its
// first use, and every use of a slot runs under that slot's lock, so a reader (the engine's counters) never sees a
// slot that a run() is changing. A slot belongs to the stream a handle names, not to the handle's value: the
// per-thread default stream (cudaStreamPerThread) is a different stream on every host thread, so each thread gets
// its own slot (one workspace used by two threads' streams at once would be a data race on the device). Generic
// over the slot type and free of CUDA: gemm_engine keeps a workspace and a plan cache per stream in it; host-side
// tests use plain counters.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace safeamp::cuda {

/// The CUDA runtime's special stream handles (driver_types.h: cudaStreamLegacy is (cudaStream_t)0x1,
/// cudaStreamPerThread is (cudaStream_t)0x2; cuda_host_test compares them with the header).
inline constexpr std::uintptr_t legacy_stream_handle = 0x1;
inline constexpr std::uintptr_t per_thread_stream_handle = 0x2;

/// What a null stream handle names in the code that hands it to the CUDA runtime: the legacy default stream (one
/// for all threads; the default), or the calling thread's own default stream (code compiled with nvcc
/// --default-stream per-thread, or with CUDA_API_PER_THREAD_DEFAULT_STREAM defined).
enum class null_stream : unsigned char { legacy, per_thread };

/// Which stream a handle names; two keys are equal exactly when their handles name the same stream. The legacy
/// default stream (null under null_stream::legacy, or cudaStreamLegacy) is one stream for every thread: handle 0.
/// The per-thread default stream (cudaStreamPerThread, or null under null_stream::per_thread) carries the calling
/// thread's token. Any other handle (a created stream) names itself.
struct stream_key {
  std::uintptr_t handle = 0;  // 0: the legacy default stream
  std::uint64_t thread = 0;   // the calling thread's token for the per-thread default stream, else 0

  friend constexpr bool operator==(const stream_key&, const stream_key&) = default;
};

namespace detail {

/// A number for the calling host thread, unique for the life of the program: a later thread never gets the number of
/// one that ended (a std::thread::id may be reused), so it never inherits a slot whose workspace a GEMM queued by the
/// ended thread on its own default stream may still be using.
[[nodiscard]] inline std::uint64_t this_thread_token() noexcept {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t token = next.fetch_add(1, std::memory_order_relaxed);
  return token;
}

struct stream_key_hash {
  [[nodiscard]] std::size_t operator()(const stream_key& k) const noexcept {
    return std::hash<std::uintptr_t>{}(k.handle) ^ (std::hash<std::uint64_t>{}(k.thread) * 0x9E3779B97F4A7C15ull);
  }
};

}  // namespace detail

/// The key of `stream` (a cudaStream_t) as seen by the calling thread.
[[nodiscard]] inline stream_key key_of_stream(void* stream, null_stream null_means) noexcept {
  std::uintptr_t handle = reinterpret_cast<std::uintptr_t>(stream);
  if (handle == 0 && null_means == null_stream::per_thread) handle = per_thread_stream_handle;
  if (handle == legacy_stream_handle) handle = 0;
  if (handle == per_thread_stream_handle) return stream_key{.handle = handle, .thread = detail::this_thread_token()};
  return stream_key{.handle = handle};
}

template <class Slot>
class stream_slots {
 public:
  /// null_means: what a null handle passed to with_slot/erase names (the runtime semantics of the code that passes
  /// the handle on to CUDA).
  explicit stream_slots(null_stream null_means = null_stream::legacy) noexcept : null_means_(null_means) {}

  /// The key the calling thread's `stream` has here.
  [[nodiscard]] stream_key key_of(void* stream) const noexcept { return key_of_stream(stream, null_means_); }

  /// Runs use(slot) with the slot of `stream` (as the calling thread names it: key_of) locked and returns what it
  /// returns. The slot is made by make() on the stream's first use (under the map's lock, so two threads never make
  /// two slots for one stream); a throwing make() leaves no slot behind (the next use tries again).
  template <class Make, class Use>
  decltype(auto) with_slot(void* stream, Make&& make, Use&& use) {
    const stream_key key = key_of(stream);
    std::shared_ptr<entry> e;  // held for the use: an erase() meanwhile removes the slot from the map, not from here
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      auto it = slots_.find(key);
      if (it == slots_.end()) it = slots_.emplace(key, std::make_shared<entry>(std::forward<Make>(make)())).first;
      e = it->second;
    }
    const std::lock_guard<std::mutex> lock(e->mutex);
    return std::forward<Use>(use)(e->slot);
  }

  /// Calls visit(const Slot&) for every slot, each under its lock (the map locked throughout).
  template <class Visit>
  void for_each(Visit&& visit) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, e] : slots_) {
      const std::lock_guard<std::mutex> slot_lock(e->mutex);
      visit(static_cast<const Slot&>(e->slot));
    }
  }

  /// Streams with a slot (each thread's per-thread default stream counts once).
  [[nodiscard]] std::size_t size() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return slots_.size();
  }

  /// Drops the slot of `stream` as the calling thread names it (for cudaStreamPerThread: this thread's), if any
  /// (returns whether there was one); the stream's next use makes a new one. A use of the slot in progress on another
  /// thread keeps it alive until that use ends.
  bool erase(void* stream) {
    const stream_key key = key_of(stream);
    std::shared_ptr<entry> gone;  // destroyed after the map's lock is released
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = slots_.find(key);
    if (it == slots_.end()) return false;
    gone = std::move(it->second);
    slots_.erase(it);
    return true;
  }

  /// Drops every slot (the owner's destructor, once no thread uses the engine).
  void clear() {
    const std::lock_guard<std::mutex> lock(mutex_);
    slots_.clear();
  }

 private:
  struct entry {
    explicit entry(Slot s) : slot(std::move(s)) {}
    mutable std::mutex mutex;
    Slot slot;
  };
  null_stream null_means_;
  mutable std::mutex mutex_;
  std::unordered_map<stream_key, std::shared_ptr<entry>, detail::stream_key_hash> slots_;
};

}  // namespace safeamp::cuda
