// Linear, layer norm, embedding and residual layers (see layers.hpp; the activations are in activation.cpp).
#include "safeamp/sim/layers.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <type_traits>

#include "gemm_views.hpp"
#include "layer_common.hpp"
#include "safeamp/error.hpp"
#include "safeamp/sim/gemm.hpp"
#include "safeamp/sim/parallel.hpp"
#include "scalar_round.hpp"

namespace safeamp::sim {
namespace {

gemm_options gemm_opts(exec_context& ctx, float beta = 0.0f, transpose ta = transpose::none,
                       transpose tb = transpose::none) {
  return gemm_options{.alpha = 1.0f,
                      .beta = beta,
                      .trans_a = ta,
                      .trans_b = tb,
                      .rounding = ctx.rounding,
                      .key = ctx.next_key(),
                      .threads = ctx.threads};
}

// Columns per task of column_sums, which takes threads only from sum_parallel_min_elements elements on. The split
// depends on the shape alone.
constexpr Eigen::Index sum_cols_per_task = 64;
constexpr Eigen::Index sum_parallel_min_elements = 32768;

// Columns whose running sums a column sum keeps in a local block across the rows (registers, once the compiler has
// unrolled the block's loop), stored once at the end. Summed in place instead, every row loaded, added and stored
// each column's sum, a chain through memory from row to row: column_sums ran at 1.6 cycles an element, 3% of the
// two-thread profile of the 4x wider peer shape (Intel model 207). The order of each column's additions is the same.
constexpr Eigen::Index register_columns = 16;

// For each column j of [j0, j1): sum[j] = add(sum[j], row i) over the rows in order, the column's running value
// kept in a local block of register_columns; sum holds the start values and receives the results.
template <class Add>
void column_blocks(Eigen::Index rows, Eigen::Index j0, Eigen::Index j1, float* sum, const Add& add) {
  for (Eigen::Index jb = j0; jb < j1; jb += register_columns) {
    const Eigen::Index width = std::min(register_columns, j1 - jb);
    float acc[register_columns];
    std::copy(sum + jb, sum + jb + width, acc);
    if (width == register_columns) {
      for (Eigen::Index i = 0; i < rows; ++i) {
        for (Eigen::Index k = 0; k < register_columns; ++k) acc[k] = add(acc[k], i, jb + k);
      }
    } else {
      for (Eigen::Index i = 0; i < rows; ++i) {
        for (Eigen::Index k = 0; k < width; ++k) acc[k] = add(acc[k], i, jb + k);
      }
    }
    std::copy(acc, acc + width, sum + jb);
  }
}

// out(0, j) = in(0, j) + in(1, j) + ... in row order, each addition rounded to f. Tasks own blocks of columns, so a
// column's additions keep their order on any thread count.
void column_sums(int threads, format_spec f, const matrix& in, matrix& out) {
  out.setZero(1, in.cols());
  float* sum = out.data();
  const int workers = in.size() >= sum_parallel_min_elements ? threads : 1;
  const float* data = in.data();
  const Eigen::Index cols = in.cols();
  detail::with_round(f, [&](auto round) {
    parallel_chunks(workers, cols, sum_cols_per_task, [&](std::int64_t j0, std::int64_t j1) {
      column_blocks(in.rows(), j0, j1, sum,
                    [&](float acc, Eigen::Index i, Eigen::Index j) { return round(acc + data[i * cols + j]); });
    });
  });
}

// Layer norm's tasks: rows of about norm_task_elements elements, columns of the parameter gradients in blocks of
// norm_cols_per_task; threads only for a matrix of two tasks' worth or more. The split depends on the shape alone.
constexpr Eigen::Index norm_task_elements = 8192;
constexpr Eigen::Index norm_cols_per_task = 32;
// Rows of a layer norm whose sums run side by side (independent chains, each in its row's column order): the
// fastest counts measured on a Zen 4 (1024 x 256 rows: forward 2.9x one row at a time, backward 1.3x; docs/performance.md).
constexpr int norm_row_group = 8;           // forward: two sums per row, one chain each
constexpr int norm_backward_row_group = 2;  // backward: two chains per row, and a store per element

Eigen::Index norm_rows_per_task(Eigen::Index width) { return std::max<Eigen::Index>(1, norm_task_elements / width); }
int norm_threads(const exec_context& ctx, const matrix& x) {
  return x.size() >= 2 * norm_task_elements ? ctx.threads : 1;
}

void check_cols(const char* field, Eigen::Index got, Eigen::Index expected) {
  if (got != expected) throw error(field, std::to_string(got), std::to_string(expected));
}

}  // namespace

void cast_gradient(exec_context& ctx, const precision_policy& pol, parameter& p) {
  p.grad_stats += cast_in_place(ctx, p.grad, pol.gradient);
}

// ---- linear -------------------------------------------------------------------------------------------

linear_layer make_linear(parameter_list& params, const std::string& name, Eigen::Index in, Eigen::Index out) {
  linear_layer l;
  l.weight = add_parameter(params, name + ".weight", in, out);
  l.bias = add_parameter(params, name + ".bias", 1, out);
  return l;
}

namespace {

// The forward's GEMM once the kept input is in place: in input_low and in the matmul format when the GEMM rounds
// its operands, in `input` otherwise.
void linear_forward_gemm(linear_layer& l, exec_context& ctx, const gemm_formats& f, const parameter_list& params,
                         matrix& y) {
  const bool rounds = detail::rounds_operands(f);
  const matrix& x = rounds ? l.input_low : l.input;
  const matrix& w = params[l.weight].value;
  check_cols("linear input columns", x.cols(), w.rows());
  check_cols("linear bias columns", params[l.bias].value.cols(), w.cols());
  y.resize(x.rows(), w.cols());
  // Bias epilogue: D = x W + 1 b, b added in fp32 before rounding, as the GEMM's C (beta 1), read from the bias row
  // by the tiles rather than broadcast into D first.
  detail::output_view d = detail::output_of(y);
  d.c_row = params[l.bias].value.data();
  const gemm_options opt = gemm_opts(ctx, 1.0f);
  l.input_low_format = rounds ? f.compute : fp32;
  l.weight_low_format = fp32;
  if (!rounds) {
    ctx.activation_stats += detail::gemm_views(f, detail::view_of(x), detail::view_of(w), d, opt);
    return;
  }
  // The weight rounded once, for this GEMM and for the backward's dx (the weight does not change between them).
  const matrix& w_low = detail::round_operand(f.compute, w, l.weight_low, ctx.threads);
  l.weight_low_format = f.compute;
  ctx.activation_stats += detail::gemm_views(f, detail::view_of(x), detail::view_of(w_low), d, opt, {.a = true, .b = true});
}

}  // namespace

void linear_layer::forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params,
                           const matrix& x, matrix& y, format_spec out_format) {
  if (&x == &input_low) {
    forward_in_place(ctx, pol, params, fp32, y, out_format);
    return;
  }
  const gemm_formats f{pol.format_for(op_class::matmul), pol.accumulate, out_format, pol.matmul_blocks};
  if (detail::rounds_operands(f)) {
    // x rounded once, into the kept input, for this GEMM and for the backward's dW and dx, which would round it to
    // the same bits; the backward reads x only as input_low, so x itself is not kept.
    (void)detail::round_operand(f.compute, x, input_low, ctx.threads);
    input.resize(0, 0);  // after: x may be `input` itself
  } else {
    input = x;
  }
  linear_forward_gemm(*this, ctx, f, params, y);
}

