// The data-parallel settings in a run's manifest (run_settings): each refuses where it changes numbers and
// nowhere else. micro_batches changes the reference's bits (shared: refuses a lock and a candidate); the
// reduction is the run's own numerics (reference_only: refuses a lock, a candidate may differ), carrying the
// rank count only where the bits depend on it (a wire reduction: each rank rounds its own sum); the canonical
// fp32 reduction's bits are the same for any N (data_parallel_test.cpp checks it), so N is not a setting then.
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "../report/report_fixtures.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/run_config.hpp"
#include "safeamp/sim/scenario.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

constexpr const char* scenario_json = R"({"name": "dp", "model": {"kind": "mlp", "input_dim": 8, "hidden_dim": 16,
  "hidden_layers": 1, "classes": 4}, "data": {"train_samples": 256, "eval_samples": 64, "probe_rows": 4},
  "training": {"steps": 4, "batch_size": 16},
  "candidates": [{"name": "fp16", "policy": "fp16-mixed",
                  "faults": [{"kind": "gradient_inf", "steps": [2]}]}],
  "data_parallel": {"micro_batches": 4}})";

const scenario& dp_scenario() {
  static const scenario s = parse_scenario(scenario_json, "test");
  return s;
}

data_parallel_setup setup(std::int64_t ranks, std::int64_t micro_batches, const char* reduction,
                          std::int64_t fault_micro_batch = 0) {
  return {.ranks = ranks,
          .config = {.micro_batches = micro_batches,
                     .reduction = parse_reduce_spec(reduction, "reduction"),
                     .fault_micro_batch = fault_micro_batch}};
}

run_manifest reference_with(const data_parallel_setup& dp) {
  run_config c = reference_config(dp_scenario());
  c.data_parallel = dp;
  return manifest_for(dp_scenario(), c);
}

run_manifest candidate_with(const data_parallel_setup& dp) {
  run_config c = candidate_config(dp_scenario(), dp_scenario().candidates.front());
  c.data_parallel = dp;
  return manifest_for(dp_scenario(), c);
}

const manifest_setting* find(const run_manifest& m, const std::string& field) {
  for (const manifest_setting& s : m.settings) {
    if (s.field == field) return &s;
  }
  return nullptr;
}

