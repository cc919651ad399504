// The policy string grammar: keys, aliases, spaces, derived defaults, errors that list what is accepted,
// and the round trip parse(to_string(p)) == p over presets and many random policies.
#include <catch2/catch.hpp>
#include <random>
#include <string>

#include "safeamp/policy.hpp"

using namespace safeamp;

namespace {
std::string error_text(const std::string& s) {
  try {
    (void)parse_policy(s);
  } catch (const error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("keys, aliases and spaces") {
  const precision_policy a = parse_policy("params=fp32,compute=fp16,output=fp16");
  CHECK(a == presets::fp16_mixed);
  CHECK(parse_policy("p=f32, c=float16 , o = half") == presets::fp16_mixed);  // spaces tolerated (jmp's are not)
  CHECK(parse_policy("PARAM=float32,Compute=BFloat16") == presets::bf16_mixed);
  CHECK(parse_policy("p=fp16,master=yes") == presets::fp16_pure_master);
  CHECK(parse_policy("c=e4m3,o=bf16,g=e5m2") == presets::fp8_hybrid);
  CHECK(parse_policy("compute=tf32,output=fp32") == presets::tf32);
  CHECK(parse_policy("full") == presets::fp32);
  CHECK(parse_policy("  fp8-hybrid ") == presets::fp8_hybrid);
}

TEST_CASE("unset fields are derived from the set ones") {
  // jmp's rule for the three main keys: compute <- params, output <- compute.
  const precision_policy p = parse_policy("params=bf16");
  CHECK(p.compute == bf16);
  CHECK(p.output == bf16);
  CHECK(p.gradient == bf16);
  CHECK(p.accumulate == fp32);
  CHECK(p.format_for(op_class::softmax) == fp32);
  CHECK(p.format_for(op_class::optimizer_update) == bf16);  // no master weights: update in the param format
  // A bare format sets params, compute and output.
  CHECK(parse_policy("bf16") == p);
  // jmp's documented example: params f32, compute f16, output f32.
  const precision_policy j = parse_policy("params=float32,compute=float16,output=float32");
  CHECK(j.compute == fp16);
  CHECK(j.output == fp32);
  CHECK(j.format_for(op_class::matmul) == fp16);
  CHECK(j.format_for(op_class::elementwise) == fp32);
}

TEST_CASE("a preset with overrides") {
  const precision_policy p = parse_policy("preset=fp16-mixed, softmax=fp16, acc=fp16");
  CHECK(p.format_for(op_class::softmax) == fp16);
  CHECK(p.accumulate == fp16);
  CHECK(p.format_for(op_class::normalization) == fp32);
  CHECK(p.compute == fp16);
}

TEST_CASE("after a preset, a compute given without matmul sets the matmul format too") {
  // compute is read only to derive matmul, and every GEMM (simulator, planner, CUDA) reads format_for(matmul): until
  // 2026-12-06 "preset=fp16-mixed,compute=e5m2" changed the compute field alone and trained exactly as fp16-mixed.
  const precision_policy p = parse_policy("preset=fp16-mixed,compute=e5m2");
  CHECK(p.compute == fp8_e5m2);
  CHECK(p.format_for(op_class::matmul) == fp8_e5m2);
  CHECK(p.output == fp16);  // the other fields are the preset's
  CHECK(p.format_for(op_class::elementwise) == fp16);
  CHECK(p.gradient == fp16);
  CHECK(parse_policy(to_string(p)) == p);
  // A matmul given beside it wins; a matmul given alone leaves compute as the preset's.
  CHECK(parse_policy("preset=fp16-mixed,compute=e5m2,matmul=bf16").format_for(op_class::matmul) == bf16);
  CHECK(parse_policy("preset=fp16-mixed,matmul=bf16").compute == fp16);
  CHECK(parse_policy("preset=bf16-mixed,compute=fp16").matmul_blocks == no_block_scaling);
  CHECK(parse_policy("preset=bf16-mixed,compute=bf16") == presets::bf16_mixed);
}

TEST_CASE("errors name the bad key or value and list the accepted ones") {
  std::string m = error_text("params=fp32,comptue=fp16");
  CHECK(m.find("comptue") != std::string::npos);
  CHECK(m.find("compute (c)") != std::string::npos);
  m = error_text("params=fp32,compute=fp17");
  CHECK(m.find("fp17") != std::string::npos);
  CHECK(m.find("compute") != std::string::npos);
  CHECK(m.find("bf16 (bfloat16)") != std::string::npos);
  m = error_text("master=maybe");
  CHECK(m.find("maybe") != std::string::npos);
  CHECK(m.find("true, false") != std::string::npos);
  CHECK(error_text("p=fp32,,c=fp16").find("policy item") != std::string::npos);
  CHECK(error_text("p=fp32,").find("policy item") != std::string::npos);
  CHECK(error_text("p=fp32,p=fp16").find("twice") != std::string::npos);
  CHECK(error_text("p=a=b").find("a=b") != std::string::npos);
  CHECK(error_text("").find("preset name") != std::string::npos);
  CHECK(error_text("preset=fp12").find("fp16-pure-master") != std::string::npos);
  CHECK(error_text("c=e9m2").find("e9m2") != std::string::npos);
  CHECK(error_text("c=e4m0").find("e4m0") != std::string::npos);
  CHECK(error_text("nonsense").find("nonsense") != std::string::npos);
}

TEST_CASE("printing then parsing gives the same policy") {
  for (const named_policy& n : policy_presets) {
    CHECK(to_string(n.policy) == n.name);
    CHECK(parse_policy(to_string(n.policy)) == n.policy);
    CHECK(parse_policy(to_full_string(n.policy)) == n.policy);
  }
  CHECK(to_string(parse_policy("params=fp32,compute=fp16,output=fp32")) == "params=fp32,compute=fp16,output=fp32");
  const format_spec pool[] = {fp32,
                              tf32,
                              fp16,
                              bf16,
                              fp8_e4m3,
                              fp8_e5m2,
                              format_spec{4, 3, special_values::ieee},
                              format_spec{6, 9, special_values::ieee},
                              format_spec{3, 2, special_values::finite_nan},
                              fp4_e2m1,
                              fp8_e4m3fnuz,
                              fp8_e4m3b11fnuz,
                              fp6_e3m2};
  const block_format blocks[] = {no_block_scaling, mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4, nvfp4};
  std::uniform_int_distribution<int> pick_blocks(0, static_cast<int>(std::size(blocks)) - 1);
  std::mt19937 rng(20260529u);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(std::size(pool)) - 1);
  for (int i = 0; i < 3000; ++i) {
    precision_policy p;
    p.param = pool[pick(rng)];
    p.compute = pool[pick(rng)];
    p.output = pool[pick(rng)];
    p.accumulate = pool[pick(rng)];
    p.gradient = pool[pick(rng)];
    p.master_weights = (rng() & 1u) != 0;
    for (format_spec& f : p.op_formats) f = pool[pick(rng)];
    p = p.with_matmul_blocks(blocks[pick_blocks(rng)]);  // issue 16: block-scaled matmul inputs round-trip too
    const std::string s = to_string(p);
    INFO(s);
    REQUIRE(parse_policy(s) == p);
    REQUIRE(parse_policy(to_full_string(p)) == p);
  }
}

TEST_CASE("block formats for matmul inputs: tokens, derived fields, printing and errors (issue 16)") {
  const precision_policy mx = parse_policy("preset=bf16-mixed,matmul=mxfp8");
  CHECK(mx.matmul_blocks == block_format{fp8_e4m3, e8m0, 32});
  CHECK(mx.format_for(op_class::matmul) == fp8_e4m3);
  CHECK(mx.compute == bf16);  // everything else is the preset's
  CHECK(to_string(mx) == "params=fp32,compute=bf16,output=bf16,matmul=mxfp8");
  const precision_policy nv = parse_policy("matmul=NVFP4");
  CHECK(nv.matmul_blocks == block_format{fp4_e2m1, fp8_e4m3, 16});
  CHECK(parse_policy("mm=mxfp6_e3m2").matmul_blocks == block_format{fp6_e3m2, e8m0, 32});
  CHECK(parse_policy("gemm=mxfp4").format_for(op_class::matmul) == fp4_e2m1);
  // A plain matmul format replaces block scaling; presets have none.
  CHECK(parse_policy("preset=bf16-mixed,matmul=bf16").matmul_blocks == no_block_scaling);
  CHECK(parse_policy("bf16-mixed").matmul_blocks == no_block_scaling);
  // Block formats are matmul values only, and an unknown one lists them.
  CHECK_THROWS_WITH(parse_policy("compute=mxfp8"), Catch::Contains("policy value of compute"));
  CHECK_THROWS_WITH(parse_policy("matmul=mxfp9"), Catch::Contains("nvfp4"));
  // Usable at compile time like every policy.
  static_assert(parse_policy("matmul=mxfp8").matmul_blocks == mxfp8_e4m3);
}
