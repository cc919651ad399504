// Simulator functions whose adjacent same-typed arguments compiled swapped (done/total, step/size) take named
// fields: the old positional forms no longer compile and the named ones do (static_assert), and the named
// fields reach the right place. (cost_per_sample's price and rate: report_test.cpp.)
#include <catch2/catch.hpp>
#include <cstdint>
#include <string_view>

#include "safeamp/sim/datasets.hpp"
#include "safeamp/sim/file_data.hpp"
#include "safeamp/sim/progress.hpp"

using namespace safeamp::sim;

namespace {

template <typename... A>
constexpr bool progress_line_callable = requires(A... a) {
  render_progress_line(a...);
};
static_assert(!progress_line_callable<std::int64_t, std::int64_t, double, std::string_view, int>);
static_assert(progress_line_callable<progress_snapshot>);

template <typename Data, typename... A>
constexpr bool train_batch_callable = requires(const Data& d, A... a) {
  d.train_batch(a...);
};
static_assert(!train_batch_callable<cluster_data, std::int64_t, std::int64_t>);
static_assert(!train_batch_callable<corpus_data, std::int64_t, std::int64_t>);
static_assert(!train_batch_callable<file_data, std::int64_t, std::int64_t>);
static_assert(train_batch_callable<cluster_data, batch_request>);
static_assert(train_batch_callable<corpus_data, batch_request>);
static_assert(train_batch_callable<file_data, batch_request>);

}  // namespace

TEST_CASE("named batch fields: the step picks the batch, samples its size") {
  data_config d;
  d.train_samples = 64;
  const cluster_data data(mlp_shape{}, d);
  const batch a = data.train_batch({.step = 3, .samples = 5});
  const batch b = data.train_batch({.step = 5, .samples = 3});  // the swapped pair: another batch entirely
  CHECK(a.samples == 5);
  CHECK(a.features.rows() == 5);
  CHECK(b.samples == 3);
  CHECK(data.train_batch({.step = 3, .samples = 5}).features == a.features);  // a pure function of (seed, step)
  CHECK_FALSE(data.train_batch({.step = 4, .samples = 5}).features == a.features);
}
