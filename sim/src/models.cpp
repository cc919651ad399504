// Models as a sequential layer stack; the MLP and transformer presets (see models.hpp).
#include "safeamp/sim/models.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <variant>

#include "safeamp/error.hpp"
#include "safeamp/sim/attention.hpp"
#include "safeamp/sim/layers.hpp"

namespace safeamp::sim {
namespace {

// Philox streams of the initialisation: one per parameter tensor (its index), offset by this.
constexpr std::uint32_t init_stream_base = 0x1000u;
constexpr double embedding_std = 0.1;

void init_linear(parameter_list& params, const linear_layer& l, std::uint64_t seed, format_spec f, double gain = 1.0) {
  const double fan_in = static_cast<double>(params[l.weight].value.rows());
  init_normal(params[l.weight].value, gain / std::sqrt(fan_in), seed, init_stream_base + static_cast<std::uint32_t>(l.weight), f);
}

// Pre-norm transformer block: x += proj(attention(qkv(LN1 x))); x += fc2(GELU(fc1(LN2 x))).
struct block_layer {
  layer_norm_layer ln1, ln2;
  linear_layer qkv, proj, fc1, fc2;
  attention_op attention;
  activation_layer act{.fn = activation_fn::gelu, .input = {}};
  // The intermediates, kept between steps so that a step does not allocate (and page in) them again. The inputs
  // of the GEMMs, the attention and the activation are written straight into the layer that keeps them for the
  // backward (its input_slot), and are stored activations: values of policy.output, so a layer computing its
  // GEMMs in that format need not round them again. The gradients between the layers are values of
  // policy.gradient (the GEMMs' output format in the backward, and the last cast of the activation, layer norm
  // and residual backward).
  matrix p, da, dbranch, dh, dg, dqkv, dout;

  void forward(exec_context& ctx, const precision_policy& pol, const parameter_list& params, matrix& x,
               std::int64_t sequences) {
    const format_spec stored = pol.output;
    attention.sequences = sequences;
    ln1.forward(ctx, pol, params, x, qkv.input_slot());
    qkv.forward_in_place(ctx, pol, params, stored, attention.input_slot(), pol.output);
    attention.forward_in_place(ctx, pol, stored, proj.input_slot());
    proj.forward_in_place(ctx, pol, params, stored, p, pol.output);
    residual_add(ctx, pol, x, p, x);
    ln2.forward(ctx, pol, params, x, fc1.input_slot());
    fc1.forward_in_place(ctx, pol, params, stored, act.input_slot(), pol.output);
    act.forward_in_place(ctx, pol, fc2.input_slot());
    fc2.forward_in_place(ctx, pol, params, stored, p, pol.output);
    residual_add(ctx, pol, x, p, x);
  }

