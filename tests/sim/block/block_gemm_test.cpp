// Block-scaled GEMM inputs in the simulator (issue 16). The emulated GEMM with MXFP8 / NVFP4 inputs equals,
// bit for bit, op(A) quantized along its rows and op(B) down its columns by the scalar reference
// (quantize_blocks_reference) followed by the documented fp32 accumulation order; transposed operands give the
// same bits; a non-fp32 accumulation is refused. Then scenarios/mx-quick.json trains an MLP with MXFP8 and
// NVFP4 matmuls and the parity gate gives each candidate a verdict that meets the scenario's expectation.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/format.hpp"
#include "safeamp/policy.hpp"
#include "safeamp/sim/gemm.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/parity.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/report_files.hpp"
#include "safeamp/sim/scenario.hpp"
#include "safeamp/sim/tensor.hpp"
#include "safeamp/sim/trainer.hpp"

using namespace safeamp;
using namespace safeamp::sim;

namespace {

std::uint32_t bits_of(float x) { return safeamp::bit_cast<std::uint32_t>(x); }

matrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t stream) {
  matrix m(rows, cols);
  init_normal(m, 1.0, 42, stream, fp32);
  return m;
}

// The reference: quantize a (M, K) along rows and b (K, N) down columns with the scalar routine, then
// d(i, j) = sum over k in order of fl(a'(i, k) b'(k, j)), one float addition at a time.
matrix expected_product(const block_format& blocks, const matrix& a, const matrix& b) {
  const std::size_t m = static_cast<std::size_t>(a.rows()), k = static_cast<std::size_t>(a.cols());
  const std::size_t n = static_cast<std::size_t>(b.cols());
  std::vector<float> av(a.data(), a.data() + m * k), bv(b.data(), b.data() + k * n);
  std::vector<float> aq(av.size()), bq(bv.size()), scales(m * k + k * n);
  (void)quantize_blocks_reference(blocks, av, aq, scales, {.rows = m, .axis = block_axis::rows});
  (void)quantize_blocks_reference(blocks, bv, bq, scales, {.rows = k, .axis = block_axis::columns});
  matrix d(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(n));
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::size_t kk = 0; kk < k; ++kk) {
        const float product = aq[i * k + kk] * bq[kk * n + j];
        acc = acc + product;
      }
      d(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = acc;
    }
  }
  return d;
}

int mismatches(const matrix& got, const matrix& want) {
  int bad = 0;
  for (Eigen::Index i = 0; i < want.rows(); ++i) {
    for (Eigen::Index j = 0; j < want.cols(); ++j) bad += bits_of(got(i, j)) != bits_of(want(i, j));
  }
  return bad;
}

}  // namespace

TEST_CASE("a block-scaled GEMM is quantize-along-K then the fp32 accumulation order, bit for bit") {
  const matrix a = random_matrix(7, 70, 1);  // K = 70: two full MX blocks and a partial one of 6
  const matrix b = random_matrix(70, 11, 2);
  for (const block_format& blocks : {mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp4, nvfp4}) {
    INFO(block_format_name(blocks));
    const matrix want = expected_product(blocks, a, b);
    matrix d;
    (void)gemm({fp32, fp32, fp32, blocks}, a, b, d);
    CHECK(mismatches(d, want) == 0);
    // Transposed operands are quantized in op() layout, so the blocks still run along K.
    const matrix at = a.transpose(), bt = b.transpose();
    matrix dt;
    (void)gemm({fp32, fp32, fp32, blocks}, at, bt, dt,
               {.trans_a = transpose::transposed, .trans_b = transpose::transposed});
    CHECK(mismatches(dt, want) == 0);
    // And the blocks change the product (the path is taken): it differs from the plain fp32 GEMM.
    matrix plain;
    (void)gemm({fp32, fp32, fp32}, a, b, plain);
    CHECK(mismatches(plain, want) > 0);
  }
  matrix d;
  CHECK_THROWS_WITH(gemm({fp32, bf16, fp32, mxfp8_e4m3}, a, b, d), Catch::Contains("gemm block-scaled inputs"));
}

TEST_CASE("policy strings carry block formats to the matmul op class and back") {
  const precision_policy p = parse_policy("preset=bf16-mixed,matmul=mxfp8");
  CHECK(p.matmul_blocks == mxfp8_e4m3);
  CHECK(p.format_for(op_class::matmul) == fp8_e4m3);
  CHECK(parse_policy(to_string(p)) == p);
  CHECK(parse_policy(to_full_string(p)) == p);
  CHECK(parse_policy("preset=bf16-mixed,matmul=nvfp4").matmul_blocks == nvfp4);
  // A plain matmul format clears the blocks, in C++ as in a string: the GEMM would otherwise quantize in MXFP8
  // blocks while format_for(matmul) and the printed policy said fp16.
  const precision_policy plain = p.with_op(op_class::matmul, fp16);
  CHECK(plain.matmul_blocks == no_block_scaling);
  CHECK(plain == parse_policy("preset=bf16-mixed,matmul=fp16"));
  CHECK(parse_policy(to_string(plain)) == plain);
}

TEST_CASE("scenarios/mx-quick.json trains with MXFP8 and NVFP4 matmuls and the gate gives verdicts") {
  const std::string dir = SAFEAMP_SCENARIOS_DIR;
  const scenario s = parse_scenario(read_whole_file(dir + "/mx-quick.json"), "mx-quick.json");
  REQUIRE(s.candidates.size() == 3);
  CHECK(s.candidates[1].policy.matmul_blocks == mxfp8_e4m3);
  CHECK(s.candidates[2].policy.matmul_blocks == nvfp4);
  const run_config rc = reference_config(s);
  const locked_reference ref = lock_reference(train(rc), manifest_for(s, rc));
  REQUIRE(ref.final_eval.accuracy > 0.5);  // the reference learned (chance is 1/8)
  std::vector<double> final_loss;
  for (const candidate_spec& c : s.candidates) {
    const run_result run = train(candidate_config(s, c));
    const parity_result r = evaluate_parity(ref, run, tolerances_for(s, c));
    std::string reasons;
    for (const std::string& why : r.reasons) reasons += why + "; ";
    for (const std::string& why : r.undecided) reasons += "undecided: " + why + "; ";
    for (const parity_check& k : r.checks)
      reasons += "\n  " + k.name + " " + std::to_string(k.value) + " / " + std::to_string(k.limit);
    INFO(c.name << ": " << verdict_name(r.outcome) << " " << reasons);
    WARN(c.name << ": " << verdict_name(r.outcome) << ", held-out accuracy " << run.final_eval.accuracy
                << " (reference " << ref.final_eval.accuracy << ") " << reasons);
    CHECK(meets_expectation(c.expect, r.outcome));
    final_loss.push_back(run.final_eval.loss);
  }
  // The block formats changed the training (their losses differ from bf16-mixed's and from each other).
  CHECK(final_loss[1] != final_loss[0]);
  CHECK(final_loss[2] != final_loss[1]);
}
