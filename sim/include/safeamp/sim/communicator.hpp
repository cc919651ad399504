// The simulator's run-time communicator: an interface satisfying safeamp::rank_communicator, so one trainer
// binary runs on one rank (single_rank), on Open MPI ranks (sim/mpi/mpi_world.hpp, built when MPI is found)
// or on any other implementation of the concept (communicator_adapter, e.g. a thread group in the tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "safeamp/scaling/communicator.hpp"

namespace safeamp::sim {

class communicator {
 public:
  virtual ~communicator() = default;
  communicator() = default;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int size() const = 0;
  virtual std::int32_t max_i32(std::int32_t v) = 0;
  virtual std::uint64_t min_u64(std::uint64_t v) = 0;
  virtual std::uint64_t max_u64(std::uint64_t v) = 0;
  virtual void allgather(std::span<const std::byte> mine, std::span<std::byte> all) = 0;
};
static_assert(rank_communicator<communicator>);

/// One rank: every collective returns its own value.
class single_rank final : public communicator {
 public:
  [[nodiscard]] int rank() const override { return 0; }
  [[nodiscard]] int size() const override { return 1; }
  std::int32_t max_i32(std::int32_t v) override { return v; }
  std::uint64_t min_u64(std::uint64_t v) override { return v; }
  std::uint64_t max_u64(std::uint64_t v) override { return v; }
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) override {
    if (!mine.empty()) std::memcpy(all.data(), mine.data(), mine.size());
  }
};

/// Any rank_communicator behind the interface (held by reference).
template <rank_communicator C>
class communicator_adapter final : public communicator {
 public:
  explicit communicator_adapter(C& c) : c_(&c) {}
  [[nodiscard]] int rank() const override { return c_->rank(); }
  [[nodiscard]] int size() const override { return c_->size(); }
  std::int32_t max_i32(std::int32_t v) override { return c_->max_i32(v); }
  std::uint64_t min_u64(std::uint64_t v) override { return c_->min_u64(v); }
  std::uint64_t max_u64(std::uint64_t v) override { return c_->max_u64(v); }
  void allgather(std::span<const std::byte> mine, std::span<std::byte> all) override { c_->allgather(mine, all); }

 private:
  C* c_;
};

}  // namespace safeamp::sim