void linear_layer::forward_in_place(exec_context& ctx, const precision_policy& pol, const parameter_list& params,
                                    format_spec x_format, matrix& y, format_spec out_format) {
  const gemm_formats f{pol.format_for(op_class::matmul), pol.accumulate, out_format, pol.matmul_blocks};
  if (detail::rounds_operands(f)) {
    // Rounded in place, unless its producer stored it in the matmul format already (rounding would not change it).
    input.resize(0, 0);
    detail::operand_in_place(f.compute, x_format, input_low, ctx.threads, "linear input");
  } else {
    input.swap(input_low);  // the slot's buffer becomes the next slot (no allocation per step)
  }
  linear_forward_gemm(*this, ctx, f, params, y);
}

void linear_layer::backward(exec_context& ctx, const precision_policy& pol, parameter_list& params, const matrix& dy,
                            matrix* dx, format_spec dy_format) {
  parameter& w = params[weight];
  parameter& b = params[bias];
  check_cols("linear output-gradient columns", dy.cols(), w.value.cols());
  const gemm_formats f{pol.format_for(op_class::matmul), pol.accumulate, pol.gradient, pol.matmul_blocks};
  if (!detail::rounds_operands(f)) {
    w.grad_stats += gemm(f, input, dy, w.grad, gemm_opts(ctx, 0.0f, transpose::transposed));  // dW = x^T dy
    column_sums(ctx.threads, pol.format_for(op_class::reduction), dy, b.grad);                // db = 1^T dy
    cast_gradient(ctx, pol, b);
    if (dx != nullptr) (void)gemm(f, dy, w.value, *dx, gemm_opts(ctx, 0.0f, transpose::none, transpose::transposed));
    return;
  }
  // The same GEMMs with dy rounded once for both, and x as the forward rounded it (when it did, to this format).
  const bool x_kept =
      input_low_format == f.compute && input_low.rows() == dy.rows() && input_low.cols() == w.value.rows();
  if (!x_kept && (input.rows() != dy.rows() || input.cols() != w.value.rows())) {
    throw error("linear backward input", std::to_string(input.rows()) + " x " + std::to_string(input.cols()),
                "the forward's input of " + std::to_string(dy.rows()) + " x " + std::to_string(w.value.rows()) +
                    ", kept by a forward in this policy's matmul format");
  }
  thread_local matrix dy_scratch;
  const matrix& dy_low =
      detail::operand_from(f.compute, dy_format, dy, dy_scratch, ctx.threads, "linear output gradient");
  w.grad.resize(w.value.rows(), dy.cols());
  w.grad_stats += detail::gemm_views(f, detail::view_of(x_kept ? input_low : input, transpose::transposed),
                                     detail::view_of(dy_low), detail::output_of(w.grad),
                                     gemm_opts(ctx, 0.0f, transpose::transposed), {.a = x_kept, .b = true});
  column_sums(ctx.threads, pol.format_for(op_class::reduction), dy, b.grad);
  cast_gradient(ctx, pol, b);
  if (dx == nullptr) return;
  const bool w_kept =
      weight_low_format == f.compute && weight_low.rows() == w.value.rows() && weight_low.cols() == w.value.cols();
  dx->resize(dy.rows(), w.value.rows());
  (void)detail::gemm_views(
      f, detail::view_of(dy_low), detail::view_of(w_kept ? weight_low : w.value, transpose::transposed),
      detail::output_of(*dx), gemm_opts(ctx, 0.0f, transpose::none, transpose::transposed), {.a = true, .b = w_kept});
}