std::string refusal(const run_manifest& a, const run_manifest& b, manifest_check check) {
  try {
    require_matching_manifest(a, b, check);
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a data-parallel run lists its settings with their scopes; a plain run lists none", "[data_parallel]") {
  const run_manifest m = reference_with(setup(2, 4, "fp32"));
  const manifest_setting* k = find(m, "data_parallel.micro_batches");
  const manifest_setting* r = find(m, "data_parallel.reduction");
  REQUIRE(k != nullptr);
  REQUIRE(r != nullptr);
  CHECK(k->value == "4");
  CHECK(k->scope == manifest_scope::shared);
  CHECK(r->value == "fp32");  // no rank count: the canonical sum's bits do not depend on it
  CHECK(r->scope == manifest_scope::reference_only);
  CHECK(find(m, "data_parallel.fault_micro_batch") == nullptr);  // the reference injects no gradient fault
  CHECK(find(m, "data_parallel.exit_rank") == nullptr);

  const run_manifest wire = reference_with(setup(4, 4, "fp16-wire/8"));
  REQUIRE(find(wire, "data_parallel.reduction") != nullptr);
  CHECK(find(wire, "data_parallel.reduction")->value == "fp16-wire/8 ranks=4");

  const run_manifest plain = manifest_for(dp_scenario(), reference_config(dp_scenario()));
  for (const manifest_setting& s : plain.settings) CHECK(s.field.rfind("data_parallel.", 0) != 0);
}

TEST_CASE("a lock refuses a run with other micro-batches, reduction or wire rank count", "[data_parallel]") {
  const run_manifest locked = reference_with(setup(2, 4, "fp32"));
  // The canonical reduction: the same manifest for every rank count, so the lock is reused (the bits match).
  for (const std::int64_t n : {1, 2, 4}) {
    CHECK(compare_manifests(locked, reference_with(setup(n, 4, "fp32")), manifest_check::reuse).empty());
  }
  CHECK_THAT(refusal(locked, reference_with(setup(2, 2, "fp32")), manifest_check::reuse),
             Catch::Contains("data_parallel.micro_batches: reference '4', now '2'"));
  CHECK_THAT(refusal(locked, reference_with(setup(2, 4, "bf16-ring")), manifest_check::reuse),
             Catch::Contains("data_parallel.reduction: reference 'fp32', now 'bf16-ring ranks=2'"));
  // A wire reduction's bits depend on N: a lock made on 2 ranks refuses 4.
  const run_manifest ring2 = reference_with(setup(2, 4, "bf16-ring"));
  CHECK(refusal(ring2, reference_with(setup(2, 4, "bf16-ring")), manifest_check::reuse).empty());
  CHECK_THAT(refusal(ring2, reference_with(setup(4, 4, "bf16-ring")), manifest_check::reuse),
             Catch::Contains("data_parallel.reduction: reference 'bf16-ring ranks=2', now 'bf16-ring ranks=4'"));
  CHECK_THAT(refusal(locked, reference_with(setup(2, 4, "fp16-wire")), manifest_check::reuse),
             Catch::Contains("data_parallel.reduction"));
  CHECK_THAT(refusal(reference_with(setup(2, 4, "fp16-wire")), reference_with(setup(2, 4, "fp16-wire/4")),
                     manifest_check::reuse),
             Catch::Contains("reference 'fp16-wire ranks=2', now 'fp16-wire/4 ranks=2'"));
  // A plain run's lock is not a data-parallel run's, and the other way round.
  const run_manifest plain = manifest_for(dp_scenario(), reference_config(dp_scenario()));
  CHECK_THAT(refusal(plain, locked, manifest_check::reuse), Catch::Contains("data_parallel.micro_batches"));
  CHECK_THAT(refusal(locked, plain, manifest_check::reuse), Catch::Contains("data_parallel.micro_batches"));
}

TEST_CASE("a candidate may reduce in a wire format on any rank count, not with other micro-batches",
          "[data_parallel]") {
  const run_manifest reference = reference_with(setup(2, 4, "fp32"));
  for (const char* reduction : {"fp32", "bf16-wire", "bf16-ring", "e4m3-tree", "fp16-wire/8"}) {
    for (const std::int64_t n : {1, 2, 4}) {
      INFO(reduction << " on " << n << " ranks");
      CHECK(refusal(reference, candidate_with(setup(n, 4, reduction)), manifest_check::candidate).empty());
    }
  }
  CHECK_THAT(refusal(reference, candidate_with(setup(2, 2, "fp32")), manifest_check::candidate),
             Catch::Contains("data_parallel.micro_batches: reference '4', candidate '2'"));
  // The candidate injects a gradient fault: the part it lands in is listed, with the faults' scope.
  const run_manifest faulted = candidate_with(setup(2, 4, "fp32", 3));
  REQUIRE(find(faulted, "data_parallel.fault_micro_batch") != nullptr);
  CHECK(find(faulted, "data_parallel.fault_micro_batch")->value == "3");
  CHECK(find(faulted, "data_parallel.fault_micro_batch")->scope == manifest_scope::reference_only);
  CHECK(refusal(reference, faulted, manifest_check::candidate).empty());
  CHECK_THAT(refusal(candidate_with(setup(2, 4, "fp32", 1)), faulted, manifest_check::reuse),
             Catch::Contains("data_parallel.fault_micro_batch: reference '1', now '3'"));
}

TEST_CASE("a locked reference keeps its data-parallel settings through the file", "[data_parallel]") {
  const run_result run = fixtures::make_run("fp32 reference", 4, 1.0, 0.0);
  const run_manifest m = reference_with(setup(4, 4, "bf16-tree/2"));
  const std::string file = "dp_manifest_test_reference.json";
  write_reference(file, lock_reference(run, m));
  const locked_reference back = read_reference(file);
  std::remove(file.c_str());
  CHECK(compare_manifests(back.manifest, m, manifest_check::reuse).empty());
  REQUIRE(find(back.manifest, "data_parallel.reduction") != nullptr);
  CHECK(find(back.manifest, "data_parallel.reduction")->value == "bf16-tree/2 ranks=4");
  CHECK_THAT(refusal(back.manifest, reference_with(setup(4, 4, "bf16-tree")), manifest_check::reuse),
             Catch::Contains("data_parallel.reduction"));
}

TEST_CASE("run_config validates its data-parallel setup", "[data_parallel]") {
  run_config c = reference_config(dp_scenario());
  c.data_parallel = setup(2, 4, "fp32");
  CHECK_NOTHROW(validate(c));
  c.data_parallel = setup(0, 4, "fp32");
  CHECK_THROWS_WITH(validate(c), Catch::Contains("data_parallel ranks is 0"));
  c.data_parallel = setup(8, 4, "fp32");
  CHECK_THROWS_WITH(validate(c), Catch::Contains("at most data_parallel.micro_batches = 4"));
  c.data_parallel = setup(2, 3, "fp32");
  CHECK_THROWS_WITH(validate(c), Catch::Contains("divisor of the batch size 16"));
}
