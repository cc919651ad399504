// One GEMM as a value: shape, transposes, leading dimensions, types and epilogue, in cuBLASLt's
// column-major convention  D(m x n) = alpha * op(A)(m x k) * op(B)(k x n) + beta * C(m x n) [+ bias, act].
// describe() validates it and derives the three matrix layouts; the value is also the plan-cache key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "safeamp/cuda/dtype.hpp"
#include "safeamp/error.hpp"

namespace safeamp::cuda {

enum class transpose : std::uint8_t { none, transposed };

/// What cuBLASLt applies after the product (CUBLASLT_EPILOGUE_*). Bias: one value per row of D (length m).
enum class epilogue : std::uint8_t { none, relu, gelu, bias, bias_relu, bias_gelu };

[[nodiscard]] constexpr bool has_bias(epilogue e) noexcept {
  return e == epilogue::bias || e == epilogue::bias_relu || e == epilogue::bias_gelu;
}

struct gemm_problem {
  std::int64_t m = 0, n = 0, k = 0;
  transpose op_a = transpose::none;
  transpose op_b = transpose::none;
  std::int64_t lda = 0, ldb = 0, ldd = 0;  // 0: packed (the stored matrix's row count)
  gemm_types types{};
  epilogue epi = epilogue::none;

  friend constexpr bool operator==(const gemm_problem&, const gemm_problem&) = default;
};

/// A column-major matrix as cuBLASLt sees it (cublasLtMatrixLayoutCreate arguments).
struct matrix_layout {
  device_dtype type = device_dtype::f32;
  std::int64_t rows = 0, cols = 0, ld = 0;

  friend constexpr bool operator==(const matrix_layout&, const matrix_layout&) = default;
};

struct gemm_layouts {
  matrix_layout a, b, c, d;  // as stored (A is k x m when op_a is transposed)