// ---- layer norm ----------------------------------------------------------------------------------------

layer_norm_layer make_layer_norm(parameter_list& params, const std::string& name, Eigen::Index width) {
  layer_norm_layer l;
  l.gain = add_parameter(params, name + ".gain", 1, width);
  l.bias = add_parameter(params, name + ".bias", 1, width);
  params[l.gain].value.setOnes();
  return l;
}

void layer_norm_layer::forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params,
                               const matrix& x, matrix& y) {
  layer_norm_forward(ctx, pol, params[gain].value, params[bias].value, epsilon, x, y, saved);
}

void layer_norm_layer::backward(exec_context& ctx, const precision_policy& pol, parameter_list& params,
                                const matrix& dy, matrix& dx) {
  (void)layer_norm_backward(ctx, pol, params[gain], params[bias], saved, dy, dx);
}

void layer_norm_forward(exec_context& ctx, const precision_policy& pol, const matrix& g, const matrix& b, float epsilon,
                        const matrix& x, matrix& y, layer_norm_saved& saved) {
  check_cols("layer norm input columns", x.cols(), g.cols());
  check_cols("layer norm bias columns", b.cols(), g.cols());
  std::vector<float>& rstd = saved.rstd;
  matrix& normalized = saved.normalized;
  const format_spec f = pol.format_for(op_class::normalization);
  const Eigen::Index width = x.cols();
  const float inv_width = 1.0f / static_cast<float>(width);
  normalized.resize(x.rows(), width);
  rstd.assign(static_cast<std::size_t>(x.rows()), 0.0f);
  y.resize(x.rows(), width);
  detail::with_round(f, [&](auto rf) {  // rf(v) == round_scalar(f, v)
    // Rows r .. r + G - 1 together: each row's sums are its own chains in column order (so its bits are those of
    // a row on its own), and the G independent chains run side by side instead of one add's latency each.
    const auto rows_of = [&]<int G>(std::integral_constant<int, G>, Eigen::Index r) {
      const float* xr[G];
      float sum[G], mean[G], sq[G];
      for (int l = 0; l < G; ++l) {
        xr[l] = x.data() + (r + l) * width;
        sum[l] = 0.0f;
        sq[l] = 0.0f;
      }
      for (Eigen::Index j = 0; j < width; ++j) {
        for (int l = 0; l < G; ++l) sum[l] = rf(sum[l] + rf(xr[l][j]));
      }
      for (int l = 0; l < G; ++l) mean[l] = rf(sum[l] * inv_width);
      for (Eigen::Index j = 0; j < width; ++j) {
        for (int l = 0; l < G; ++l) {
          const float d = rf(rf(xr[l][j]) - mean[l]);
          sq[l] = rf(sq[l] + rf(d * d));
        }
      }
      for (int l = 0; l < G; ++l) {
        const float var = rf(sq[l] * inv_width);
        const float rs = rf(1.0f / std::sqrt(rf(var + epsilon)));
        rstd[static_cast<std::size_t>(r + l)] = rs;
        float* nr = normalized.data() + (r + l) * width;
        float* yr = y.data() + (r + l) * width;
        for (Eigen::Index j = 0; j < width; ++j) {
          const float xh = rf(rf(rf(xr[l][j]) - mean[l]) * rs);
          nr[j] = xh;
          yr[j] = rf(rf(xh * g.data()[j]) + b.data()[j]);
        }
      }
    };
    // Each row on its own (its sums in a fixed order), so blocks of rows are independent tasks.
    parallel_chunks(norm_threads(ctx, x), x.rows(), norm_rows_per_task(width),
                    [&](std::int64_t first, std::int64_t last) {
                      Eigen::Index r = first;
                      for (; r + norm_row_group <= last; r += norm_row_group) {
                        rows_of(std::integral_constant<int, norm_row_group>{}, r);
                      }
                      for (; r < last; ++r) rows_of(std::integral_constant<int, 1>{}, r);
                    });
  });
  detail::store_activation(ctx, pol, y, f);
}

