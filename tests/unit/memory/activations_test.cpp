// Activation memory against Korthikanti et al. 2022 (arXiv:2205.05198): Table 2's per-layer formula for the
// paper's 22B configuration (Table 3), the Eq. 5 / Eq. 6 totals, selective recomputation's savings for GPT-3,
// and the forward-pass ledger's peak.
#include <catch2/catch.hpp>

#include <cstdint>

#include "safeamp/memory/activations.hpp"
#include "safeamp/memory/step_time.hpp"

using namespace safeamp;

namespace {
// 22B model of Table 3: s = 2048, h = 6144, a = 64, L = 48, v = 51200; microbatch 4.
constexpr transformer_shape model_22b{.sequence = 2048, .hidden = 6144, .heads = 64, .layers = 48, .vocabulary = 51200};
}  // namespace

TEST_CASE("per-layer activations of the 22B configuration (Table 2)") {
  // sbh(34 + 5as/h) = 34 * 2048*4*6144 + 5 * 64 * 2048^2 * 4 = 1,711,276,032 + 5,368,709,120.
  CHECK(activation_bytes_per_layer(model_22b, 4, recompute::none) == 7'079'985'152ULL);
  transformer_shape tp = model_22b;
  tp.tensor_parallel = 8;
  // Tensor parallel, no SP (Eq. 2): sbh(10 + 24/8 + 5as/(8h)) = 13 sbh + 5as^2b/8.
  const std::uint64_t sbh = 2048ULL * 4 * 6144;
  CHECK(activation_bytes_per_layer(tp, 4, recompute::none) == 13 * sbh + 5ULL * 64 * 2048 * 2048 * 4 / 8);
  CHECK(activation_bytes_per_layer(tp, 4, recompute::selective) == 13 * sbh);  // sbh(10 + 24/t)
  tp.sequence_parallel = true;
  CHECK(activation_bytes_per_layer(tp, 4, recompute::selective) == 213'909'504ULL);  // 34 sbh / t
  CHECK(activation_bytes_per_layer(tp, 4, recompute::none) == 7'079'985'152ULL / 8);  // Eq. 4: everything / t
  CHECK(activation_bytes_per_layer(model_22b, 4, recompute::full) == 2 * sbh);       // 2 sbh: the layer input
  // Eq. 5 and Eq. 6 totals over L = 48 layers: 42.48 GB and 10.27 GB.
  CHECK(static_cast<double>(48 * activation_bytes_per_layer(tp, 4, recompute::none)) / 1e9 == Approx(42.48).margin(0.005));
  CHECK(static_cast<double>(48 * activation_bytes_per_layer(tp, 4, recompute::selective)) / 1e9 == Approx(10.27).margin(0.005));
  // Selective + SP is 16.1% of the tensor-parallel baseline.
  transformer_shape baseline = tp;
  baseline.sequence_parallel = false;
  CHECK(static_cast<double>(213'909'504ULL) / static_cast<double>(activation_bytes_per_layer(baseline, 4, recompute::none)) ==
        Approx(0.161).margin(0.0005));
}

TEST_CASE("selective recomputation saves 80/114 of a GPT-3 layer (section 5)") {
  // GPT-3: a = 96, s = 2048, h = 12288: 5as/h = 80, so 80 of 34 + 80 = 114 parts are the attention core.
  const transformer_shape gpt3{.sequence = 2048, .hidden = 12288, .heads = 96, .layers = 96, .vocabulary = 51200};
  const auto none = static_cast<double>(activation_bytes_per_layer(gpt3, 1, recompute::none));
  const auto selective = static_cast<double>(activation_bytes_per_layer(gpt3, 1, recompute::selective));
  CHECK((none - selective) / none == Approx(80.0 / 114.0).epsilon(1e-12));
}

TEST_CASE("fp32 activations use 4-byte elements and 1-byte masks") {
  // (16e + 2) sbh + (2e + 1) as^2 b with e = 4: 66 sbh + 9 as^2 b.
  const transformer_shape t{.sequence = 128, .hidden = 256, .heads = 4, .layers = 2, .vocabulary = 1000};
  CHECK(activation_bytes_per_layer(t, 1, recompute::none, 4) == 66ULL * 128 * 256 + 9ULL * 4 * 128 * 128);
}

TEST_CASE("the ledger accumulates layer by layer and peaks in the backward pass") {
  // Small model by hand: s = 128, h = 256, a = 4, L = 2, v = 1000, b = 1, 2-byte activations.
  const transformer_shape t{.sequence = 128, .hidden = 256, .heads = 4, .layers = 2, .vocabulary = 1000};
  const std::uint64_t sbh = 128ULL * 256;
  const std::uint64_t layer = 34 * sbh + 5ULL * 4 * 128 * 128;  // 1,441,792
  const std::uint64_t logits = 4ULL * 128 * 1000;              // fp32 logits, 512,000
  const activation_ledger l = activation_ledger_for(t, 1, recompute::none);
  REQUIRE(l.entries.size() == 6);  // embedding, 2 layers, head inputs, logits, logits gradient
  CHECK(l.entries[0].bytes == sbh);
  CHECK(l.entries[2].cumulative_bytes == sbh + 2 * layer);
  CHECK(l.stored_bytes == sbh + 2 * layer + 4 * sbh + logits);
  CHECK(l.peak_bytes == l.stored_bytes + logits);
  CHECK(l.peak_block == "backward: logits gradient (fp32)");
  CHECK(activation_bytes_per_sample(t, recompute::none) == l.peak_bytes);
  // Linear in the microbatch.
  CHECK(activation_ledger_for(t, 3, recompute::none).peak_bytes == 3 * l.peak_bytes);
  // Full recomputation: layers hold 2 sbh; the backward recomputes one full layer on top.
  const activation_ledger f = activation_ledger_for(t, 1, recompute::full);
  CHECK(f.stored_bytes == sbh + 2 * (2 * sbh) + 4 * sbh + logits);
  REQUIRE(layer - 2 * sbh > logits);  // so the recomputation, not the logits gradient, sets the peak
  CHECK(f.peak_bytes == f.stored_bytes + (layer - 2 * sbh));
  CHECK(f.peak_block == "backward: recompute one layer");
}

TEST_CASE("training FLOPs per sample (Korthikanti Appendix A; 6PD)") {
  // 72 L s h^2 (1 + s/6h + v/(12hL)) for the 22B configuration.
  const double s = 2048, h = 6144, l = 48, v = 51200;
  const double model = 72 * l * s * h * h * (1 + s / (6 * h) + v / (12 * h * l));
  CHECK(training_flops_per_sample(model_22b, recompute::none) == Approx(model).epsilon(1e-12));
  CHECK(training_flops_per_sample(model_22b, recompute::selective) ==
        Approx(72 * l * s * h * h * (1 + s / (3 * h) + v / (12 * h * l))).epsilon(1e-12));
  CHECK(training_flops_per_sample(model_22b, recompute::full) == Approx(model * 4 / 3).epsilon(1e-12));
  // MFU of the 22B run in Table 5: 4 samples per 1.10 s on 8 A100s at 312 TFLOPS -> 41.5% published.
  CHECK(4 * model / 1.10 / (8 * 312e12) == Approx(0.4165).margin(0.0005));
  CHECK(training_flops_per_sample(1'000'000, 100, recompute::none) == 6e8);
  CHECK_THROWS_AS(training_flops_per_sample(1'000'000, 100, recompute::selective), error);
}

TEST_CASE("transformer shapes are validated") {
  transformer_shape t = model_22b;
  t.heads = 0;
  CHECK_THROWS_WITH(activation_bytes_per_layer(t, 1, recompute::none), Catch::Contains("heads"));
  t = model_22b;
  t.heads = 7;  // does not divide 6144
  CHECK_THROWS_AS(validate(t), error);
  t = model_22b;
  t.sequence = 1ULL << 40;
  CHECK_THROWS_AS(validate(t), error);
  CHECK_THROWS_AS(activation_bytes_per_layer(model_22b, 0, recompute::none), error);
  CHECK_THROWS_AS(parse_recompute("partial"), error);
}

TEST_CASE("flash attention stores no s^2 scores, only fp32 softmax statistics (Dao et al. 2022)") {
  // s = 128, h = 256, a = 4, b = 1: eager 34 sbh + 5 a s^2 = 1,114,112 + 327,680 = 1,441,792 bytes per layer;
  // flash 34 sbh + 4 a s (one fp32 logsumexp per row and head) = 1,114,112 + 2,048 = 1,116,160.
  transformer_shape t{.sequence = 128, .hidden = 256, .heads = 4, .layers = 2, .vocabulary = 1000};
  REQUIRE(activation_bytes_per_layer(t, 1, recompute::none) == 1'441'792ULL);
  t.attention = attention_kernel::flash;
  CHECK(activation_bytes_per_layer(t, 1, recompute::none) == 1'116'160ULL);
  CHECK(activation_bytes_per_layer(t, 3, recompute::none) == 3 * 1'116'160ULL);
  // Selective recomputation has nothing left to drop; full keeps the layer input only (2 sbh = 65,536).
  CHECK(activation_bytes_per_layer(t, 1, recompute::selective) == 1'116'160ULL);
  CHECK(activation_bytes_per_layer(t, 1, recompute::full) == 65'536ULL);
  // The ledger's selective run then has no "recompute one attention core" transient.
  const activation_ledger l = activation_ledger_for(t, 1, recompute::selective);
  CHECK(l.entries.back().block == "backward: logits gradient (fp32)");
  // GPT-2 small (s = 1024, h = 768, a = 12): 89,653,248 bytes per layer eager, 26,787,840 with flash.
  transformer_shape gpt2{.sequence = 1024, .hidden = 768, .heads = 12, .layers = 12, .vocabulary = 50257};
  CHECK(activation_bytes_per_layer(gpt2, 1, recompute::none) == 89'653'248ULL);
  gpt2.attention = attention_kernel::flash;
  CHECK(activation_bytes_per_layer(gpt2, 1, recompute::none) == 26'787'840ULL);
  CHECK(parse_attention_kernel("sdpa") == attention_kernel::flash);
  CHECK_THROWS_WITH(parse_attention_kernel("xformers"), Catch::Contains("attention") && Catch::Contains("flash"));
}

TEST_CASE("flash attention's backward recomputes QK^T: 2 s^2 h FLOPs per layer") {
  transformer_shape t = model_22b;
  const double eager = training_flops_per_sample(t, recompute::none);
  t.attention = attention_kernel::flash;
  // 2 x 48 x 2048^2 x 6144 = 2.4739e12 FLOPs per sample on top of the model's.
  CHECK(training_flops_per_sample(t, recompute::none) - eager == Approx(2.0 * 48 * 2048.0 * 2048.0 * 6144).epsilon(1e-9));
  CHECK(training_flops_split(t, recompute::none).total() ==
        Approx(training_flops_per_sample(t, recompute::none)).epsilon(1e-15));
}