  friend constexpr bool operator==(const gemm_layouts&, const gemm_layouts&) = default;
};

namespace detail {
inline std::string dims(std::int64_t r, std::int64_t c) { return std::to_string(r) + " x " + std::to_string(c); }

inline matrix_layout stored_layout(const char* field, device_dtype t, std::int64_t rows, std::int64_t cols,
                                   std::int64_t ld) {
  const std::int64_t eff = ld == 0 ? rows : ld;
  if (eff < rows) {
    throw error(field, std::to_string(ld),
                ">= " + std::to_string(rows) + " (rows of the stored matrix) or 0 for packed");
  }
  return matrix_layout{t, rows, cols, eff};
}
}  // namespace detail

/// Validates the problem and returns the stored layouts. Throws safeamp::error for: non-positive or
/// > 2^31-1 sizes, leading dimensions below the stored row count, fp8 operands that are not in the
/// "TN" layout cuBLASLt requires (op_a transposed, op_b not) or whose m/n/k and leading dimensions are not
/// multiples of 16, and a bias epilogue on an fp16-accumulating GEMM.
[[nodiscard]] inline gemm_layouts describe(const gemm_problem& p) {
  constexpr std::int64_t max_dim = 2147483647;
  const auto check_dim = [](const char* field, std::int64_t v) {
    if (v <= 0 || v > max_dim) throw error(field, std::to_string(v), "1..2147483647");
  };
  check_dim("gemm m", p.m);
  check_dim("gemm n", p.n);
  check_dim("gemm k", p.k);
  const bool ta = p.op_a == transpose::transposed, tb = p.op_b == transpose::transposed;
  gemm_layouts l;
  l.a = detail::stored_layout("gemm lda", p.types.a, ta ? p.k : p.m, ta ? p.m : p.k, p.lda);
  l.b = detail::stored_layout("gemm ldb", p.types.b, tb ? p.n : p.k, tb ? p.k : p.n, p.ldb);
  l.d = detail::stored_layout("gemm ldd", p.types.d, p.m, p.n, p.ldd);
  l.c = matrix_layout{p.types.c, p.m, p.n, l.d.ld};
  if (p.types.tensor_scales) {
    if (!ta || tb) {
      throw error("gemm fp8 transposes", std::string(ta ? "T" : "N") + (tb ? "T" : "N"),
                  "TN (op_a transposed, op_b not), the only fp8 layout cuBLASLt supports");
    }
    for (const auto& [field, v] :
         {std::pair{"gemm fp8 m", p.m}, std::pair{"gemm fp8 n", p.n}, std::pair{"gemm fp8 k", p.k},
          std::pair{"gemm fp8 lda", l.a.ld}, std::pair{"gemm fp8 ldb", l.b.ld}}) {
      if (v % 16 != 0) throw error(field, std::to_string(v), "a multiple of 16");
    }
  }
  if (has_bias(p.epi) && p.types.compute == gemm_compute::f16) {
    throw error("gemm epilogue", "bias with fp16 accumulation", "bias epilogues with fp32 accumulation");
  }
  return l;
}

/// The three sizes of a row-major product, each its own type so that a call names them and cannot swap them:
/// row_major_problem(gemm_rows{128}, gemm_cols{256}, gemm_inner{64}, types) compiles; the same sizes in
/// another order, or as plain integers, do not (tests/cuda/host_types_test.cpp asserts both).
struct gemm_rows {
  explicit constexpr gemm_rows(std::int64_t v) noexcept : value(v) {}
  std::int64_t value;  // rows of A and of D
};
struct gemm_cols {
  explicit constexpr gemm_cols(std::int64_t v) noexcept : value(v) {}
  std::int64_t value;  // columns of B and of D
};
struct gemm_inner {
  explicit constexpr gemm_inner(std::int64_t v) noexcept : value(v) {}
  std::int64_t value;  // columns of A, rows of B: the summed dimension
};

/// A row-major product D(rows x cols) = A(rows x inner) * B(inner x cols), all packed row-major, as the
/// column-major problem D^T = B^T A^T that computes it: pass B's pointer as cuBLASLt's A and A's as B.
[[nodiscard]] inline gemm_problem row_major_problem(gemm_rows rows, gemm_cols cols, gemm_inner inner, gemm_types types,
                                                    epilogue epi = epilogue::none) {
  gemm_problem p;
  p.m = cols.value;
  p.n = rows.value;
  p.k = inner.value;
  p.types = types;
  p.epi = epi;
  return p;
}

/// Floating-point operations of the product (2 m n k), for throughput and roofline checks.
[[nodiscard]] constexpr double gemm_flops(const gemm_problem& p) noexcept {
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
}

/// Bytes the GEMM must move at least once: A, B, D (and C when beta != 0 is used, counted by the caller).
[[nodiscard]] constexpr double gemm_min_bytes(const gemm_problem& p) noexcept {
  const auto mm = static_cast<double>(p.m), nn = static_cast<double>(p.n), kk = static_cast<double>(p.k);
  return mm * kk * dtype_bytes(p.types.a) + kk * nn * dtype_bytes(p.types.b) + mm * nn * dtype_bytes(p.types.d);
}

struct gemm_problem_hash {
  [[nodiscard]] std::size_t operator()(const gemm_problem& p) const noexcept {
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the fields
    const auto mix = [&h](std::uint64_t v) {
      for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xFFu;
        h *= 0x100000001b3ull;
      }
    };
    mix(static_cast<std::uint64_t>(p.m));
    mix(static_cast<std::uint64_t>(p.n));
    mix(static_cast<std::uint64_t>(p.k));
    mix(static_cast<std::uint64_t>(p.lda));
    mix(static_cast<std::uint64_t>(p.ldb));
    mix(static_cast<std::uint64_t>(p.ldd));
    const auto& t = p.types;
    mix((static_cast<std::uint64_t>(p.op_a) << 0) | (static_cast<std::uint64_t>(p.op_b) << 8) |
        (static_cast<std::uint64_t>(t.a) << 16) | (static_cast<std::uint64_t>(t.b) << 24) |
        (static_cast<std::uint64_t>(t.c) << 32) | (static_cast<std::uint64_t>(t.d) << 40) |
        (static_cast<std::uint64_t>(t.compute) << 48) | (static_cast<std::uint64_t>(p.epi) << 56));
    mix((static_cast<std::uint64_t>(t.bias)) | (static_cast<std::uint64_t>(t.scale) << 8) |
        (static_cast<std::uint64_t>(t.tensor_scales) << 16) |
        (static_cast<std::uint64_t>(static_cast<std::uint32_t>(t.min_compute_capability)) << 24));
    return static_cast<std::size_t>(h);
  }
};

}  // namespace safeamp::cuda