cast_stats layer_norm_backward(exec_context& ctx, const precision_policy& pol, parameter& g, parameter& b,
                               const layer_norm_saved& saved, const matrix& dy, matrix& dx) {
  const matrix& normalized = saved.normalized;
  const std::vector<float>& rstd = saved.rstd;
  if (dy.rows() != normalized.rows() || dy.cols() != normalized.cols()) {
    throw error("layer norm gradient shape", std::to_string(dy.rows()) + "x" + std::to_string(dy.cols()),
                std::to_string(normalized.rows()) + "x" + std::to_string(normalized.cols()));
  }
  const format_spec f = pol.format_for(op_class::normalization);
  const format_spec fr = pol.format_for(op_class::reduction);
  const Eigen::Index width = dy.cols();
  const float inv_width = 1.0f / static_cast<float>(width);
  g.grad.setZero(1, width);
  b.grad.setZero(1, width);
  dx.resize(dy.rows(), width);
  float* gg = g.grad.data();
  float* bg = b.grad.data();
  const float* gv = g.value.data();
  const Eigen::Index rows = dy.rows();
  // Two kinds of independent tasks: blocks of rows of dx (each row's sums in a fixed order) and blocks of
  // columns of the gain and bias gradients (each column summed over the rows in row order).
  const std::int64_t rows_per_task = norm_rows_per_task(width);
  const std::int64_t row_tasks = (rows + rows_per_task - 1) / rows_per_task;
  const std::int64_t col_tasks = (width + norm_cols_per_task - 1) / norm_cols_per_task;
  detail::with_round(f, [&](auto rf) {  // rf(v) == round_scalar(f, v), rr(v) == round_scalar(fr, v)
    detail::with_round(fr, [&](auto rr) {
      // Rows r .. r + G - 1 together, each row's sums its own chains in column order (as in the forward).
      const auto rows_of = [&]<int G>(std::integral_constant<int, G>, Eigen::Index r) {
        const float* dyr[G];
        const float* nr[G];
        float* dxr[G];  // dxhat first, then dx
        float s1[G], s2[G];
        for (int l = 0; l < G; ++l) {
          dyr[l] = dy.data() + (r + l) * width;
          nr[l] = normalized.data() + (r + l) * width;
          dxr[l] = dx.data() + (r + l) * width;
          s1[l] = 0.0f;
          s2[l] = 0.0f;
        }
        for (Eigen::Index j = 0; j < width; ++j) {
          for (int l = 0; l < G; ++l) {
            const float d = rf(dyr[l][j] * gv[j]);
            dxr[l][j] = d;
            s1[l] = rf(s1[l] + d);
            s2[l] = rf(s2[l] + rf(d * nr[l][j]));
          }
        }
        for (int l = 0; l < G; ++l) {
          const float m1 = rf(s1[l] * inv_width);
          const float m2 = rf(s2[l] * inv_width);
          const float rs = rstd[static_cast<std::size_t>(r + l)];
          for (Eigen::Index j = 0; j < width; ++j) {
            const float inner = rf(dxr[l][j] - m1 - nr[l][j] * m2);
            dxr[l][j] = rf(rs * inner);
          }
        }
      };
      const auto dx_rows = [&](Eigen::Index first, Eigen::Index last) {
        Eigen::Index r = first;
        for (; r + norm_backward_row_group <= last; r += norm_backward_row_group) {
          rows_of(std::integral_constant<int, norm_backward_row_group>{}, r);
        }
        for (; r < last; ++r) rows_of(std::integral_constant<int, 1>{}, r);
      };
      const auto parameter_columns = [&](Eigen::Index first, Eigen::Index last) {
        // Two column sums over the rows in order, each column's running value kept in a local block (column_blocks).
        const float* dyd = dy.data();
        const float* nd = normalized.data();
        column_blocks(rows, first, last, gg, [&](float acc, Eigen::Index r, Eigen::Index j) {
          return rr(acc + dyd[r * width + j] * nd[r * width + j]);
        });
        column_blocks(rows, first, last, bg,
                      [&](float acc, Eigen::Index r, Eigen::Index j) { return rr(acc + dyd[r * width + j]); });
      };
      parallel_for(norm_threads(ctx, dy), row_tasks + col_tasks, [&](std::int64_t task) {
        if (task < row_tasks) {
          const Eigen::Index first = task * rows_per_task;
          dx_rows(first, std::min<Eigen::Index>(rows, first + rows_per_task));
        } else {
          const Eigen::Index first = (task - row_tasks) * norm_cols_per_task;
          parameter_columns(first, std::min<Eigen::Index>(width, first + norm_cols_per_task));
        }
      });
    });
  });
  cast_gradient(ctx, pol, g);
  cast_gradient(ctx, pol, b);
  // dx's rounding into f is the arithmetic's own (uncounted, as in the forward); its storage cast is counted.
  return pol.gradient != f ? cast_in_place(ctx, dx, pol.gradient) : cast_stats{};
}

