// Host-side (no GPU): device type mapping from policy formats, cudaDataType_t / compute-type values,
// GEMM problem validation and layouts, and the plan cache.
#include <cublasLt.h>
#include <library_types.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "safeamp/cuda/dtype.hpp"
#include "safeamp/cuda/gemm.hpp"
#include "safeamp/cuda/gemm_problem.hpp"
#include "safeamp/cuda/plan_cache.hpp"
#include "safeamp/policy.hpp"

using namespace safeamp;
using namespace safeamp::cuda;

namespace {
template <class F>
std::string error_field(F&& f) {
  try {
    f();
  } catch (const safeamp::error& e) {
    return e.field();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("storage types of the named formats", "[cuda][host]") {
  CHECK(storage_dtype(fp32) == device_dtype::f32);
  CHECK(storage_dtype(tf32) == device_dtype::f32);  // TF32 is read from fp32 storage
  CHECK(storage_dtype(fp16) == device_dtype::f16);
  CHECK(storage_dtype(bf16) == device_dtype::bf16);
  CHECK(storage_dtype(fp8_e4m3) == device_dtype::f8_e4m3);
  CHECK(storage_dtype(fp8_e5m2) == device_dtype::f8_e5m2);
  CHECK(error_field([] { (void)storage_dtype(format_spec{6, 9}); }) == "device format");
  CHECK(dtype_bytes(device_dtype::f32) == 4);
  CHECK(dtype_bytes(device_dtype::bf16) == 2);
  CHECK(dtype_bytes(device_dtype::f8_e5m2) == 1);
}

TEST_CASE("CUDA enum values of our types come from the CUDA headers", "[cuda][host]") {
  CHECK(to_cuda_data_type(device_dtype::f32) == CUDA_R_32F);
  CHECK(to_cuda_data_type(device_dtype::f16) == CUDA_R_16F);
  CHECK(to_cuda_data_type(device_dtype::bf16) == CUDA_R_16BF);
  CHECK(to_cuda_data_type(device_dtype::f8_e4m3) == CUDA_R_8F_E4M3);
  CHECK(to_cuda_data_type(device_dtype::f8_e5m2) == CUDA_R_8F_E5M2);
  CHECK(to_cublas_compute_type(gemm_compute::f32) == CUBLAS_COMPUTE_32F);
  CHECK(to_cublas_compute_type(gemm_compute::f32_fast_tf32) == CUBLAS_COMPUTE_32F_FAST_TF32);
  CHECK(to_cublas_compute_type(gemm_compute::f16) == CUBLAS_COMPUTE_16F);
  CHECK(to_cublaslt_epilogue(epilogue::none) == CUBLASLT_EPILOGUE_DEFAULT);
  CHECK(to_cublaslt_epilogue(epilogue::relu) == CUBLASLT_EPILOGUE_RELU);
  CHECK(to_cublaslt_epilogue(epilogue::gelu) == CUBLASLT_EPILOGUE_GELU);
  CHECK(to_cublaslt_epilogue(epilogue::bias) == CUBLASLT_EPILOGUE_BIAS);
  CHECK(to_cublaslt_epilogue(epilogue::bias_relu) == CUBLASLT_EPILOGUE_RELU_BIAS);
  CHECK(to_cublaslt_epilogue(epilogue::bias_gelu) == CUBLASLT_EPILOGUE_GELU_BIAS);
}

TEST_CASE("GEMM types of the policy presets", "[cuda][host]") {
  const gemm_types f32 = forward_gemm_types(presets::fp32);
  CHECK(f32.a == device_dtype::f32);
  CHECK(f32.d == device_dtype::f32);
  CHECK(f32.compute == gemm_compute::f32);
  CHECK_FALSE(f32.tensor_scales);

  const gemm_types t = forward_gemm_types(presets::tf32);
  CHECK(t.a == device_dtype::f32);
  CHECK(t.compute == gemm_compute::f32_fast_tf32);
  CHECK(t.min_compute_capability == 80);

  const gemm_types h = forward_gemm_types(presets::fp16_mixed);
  CHECK(h.a == device_dtype::f16);
  CHECK(h.b == device_dtype::f16);
  CHECK(h.d == device_dtype::f16);  // the policy's output (activation) format
  CHECK(h.c == device_dtype::f16);
  CHECK(h.bias == device_dtype::f16);
  CHECK(h.compute == gemm_compute::f32);  // fp32 accumulation
  CHECK(h.scale == device_dtype::f32);

  const gemm_types b = forward_gemm_types(presets::bf16_mixed);
  CHECK(b.a == device_dtype::bf16);
  CHECK(b.d == device_dtype::bf16);
  CHECK(b.compute == gemm_compute::f32);

  const gemm_types f8 = forward_gemm_types(presets::fp8_hybrid);
  CHECK(f8.a == device_dtype::f8_e4m3);
  CHECK(f8.b == device_dtype::f8_e4m3);
  CHECK(f8.d == device_dtype::bf16);
  CHECK(f8.tensor_scales);
  CHECK(f8.min_compute_capability == 89);

  const gemm_types f8_back = backward_gemm_types(presets::fp8_hybrid);
  CHECK(f8_back.a == device_dtype::f8_e5m2);  // gradients in E5M2
  CHECK(f8_back.b == device_dtype::f8_e4m3);
  CHECK(backward_gemm_types(presets::fp16_mixed) == h);
}

TEST_CASE("GEMM types read the matmul format, as the simulator and the planner do", "[cuda][host]") {
  // A policy string's compute only seeds matmul: "matmul=bf16" keeps compute (and output) fp32 but runs bf16 GEMMs in
  // the simulator, so here too (until 2026-12-06 these read compute and chose fp32 GEMMs).
  const precision_policy p = parse_policy("matmul=bf16");
  REQUIRE(p.compute == fp32);
  const gemm_types t = forward_gemm_types(p);
  CHECK(t.a == device_dtype::bf16);
  CHECK(t.b == device_dtype::bf16);
  CHECK(t.d == device_dtype::f32);
  CHECK(t.compute == gemm_compute::f32);
  CHECK(backward_gemm_types(p).a == device_dtype::bf16);
  CHECK(backward_gemm_types(p).b == device_dtype::bf16);
  // Block-scaled inputs have no GEMM here: refused by name, not run as per-tensor E4M3.
  const precision_policy mx = parse_policy("preset=bf16-mixed,matmul=mxfp8");
  CHECK(error_field([&] { (void)forward_gemm_types(mx); }) == "policy matmul");
  CHECK(error_field([&] { (void)backward_gemm_types(mx); }) == "policy matmul");
}

TEST_CASE("unsupported GEMM type combinations are rejected by field", "[cuda][host]") {
  CHECK(error_field([] { (void)gemm_types_for(bf16, fp16, fp32, fp32); }) == "gemm input formats");
  CHECK(error_field([] { (void)gemm_types_for(fp8_e5m2, fp8_e5m2, fp32, fp32); }) == "gemm input formats");
  CHECK(error_field([] { (void)gemm_types_for(fp8_e4m3, fp16, fp32, fp32); }) == "gemm input formats");
  CHECK(error_field([] { (void)gemm_types_for(bf16, bf16, fp16, bf16); }) == "gemm accumulate format");
  CHECK(error_field([] { (void)gemm_types_for(fp16, fp16, bf16, fp16); }) == "gemm accumulate format");
  CHECK(error_field([] { (void)gemm_types_for(fp32, fp32, fp32, fp16); }) == "gemm output format");
  CHECK(error_field([] { (void)gemm_types_for(bf16, bf16, fp32, fp16); }) == "gemm output format");
  CHECK(error_field([] { (void)gemm_types_for(fp8_e4m3, fp8_e4m3, fp32, fp8_e4m3); }) == "gemm output format");
  // fp16 accumulation: compute type 16F, alpha/beta in fp16, fp16 output only
  const gemm_types h16 = gemm_types_for(fp16, fp16, fp16, fp16);
  CHECK(h16.compute == gemm_compute::f16);
  CHECK(h16.scale == device_dtype::f16);
  CHECK(error_field([] { (void)gemm_types_for(fp16, fp16, fp16, fp32); }) == "gemm output format");
  // fp8 with fp32 output: bias is bf16 (cuBLASLt's fp8 rule), C follows D
  const gemm_types f8 = gemm_types_for(fp8_e4m3, fp8_e5m2, fp32, fp32);
  CHECK(f8.bias == device_dtype::bf16);
  CHECK(f8.c == device_dtype::f32);
}

TEST_CASE("GEMM layouts are the stored matrices, validated", "[cuda][host]") {
  gemm_problem p;
  p.m = 3;
  p.n = 5;
  p.k = 7;
  p.types = gemm_types_for(fp16, fp16, fp32, fp32);
  gemm_layouts l = describe(p);
  // N/N: A is m x k, B is k x n, D is m x n, packed
  CHECK(l.a == matrix_layout{device_dtype::f16, 3, 7, 3});
  CHECK(l.b == matrix_layout{device_dtype::f16, 7, 5, 7});
  CHECK(l.d == matrix_layout{device_dtype::f32, 3, 5, 3});
  CHECK(l.c == l.d);
  p.op_a = transpose::transposed;
  p.op_b = transpose::transposed;
  p.lda = 8;
  p.ldd = 4;
  l = describe(p);
  CHECK(l.a == matrix_layout{device_dtype::f16, 7, 3, 8});  // stored k x m
  CHECK(l.b == matrix_layout{device_dtype::f16, 5, 7, 5});  // stored n x k
  CHECK(l.d.ld == 4);
  CHECK(l.c.ld == 4);

  gemm_problem bad = p;
  bad.lda = 6;  // < 7 rows of the stored A
  CHECK(error_field([&] { (void)describe(bad); }) == "gemm lda");
  bad = p;
  bad.ldd = 2;
  CHECK(error_field([&] { (void)describe(bad); }) == "gemm ldd");
  bad = p;
  bad.k = 0;
  CHECK(error_field([&] { (void)describe(bad); }) == "gemm k");
  bad = p;
  bad.m = std::int64_t{1} << 31;
  CHECK(error_field([&] { (void)describe(bad); }) == "gemm m");
  bad = p;
  bad.types = gemm_types_for(fp16, fp16, fp16, fp16);
  bad.epi = epilogue::bias_relu;
  CHECK(error_field([&] { (void)describe(bad); }) == "gemm epilogue");
}

TEST_CASE("fp8 GEMMs need the TN layout and multiples of 16", "[cuda][host]") {
  gemm_problem p;
  p.m = 64;
  p.n = 32;
  p.k = 48;
  p.types = gemm_types_for(fp8_e4m3, fp8_e4m3, fp32, bf16);
  CHECK(error_field([&] { (void)describe(p); }) == "gemm fp8 transposes");  // NN
  p.op_a = transpose::transposed;
  const gemm_layouts l = describe(p);
  CHECK(l.a == matrix_layout{device_dtype::f8_e4m3, 48, 64, 48});
  CHECK(l.d == matrix_layout{device_dtype::bf16, 64, 32, 64});
  p.n = 40;
  CHECK(error_field([&] { (void)describe(p); }) == "gemm fp8 n");
  p.n = 32;
  p.lda = 56;
  CHECK(error_field([&] { (void)describe(p); }) == "gemm fp8 lda");
}

// The sizes are named: the call in the right order compiles, any swap (or plain integers) does not.
template <class Rows, class Cols, class Inner>
concept row_major_call = requires(Rows r, Cols c, Inner i, gemm_types t) {
  row_major_problem(r, c, i, t);
};
static_assert(row_major_call<gemm_rows, gemm_cols, gemm_inner>);
static_assert(!row_major_call<gemm_cols, gemm_rows, gemm_inner>, "rows and cols swapped must not compile");
static_assert(!row_major_call<gemm_rows, gemm_inner, gemm_cols>, "cols and inner swapped must not compile");
static_assert(!row_major_call<gemm_inner, gemm_cols, gemm_rows>, "rows and inner swapped must not compile");
static_assert(!row_major_call<std::int64_t, std::int64_t, std::int64_t>, "unnamed sizes must not compile");
static_assert(!std::is_convertible_v<std::int64_t, gemm_rows>, "a size is named explicitly, never converted");

TEST_CASE("row-major products map onto the transposed column-major problem", "[cuda][host]") {
  const gemm_problem p = row_major_problem(gemm_rows{128}, gemm_cols{256}, gemm_inner{64},
                                           gemm_types_for(bf16, bf16, fp32, bf16), epilogue::bias);
  CHECK(p.m == 256);  // D^T is cols x rows
  CHECK(p.n == 128);
  CHECK(p.k == 64);
  CHECK(p.epi == epilogue::bias);
  CHECK(gemm_flops(p) == 2.0 * 128 * 256 * 64);
  CHECK(gemm_min_bytes(p) == 2.0 * (256 * 64 + 64 * 128 + 256 * 128));
}

TEST_CASE("problem hash distinguishes every field", "[cuda][host]") {
  gemm_problem base;
  base.m = 64;
  base.n = 64;
  base.k = 64;
  base.types = gemm_types_for(fp16, fp16, fp32, fp16);
  const gemm_problem_hash h;
  std::vector<gemm_problem> variants(12, base);
  variants[1].m = 65;
  variants[2].n = 65;
  variants[3].k = 65;
  variants[4].op_a = transpose::transposed;
  variants[5].op_b = transpose::transposed;
  variants[6].lda = 128;
  variants[7].ldb = 128;
  variants[8].ldd = 128;
  variants[9].types = gemm_types_for(fp16, fp16, fp32, fp32);
  variants[10].epi = epilogue::relu;
  variants[11].types = gemm_types_for(bf16, bf16, fp32, bf16);
  std::set<std::size_t> hashes;
  for (const auto& v : variants) hashes.insert(h(v));
  CHECK(hashes.size() == variants.size());
  gemm_problem copy = base;
  CHECK(h(copy) == h(base));
}

TEST_CASE("plan cache creates one plan per problem", "[cuda][host]") {
  struct fake_plan {
    std::int64_t m;
  };
  plan_cache<fake_plan> cache;
  int created = 0;
  const auto make = [&created](const gemm_problem& p) {
    ++created;
    return fake_plan{p.m};
  };
  gemm_problem a;
  a.m = 8;
  a.n = 8;
  a.k = 8;
  gemm_problem b = a;
  b.m = 16;
  fake_plan& pa = cache.get_or_create(a, make);
  CHECK(pa.m == 8);
  CHECK(&cache.get_or_create(a, make) == &pa);
  CHECK(cache.get_or_create(b, make).m == 16);
  for (int i = 0; i < 10; ++i) (void)cache.get_or_create(b, make);
  CHECK(created == 2);
  CHECK(cache.stats() == plan_cache_stats{.hits = 11, .misses = 2, .entries = 2});
  CHECK(&cache.get_or_create(a, make) == &pa);  // references survive growth of the table

  gemm_problem c = a;
  c.k = 32;
  CHECK_THROWS_AS(cache.get_or_create(c, [](const gemm_problem&) -> fake_plan { throw std::runtime_error("no algo"); }),
                  std::runtime_error);
  CHECK_FALSE(cache.contains(c));
  CHECK(cache.stats().entries == 2);
  CHECK(cache.get_or_create(c, make).m == 8);
  CHECK(created == 3);
  cache.clear();
  CHECK(cache.stats().entries == 0);
}

TEST_CASE("plan keys: pointer alignment is part of the key", "[cuda][host]") {
  alignas(256) static unsigned char buffer[1024];
  CHECK(pointer_alignment(buffer) == 256);
  CHECK(pointer_alignment(buffer + 16) == 16);
  CHECK(pointer_alignment(buffer + 2) == 2);
  CHECK(pointer_alignment(buffer + 1) == 1);
  CHECK(pointer_alignment(buffer + 512) == 256);  // capped at cuBLASLt's largest requirement
  CHECK(pointer_alignment(nullptr) == 256);

  gemm_problem p;
  p.m = 64;
  p.n = 64;
  p.k = 64;
  const plan_key aligned = make_plan_key(p, buffer, buffer + 256, nullptr, buffer + 512);
  const plan_key offset_a = make_plan_key(p, buffer + 8, buffer + 256, nullptr, buffer + 512);
  CHECK(aligned.align_a == 256);
  CHECK(offset_a.align_a == 8);
  CHECK_FALSE(aligned == offset_a);
  CHECK(plan_key_hash{}(aligned) != plan_key_hash{}(offset_a));
  CHECK(make_plan_key(p, buffer + 256, buffer, nullptr, buffer) == aligned);  // same alignments: same plan

  // The same problem at an offset gets a plan of its own; the aligned call reuses the first.
  struct fake_plan {
    std::uint32_t align_a;
  };
  plan_cache<fake_plan, plan_key, plan_key_hash> cache;
  const auto make = [](const plan_key& k) { return fake_plan{k.align_a}; };
  CHECK(cache.get_or_create(aligned, make).align_a == 256);
  CHECK(cache.get_or_create(offset_a, make).align_a == 8);
  CHECK(cache.get_or_create(aligned, make).align_a == 256);
  CHECK(cache.stats() == plan_cache_stats{.hits = 1, .misses = 2, .entries = 2});
}
