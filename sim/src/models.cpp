// MLP classifier and decoder-only transformer (see models.hpp).
#include "safeamp/sim/models.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "safeamp/error.hpp"
#include "safeamp/sim/attention.hpp"
#include "safeamp/sim/layers.hpp"

namespace safeamp::sim {
namespace {

// Philox streams of the initialisation: one per parameter tensor (its index), offset by this.
constexpr std::uint32_t init_stream_base = 0x1000u;

void init_linear(parameter_list& params, const linear_layer& l, std::uint64_t seed, format_spec f, double gain = 1.0) {
  const double fan_in = static_cast<double>(params[l.weight].value.rows());
  init_normal(params[l.weight].value, gain / std::sqrt(fan_in), seed, init_stream_base + static_cast<std::uint32_t>(l.weight), f);
}

// ---- MLP ---------------------------------------------------------------------------------------------

class mlp_model final : public model {
 public:
  mlp_model(const mlp_shape& shape, std::uint64_t seed, format_spec param_format) : shape_(shape) {
    std::int64_t in = shape.input_dim;
    for (std::int64_t i = 0; i < shape.hidden_layers; ++i) {
      hidden_.push_back(make_linear(params_, "fc" + std::to_string(i), in, shape.hidden_dim));
      activations_.push_back(activation_layer{
          .fn = shape.activation == activation_kind::gelu ? activation_fn::gelu : activation_fn::relu, .input = {}});
      in = shape.hidden_dim;
    }
    head_ = make_linear(params_, "head", in, shape.classes);
    for (const linear_layer& l : hidden_) init_linear(params_, l, seed, param_format);
    init_linear(params_, head_, seed, param_format);
  }

  void forward(exec_context& ctx, const precision_policy& pol, const batch& b, matrix& logits) override {
    if (b.features.cols() != shape_.input_dim) {
      throw error("mlp input columns", std::to_string(b.features.cols()), std::to_string(shape_.input_dim));
    }
    matrix x = b.features;
    if (b.inject_nan && x.size() > 0) x(0, 0) = std::numeric_limits<float>::quiet_NaN();
    ctx.activation_stats += cast_in_place(ctx, x, pol.output);  // the input as the model stores it
    matrix y;
    for (std::size_t i = 0; i < hidden_.size(); ++i) {
      hidden_[i].forward(ctx, pol, params_, x, y, pol.output);
      activations_[i].forward(ctx, pol, y, x);
    }
    head_.forward(ctx, pol, params_, x, logits, pol.format_for(op_class::loss));
  }

  void backward(exec_context& ctx, const precision_policy& pol, const matrix& dlogits) override {
    matrix dx, dy;
    head_.backward(ctx, pol, params_, dlogits, hidden_.empty() ? nullptr : &dx);
    for (std::size_t i = hidden_.size(); i-- > 0;) {
      activations_[i].backward(ctx, pol, dx, dy);
      hidden_[i].backward(ctx, pol, params_, dy, i == 0 ? nullptr : &dx);
    }
  }

 private:
  mlp_shape shape_;
  std::vector<linear_layer> hidden_;
  std::vector<activation_layer> activations_;
  linear_layer head_;
};

// ---- transformer -------------------------------------------------------------------------------------

struct block {
  layer_norm_layer ln1, ln2;
  linear_layer qkv, proj, fc1, fc2;
  attention_op attention;
  activation_layer act{.fn = activation_fn::gelu, .input = {}};
};

class transformer_model final : public model {
 public:
  transformer_model(const transformer_shape& shape, std::int64_t vocab, std::uint64_t seed, format_spec f)
      : shape_(shape) {
    const std::int64_t d = shape.width;
    embedding_ = make_embedding(params_, "embed", vocab, shape.context, d);
    for (std::int64_t l = 0; l < shape.layers; ++l) {
      const std::string p = "block" + std::to_string(l) + ".";
      block blk;
      blk.ln1 = make_layer_norm(params_, p + "ln1", d);
      blk.qkv = make_linear(params_, p + "qkv", d, 3 * d);
      blk.proj = make_linear(params_, p + "proj", d, d);
      blk.ln2 = make_layer_norm(params_, p + "ln2", d);
      blk.fc1 = make_linear(params_, p + "fc1", d, shape.ffn_multiplier * d);
      blk.fc2 = make_linear(params_, p + "fc2", shape.ffn_multiplier * d, d);
      blk.attention.heads = shape.heads;
      blk.attention.head_dim = d / shape.heads;
      blk.attention.context = shape.context;
      blocks_.push_back(std::move(blk));
    }
    final_ln_ = make_layer_norm(params_, "final_ln", d);
    head_ = make_linear(params_, "head", d, vocab);
    // Embeddings N(0, 0.1^2); linears N(0, 1/fan_in); residual outputs scaled down by 1/sqrt(2 layers).
    constexpr double embedding_std = 0.1;
    init_normal(params_[embedding_.tokens_table].value, embedding_std, seed, init_stream_base, f);
    init_normal(params_[embedding_.positions_table].value, embedding_std, seed, init_stream_base + 1u, f);
    const double residual_gain = 1.0 / std::sqrt(2.0 * static_cast<double>(shape.layers));
    for (const block& blk : blocks_) {
      init_linear(params_, blk.qkv, seed, f);
      init_linear(params_, blk.proj, seed, f, residual_gain);
      init_linear(params_, blk.fc1, seed, f);
      init_linear(params_, blk.fc2, seed, f, residual_gain);
    }
    init_linear(params_, head_, seed, f);
  }