// ---- embedding -----------------------------------------------------------------------------------------

embedding_layer make_embedding(parameter_list& params, const std::string& name, Eigen::Index vocab,
                               Eigen::Index context, Eigen::Index width) {
  embedding_layer l;
  l.tokens_table = add_parameter(params, name + ".tokens", vocab, width);
  l.positions_table = add_parameter(params, name + ".positions", context, width);
  l.context = context;
  return l;
}

void embedding_layer::forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params,
                              const std::vector<std::int32_t>& batch_tokens, matrix& y) {
  const matrix& te = params[tokens_table].value;
  const matrix& pe = params[positions_table].value;
  const format_spec fe = pol.format_for(op_class::elementwise);
  if (batch_tokens.size() % static_cast<std::size_t>(context) != 0) {
    throw error("embedding batch tokens", std::to_string(batch_tokens.size()),
                "a multiple of the context (" + std::to_string(context) + ")");
  }
  tokens = batch_tokens;
  y.resize(static_cast<Eigen::Index>(tokens.size()), te.cols());
  for (std::size_t r = 0; r < tokens.size(); ++r) {
    const std::int32_t t = tokens[r];
    if (t < 0 || t >= te.rows()) {
      throw error("embedding token", std::to_string(t), "0.." + std::to_string(te.rows() - 1));
    }
    const auto row = static_cast<Eigen::Index>(r);
    const Eigen::Index pos = row % context;
    for (Eigen::Index j = 0; j < te.cols(); ++j) y(row, j) = te(t, j) + pe(pos, j);
  }
  // Each sum rounded to the elementwise format (round_scalar's nearest even, no counters, no key), in one pass.
  if (fe != fp32) (void)round_span(fe, span_of(y), round_options{}, philox_key{});
  detail::store_activation(ctx, pol, y, fe);
}