  // dx: the gradient of the block's output on entry (its elements values of dx_format; fp32 promises nothing), of
  // its input on return (a value of policy.gradient then).
  void backward(exec_context& ctx, const precision_policy& pol, parameter_list& params, matrix& dx,
                format_spec dx_format) {
    const format_spec fe = pol.format_for(op_class::elementwise);
    const format_spec fg = pol.gradient;
    auto join = [&](matrix& residual, const matrix& branch) {  // gradient of a residual sum
      residual += branch;
      (void)cast_in_place(ctx, residual, fe);
      if (pol.gradient != fe) (void)cast_in_place(ctx, residual, pol.gradient);
    };
    fc2.backward(ctx, pol, params, dx, &dg, dx_format);
    act.backward(ctx, pol, dg, dh);
    fc1.backward(ctx, pol, params, dh, &da, fg);
    ln2.backward(ctx, pol, params, da, dbranch);
    join(dx, dbranch);
    proj.backward(ctx, pol, params, dx, &dout, fg);
    attention.backward(ctx, pol, dout, dqkv, fg);
    qkv.backward(ctx, pol, params, dqkv, &da, fg);
    ln1.backward(ctx, pol, params, da, dbranch);
    join(dx, dbranch);
  }
};

using any_layer = std::variant<linear_layer, activation_layer, layer_norm_layer, embedding_layer, block_layer>;

std::string layer_path(std::size_t i) { return "model.layers[" + std::to_string(i) + "]"; }

class stack_model final : public model {
 public:
  stack_model(const model_stack& stack, std::int64_t vocab, std::int64_t output_width, std::uint64_t seed,
              format_spec f) {
    if (stack.layers.empty() || stack.layers.back().kind != layer_kind::linear) {
      throw error("model.layers", stack.layers.empty() ? "empty" : "ending in " + to_string(stack.layers.back().kind),
                  "a stack whose last layer is a linear head");
    }
    std::int64_t blocks = 0;
    for (const layer_spec& l : stack.layers) blocks += l.kind == layer_kind::transformer_block ? 1 : 0;
    const double residual_gain = blocks > 0 ? 1.0 / std::sqrt(2.0 * static_cast<double>(blocks)) : 1.0;
    std::int64_t width = stack.input_dim;
    for (std::size_t i = 0; i < stack.layers.size(); ++i) {
      const layer_spec& s = stack.layers[i];
      const std::string name = layer_name(s, i);
      switch (s.kind) {
        case layer_kind::linear: {
          const bool head = i + 1 == stack.layers.size();
          const std::int64_t out = s.out > 0 ? s.out : (head ? output_width : 0);
          if (out < 1) throw error(layer_path(i) + ".out", std::to_string(s.out), ">= 1 (0 only on the head)");
          if (head && output_width > 0 && out != output_width) {
            throw error(layer_path(i) + ".out", std::to_string(out),
                        std::to_string(output_width) + " (the width of the data's targets)");
          }
          require_width(i, width);
          linear_layer l = make_linear(params_, name, width, out);
          init_linear(params_, l, seed, f);
          layers_.emplace_back(std::move(l));
          width = out;
          break;
        }
        case layer_kind::activation:
          layers_.emplace_back(activation_layer{
              .fn = s.activation == activation_kind::gelu ? activation_fn::gelu : activation_fn::relu, .input = {}});
          break;
        case layer_kind::layer_norm:
          require_width(i, width);
          layers_.emplace_back(make_layer_norm(params_, name, width));
          break;
        case layer_kind::embedding: {
          if (i != 0) throw error(layer_path(i), "an embedding after the first layer", "an embedding only first");
          if (s.width < 1 || s.context < 1 || vocab < 1) {
            throw error(layer_path(i), "width " + std::to_string(s.width) + ", context " + std::to_string(s.context),
                        "width >= 1 and context >= 1 on token data");
          }
          embedding_layer e = make_embedding(params_, name, vocab, s.context, s.width);
          init_normal(params_[e.tokens_table].value, embedding_std, seed,
                      init_stream_base + static_cast<std::uint32_t>(e.tokens_table), f);
          init_normal(params_[e.positions_table].value, embedding_std, seed,
                      init_stream_base + static_cast<std::uint32_t>(e.positions_table), f);
          context_ = s.context;
          width = s.width;
          layers_.emplace_back(std::move(e));
          break;
        }
        case layer_kind::transformer_block: {
          if (context_ == 0 || s.heads < 1 || width % s.heads != 0 || s.ffn_multiplier < 1) {
            throw error(layer_path(i), "heads " + std::to_string(s.heads) + " on width " + std::to_string(width),
                        "after an embedding, a width that is a multiple of heads, ffn_multiplier >= 1");
          }
          const std::string p = name + ".";
          block_layer b;
          b.ln1 = make_layer_norm(params_, p + "ln1", width);
          b.qkv = make_linear(params_, p + "qkv", width, 3 * width);
          b.proj = make_linear(params_, p + "proj", width, width);
          b.ln2 = make_layer_norm(params_, p + "ln2", width);
          b.fc1 = make_linear(params_, p + "fc1", width, s.ffn_multiplier * width);
          b.fc2 = make_linear(params_, p + "fc2", s.ffn_multiplier * width, width);
          b.attention.heads = s.heads;
          b.attention.head_dim = width / s.heads;
          b.attention.context = context_;
          init_linear(params_, b.qkv, seed, f);
          init_linear(params_, b.proj, seed, f, residual_gain);
          init_linear(params_, b.fc1, seed, f);
          init_linear(params_, b.fc2, seed, f, residual_gain);
          layers_.emplace_back(std::move(b));
          break;
        }
      }
    }
    // Distinct layer names (validate) can still spell one parameter name ("b.qkv" beside a block named "b").
    for (std::size_t i = 0; i < params_.size(); ++i) {
      for (std::size_t k = 0; k < i; ++k) {
        if (params_[i].name == params_[k].name) {
          throw error("model.layers", "parameter '" + params_[i].name + "' twice",
                      "layer names that give every parameter its own name");
        }
      }
    }
    input_dim_ = stack.input_dim;
  }

  void forward(exec_context& ctx, const precision_policy& pol, const batch& b, matrix& logits) override {
    matrix& x = x_;
    matrix& y = y_;
    std::size_t first = 0;
    if (auto* e = std::get_if<embedding_layer>(&layers_.front())) {
      e->forward(ctx, pol, params_, b.tokens, x);
      if (b.inject_nan && x.size() > 0) x(0, 0) = std::numeric_limits<float>::quiet_NaN();
      first = 1;
    } else {
      if (b.features.cols() != input_dim_) {
        throw error("model input columns", std::to_string(b.features.cols()), std::to_string(input_dim_));
      }
      x = b.features;
      if (b.inject_nan && x.size() > 0) x(0, 0) = std::numeric_limits<float>::quiet_NaN();
      ctx.activation_stats += cast_in_place(ctx, x, pol.output);  // the input as the model stores it
    }
    const std::size_t head = layers_.size() - 1;
    for (std::size_t i = first; i < head; ++i) {
      std::visit(
          [&](auto& l) {
            using T = std::decay_t<decltype(l)>;
            if constexpr (std::is_same_v<T, linear_layer>) {
              l.forward(ctx, pol, params_, x, y, pol.output);
              x.swap(y);
            } else if constexpr (std::is_same_v<T, activation_layer>) {
              l.forward(ctx, pol, x, y);
              x.swap(y);
            } else if constexpr (std::is_same_v<T, layer_norm_layer>) {
              l.forward(ctx, pol, params_, x, y);
              x.swap(y);
            } else if constexpr (std::is_same_v<T, block_layer>) {
              l.forward(ctx, pol, params_, x, b.samples);
            }
          },
          layers_[i]);
    }
    std::get<linear_layer>(layers_[head]).forward(ctx, pol, params_, x, logits, pol.format_for(op_class::loss));
  }