  void forward(exec_context& ctx, const precision_policy& pol, const batch& b, matrix& logits) override {
    for (block& blk : blocks_) blk.attention.sequences = b.samples;
    matrix x;
    embedding_.forward(ctx, pol, params_, b.tokens, x);
    if (b.inject_nan && x.size() > 0) x(0, 0) = std::numeric_limits<float>::quiet_NaN();
    matrix a, qkv, o, p, h, g;
    for (block& blk : blocks_) {
      blk.ln1.forward(ctx, pol, params_, x, a);
      blk.qkv.forward(ctx, pol, params_, a, qkv, pol.output);
      blk.attention.forward(ctx, pol, qkv, o);
      blk.proj.forward(ctx, pol, params_, o, p, pol.output);
      residual_add(ctx, pol, x, p, x);
      blk.ln2.forward(ctx, pol, params_, x, a);
      blk.fc1.forward(ctx, pol, params_, a, h, pol.output);
      blk.act.forward(ctx, pol, h, g);
      blk.fc2.forward(ctx, pol, params_, g, p, pol.output);
      residual_add(ctx, pol, x, p, x);
    }
    final_ln_.forward(ctx, pol, params_, x, a);
    head_.forward(ctx, pol, params_, a, logits, pol.format_for(op_class::loss));
  }

  void backward(exec_context& ctx, const precision_policy& pol, const matrix& dlogits) override {
    matrix dx, da, dbranch, dh, dg, dqkv, dout;
    head_.backward(ctx, pol, params_, dlogits, &da);
    final_ln_.backward(ctx, pol, params_, da, dx);
    const format_spec fe = pol.format_for(op_class::elementwise);
    auto join = [&](matrix& residual, const matrix& branch) {  // gradient of a residual sum
      residual += branch;
      (void)cast_in_place(ctx, residual, fe);
      if (pol.gradient != fe) (void)cast_in_place(ctx, residual, pol.gradient);
    };
    for (std::size_t l = blocks_.size(); l-- > 0;) {
      block& blk = blocks_[l];
      blk.fc2.backward(ctx, pol, params_, dx, &dg);
      blk.act.backward(ctx, pol, dg, dh);
      blk.fc1.backward(ctx, pol, params_, dh, &da);
      blk.ln2.backward(ctx, pol, params_, da, dbranch);
      join(dx, dbranch);
      blk.proj.backward(ctx, pol, params_, dx, &dout);
      blk.attention.backward(ctx, pol, dout, dqkv);
      blk.qkv.backward(ctx, pol, params_, dqkv, &da);
      blk.ln1.backward(ctx, pol, params_, da, dbranch);
      join(dx, dbranch);
    }
    embedding_.backward(ctx, pol, params_, dx);
  }

 private:
  transformer_shape shape_;
  embedding_layer embedding_;
  std::vector<block> blocks_;
  layer_norm_layer final_ln_;
  linear_layer head_;
};

}  // namespace

std::unique_ptr<model> make_mlp(const mlp_shape& shape, std::uint64_t seed, format_spec param_format) {
  return std::make_unique<mlp_model>(shape, seed, param_format);
}

std::unique_ptr<model> make_transformer(const transformer_shape& shape, std::int64_t vocab, std::uint64_t seed,
                                        format_spec param_format) {
  return std::make_unique<transformer_model>(shape, vocab, seed, param_format);
}

}  // namespace safeamp::sim