void embedding_layer::backward(exec_context& ctx, const precision_policy& pol, parameter_list& params,
                               const matrix& dy) {
  parameter& te = params[tokens_table];
  parameter& pe = params[positions_table];
  const format_spec fr = pol.format_for(op_class::reduction);
  check_cols("embedding gradient columns", dy.cols(), te.value.cols());
  te.grad.setZero();
  pe.grad.setZero();
  const Eigen::Index width = dy.cols();
  detail::with_round(fr, [&](auto rr) {  // rr(v) == round_scalar(fr, v)
    for (std::size_t r = 0; r < tokens.size(); ++r) {
      const auto row = static_cast<Eigen::Index>(r);
      const float* g = dy.data() + row * width;
      float* tg = te.grad.data() + tokens[r] * width;
      float* pg = pe.grad.data() + (row % context) * width;
      for (Eigen::Index j = 0; j < width; ++j) {
        tg[j] = rr(tg[j] + g[j]);
        pg[j] = rr(pg[j] + g[j]);
      }
    }
  });
  cast_gradient(ctx, pol, te);
  cast_gradient(ctx, pol, pe);
}

// ---- residual ------------------------------------------------------------------------------------------

void residual_add(exec_context& ctx, const precision_policy& pol, const matrix& a, const matrix& b, matrix& y) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) {
    throw error("residual operand shape", std::to_string(b.rows()) + "x" + std::to_string(b.cols()),
                std::to_string(a.rows()) + "x" + std::to_string(a.cols()));
  }
  y = a + b;
  // As an activation's result (activation.cpp): in the elementwise format, stored in policy.output, counted once.
  ctx.activation_stats += detail::cast_then_store(ctx, y, pol.format_for(op_class::elementwise), pol.output);
}

}  // namespace safeamp::sim