  void backward(exec_context& ctx, const precision_policy& pol, const matrix& dlogits) override {
    matrix& dx = dx_;
    matrix& dy = dy_;
    const std::size_t head = layers_.size() - 1;
    // Every gradient passed between the layers is a value of policy.gradient: the loss casts dlogits to it, and
    // each layer's backward ends with that cast (or with a GEMM whose output format it is), so the linear layers
    // need not round them again for their GEMMs (checked with format checks on).
    const format_spec fg = pol.gradient;
    std::get<linear_layer>(layers_[head]).backward(ctx, pol, params_, dlogits, head == 0 ? nullptr : &dx, fg);
    for (std::size_t i = head; i-- > 0;) {
      std::visit(
          [&](auto& l) {
            using T = std::decay_t<decltype(l)>;
            if constexpr (std::is_same_v<T, linear_layer>) {
              l.backward(ctx, pol, params_, dx, i == 0 ? nullptr : &dy, fg);
              dx.swap(dy);
            } else if constexpr (std::is_same_v<T, activation_layer>) {
              l.backward(ctx, pol, dx, dy);
              dx.swap(dy);
            } else if constexpr (std::is_same_v<T, layer_norm_layer>) {
              l.backward(ctx, pol, params_, dx, dy);
              dx.swap(dy);
            } else if constexpr (std::is_same_v<T, block_layer>) {
              l.backward(ctx, pol, params_, dx, fg);
            } else {
              l.backward(ctx, pol, params_, dx);  // embedding: first, consumes the gradient
            }
          },
          layers_[i]);
    }
  }

 private:
  void require_width(std::size_t i, std::int64_t width) const {
    if (width < 1) {
      throw error(layer_path(i), "a layer with parameters before the input width is known",
                  "model.input_dim >= 1 (or an embedding first)");
    }
  }

  std::vector<any_layer> layers_;
  matrix x_, y_, dx_, dy_;  // the activations between layers and their gradients, kept between steps
  std::int64_t input_dim_ = 0;
  std::int64_t context_ = 0;
};

}  // namespace

model_stack preset_stack(const run_config& cfg) {
  if (cfg.model == model_kind::stack) return cfg.stack;
  model_stack s;
  const auto add = [&s](layer_kind kind, std::string name) -> layer_spec& {
    layer_spec& l = s.layers.emplace_back();
    l.kind = kind;
    l.name = std::move(name);
    return l;
  };
  if (cfg.model == model_kind::mlp) {
    const mlp_shape& m = cfg.mlp;
    s.input_dim = m.input_dim;
    for (std::int64_t i = 0; i < m.hidden_layers; ++i) {
      add(layer_kind::linear, "fc" + std::to_string(i)).out = m.hidden_dim;
      add(layer_kind::activation, "").activation = m.activation;
    }
    add(layer_kind::linear, "head").out = m.classes;
    return s;
  }
  const transformer_shape& t = cfg.transformer;
  layer_spec& e = add(layer_kind::embedding, "embed");
  e.width = t.width;
  e.context = t.context;
  for (std::int64_t l = 0; l < t.layers; ++l) {
    layer_spec& b = add(layer_kind::transformer_block, "block" + std::to_string(l));
    b.heads = t.heads;
    b.ffn_multiplier = t.ffn_multiplier;
  }
  add(layer_kind::layer_norm, "final_ln");
  add(layer_kind::linear, "head");  // out 0: the vocabulary
  return s;
}

std::unique_ptr<model> make_stack_model(const model_stack& stack, std::int64_t vocab, std::int64_t output_width,
                                        std::uint64_t seed, format_spec param_format) {
  return std::make_unique<stack_model>(stack, vocab, output_width, seed, param_format);
}

std::unique_ptr<model> make_mlp(const mlp_shape& shape, std::uint64_t seed, format_spec param_format) {
  run_config c;
  c.model = model_kind::mlp;
  c.mlp = shape;
  return make_stack_model(preset_stack(c), 0, shape.classes, seed, param_format);
}

std::unique_ptr<model> make_transformer(const transformer_shape& shape, std::int64_t vocab, std::uint64_t seed,
                                        format_spec param_format) {
  run_config c;
  c.model = model_kind::transformer;
  c.transformer = shape;
  return make_stack_model(preset_stack(c), vocab, vocab, seed, param_format);
}

}  // namespace safeamp::sim
