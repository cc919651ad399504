// Per-stream state of an engine that several host threads may call: each stream (a cudaStream_t as void*) gets
// its own slot, made on its first use, and every use of a slot runs under that slot's lock, so a reader (the
// engine's counters) never sees a slot that a run() is changing. Generic over the slot type and free of CUDA:
// gemm_engine keeps a workspace and a plan cache per stream in it; host-side tests use plain counters.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace safeamp::cuda {

template <class Slot>
class stream_slots {
 public:
  /// Runs use(slot) with the slot of `stream` locked and returns what it returns. The slot is made by make()
  /// on the stream's first use (under the map's lock, so two threads never make two slots for one stream);
  /// a throwing make() leaves no slot behind (the next use tries again).
  template <class Make, class Use>
  decltype(auto) with_slot(void* stream, Make&& make, Use&& use) {
    std::shared_ptr<entry> e;  // held for the use: an erase() meanwhile removes the slot from the map, not from here
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      auto it = slots_.find(stream);
      if (it == slots_.end()) it = slots_.emplace(stream, std::make_shared<entry>(std::forward<Make>(make)())).first;
      e = it->second;
    }
    const std::lock_guard<std::mutex> lock(e->mutex);
    return std::forward<Use>(use)(e->slot);
  }

  /// Calls visit(const Slot&) for every slot, each under its lock (the map locked throughout).
  template <class Visit>
  void for_each(Visit&& visit) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [stream, e] : slots_) {
      const std::lock_guard<std::mutex> slot_lock(e->mutex);
      visit(static_cast<const Slot&>(e->slot));
    }
  }

  /// Streams with a slot.
  [[nodiscard]] std::size_t size() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return slots_.size();
  }

  /// Drops the slot of `stream`, if any (returns whether there was one); the stream's next use makes a new one. A
  /// use of the slot in progress on another thread keeps it alive until that use ends.
  bool erase(void* stream) {
    std::shared_ptr<entry> gone;  // destroyed after the map's lock is released
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = slots_.find(stream);
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
  mutable std::mutex mutex_;
  std::unordered_map<void*, std::shared_ptr<entry>> slots_;
};

}  // namespace safeamp::cuda
