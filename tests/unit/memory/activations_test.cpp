// Activation memory against Korthikanti et al. 2022 (arXiv:2205.05198): Table 2's per-layer formula for the
// paper's 22B configuration (Table 3), the Eq. 5 / Eq. 6 totals, selective recomputation's savings for GPT-3,
// and the forward-pass ledger's peak.
#include "safeamp/memory/activations.hpp"

#include <catch2/catch.hpp>
#include <cstdint>

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
  CHECK(activation_bytes_per_layer(tp, 4, recompute::selective) == 213'909'504ULL);   // 34 sbh / t
  CHECK(activation_bytes_per_layer(tp, 4, recompute::none) == 7'079'985'152ULL / 8);  // Eq. 4: everything / t
  CHECK(activation_bytes_per_layer(model_22b, 4, recompute::full) == 2 * sbh);        // 2 sbh: the layer input
  // Eq. 5 and Eq. 6 totals over L = 48 layers: 42.48 GB and 10.27 GB.
  CHECK(static_cast<double>(48 * activation_bytes_per_layer(tp, 4, recompute::none)) / 1e9 ==
        Approx(42.48).margin(0.005));
  CHECK(static_cast<double>(48 * activation_bytes_per_layer(tp, 4, recompute::selective)) / 1e9 ==
        Approx(10.27).margin(0.005));
  // Selective + SP is 16.1% of the tensor-parallel baseline.
  transformer_shape baseline = tp;
  baseline.sequence_parallel = false;
  CHECK(static_cast<double>(213'909'504ULL) /
            static_cast<double>(activation_bytes_per_layer(baseline, 4, recompute::none)) ==
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
  const std::uint64_t logits = 4ULL * 128 * 1000;               // fp32 logits, 512,000
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
  CHECK(training_flops_per_sample({.parameters = 1'000'000, .tokens_per_sample = 100}, recompute::none) == 6e8);
  CHECK_THROWS_AS(training_flops_per_sample({.parameters = 1'000'000, .tokens_per_sample = 100}, recompute::selective),
                  error);
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

TEST_CASE("with flash attention selective recomputation adds no FLOPs: nothing is stored to recompute") {
  // Eager: selective recomputes the attention core's forward, 12 L s^2 h per sample (Korthikanti Appendix A:
  // 12 x 48 x 2048^2 x 6144 for the 22B model). With flash attention none's count, in the closed form (GPT) and in
  // the split (a SwiGLU shape goes through it); until 2026-12 both added the 12 L s^2 h while the memory was none's.
  transformer_shape t = model_22b;
  CHECK(training_flops_per_sample(t, recompute::selective) - training_flops_per_sample(t, recompute::none) ==
        Approx(12.0 * 48 * 2048.0 * 2048.0 * 6144).epsilon(1e-9));
  t.attention = attention_kernel::flash;
  CHECK(training_flops_per_sample(t, recompute::selective) == training_flops_per_sample(t, recompute::none));
  transformer_shape gated = t;
  gated.gated_mlp = true;
  gated.ffn_hidden = 16384;
  CHECK(training_flops_split(gated, recompute::selective).other == training_flops_split(gated, recompute::none).other);
  CHECK(training_flops_per_sample(gated, recompute::selective) == training_flops_per_sample(gated, recompute::none));
  gated.attention = attention_kernel::eager;
  CHECK(training_flops_split(gated, recompute::selective).other - training_flops_split(gated, recompute::none).other ==
        Approx(12.0 * 48 * 2048.0 * 2048.0 * 6144).epsilon(1e-9));
}

TEST_CASE("flash attention's backward recomputes QK^T: 2 s^2 h FLOPs per layer") {
  transformer_shape t = model_22b;
  const double eager = training_flops_per_sample(t, recompute::none);
  t.attention = attention_kernel::flash;
  // 2 x 48 x 2048^2 x 6144 = 2.4739e12 FLOPs per sample on top of the model's.
  CHECK(training_flops_per_sample(t, recompute::none) - eager ==
        Approx(2.0 * 48 * 2048.0 * 2048.0 * 6144).epsilon(1e-9));
  CHECK(training_flops_split(t, recompute::none).total() ==
        Approx(training_flops_per_sample(t, recompute::none)).epsilon(1e-15));
}

TEST_CASE("architecture options: Llama-style shapes count their parameters like the published models") {
  // Llama 2 7B: h = 4096, a = 32, L = 32, f = 11008, SwiGLU, untied, v = 32000. Per layer 4h^2 = 67,108,864 +
  // 3 h f = 135,266,304; x 32 = 6,476,005,376; embeddings 2 x 32000 x 4096 = 262,144,000: 6,738,149,376, which is the
  // 6,738,415,616 Hugging Face reports less its 65 RMSNorm weight vectors (65 x 4096 = 266,240).
  transformer_shape llama2{.sequence = 4096, .hidden = 4096, .heads = 32, .layers = 32, .vocabulary = 32000};
  llama2.ffn_hidden = 11008;
  llama2.gated_mlp = true;
  llama2.tied_embeddings = false;
  CHECK(parameter_count(llama2) == 6'738'415'616ULL - 65ULL * 4096);
  // Llama 3 8B: 8 K/V heads (GQA), f = 14336, v = 128256: attention 2h^2 + 2h(h/4) = 41,943,040, MLP 176,160,768;
  // x 32 = 6,979,321,856 + 2 x 128256 x 4096 = 1,050,673,152: 8,029,995,008 = 8,030,261,248 - 266,240.
  transformer_shape llama3 = llama2;
  llama3.kv_heads = 8;
  llama3.ffn_hidden = 14336;
  llama3.vocabulary = 128256;
  CHECK(parameter_count(llama3) == 8'030'261'248ULL - 65ULL * 4096);
  // GPT defaults unchanged: 12 L h^2 + v h.
  const transformer_shape gpt{.sequence = 2048, .hidden = 2048, .heads = 16, .layers = 24, .vocabulary = 50257};
  CHECK(parameter_count(gpt) == 1'310'885'888ULL);
  // LoRA rank 16 on every linear layer of Llama 2 7B: q, k, v, o 4 x 2rh + gate, up, down 3r(h + f) = 78,080 r per
  // layer; x 16 x 32 = 39,976,960 (the trainable count PEFT prints for this setup). GPT: 16 r h L.
  CHECK(lora_parameters(llama2, 16) == 39'976'960ULL);
  CHECK(lora_parameters(gpt, 16) == 16ULL * 16 * 2048 * 24);
  // The largest layer: Llama 3's 128256 x 4096 embedding; a GPT MLP h x 4h when the vocabulary is small.
  CHECK(largest_layer_parameters(llama3) == 128256ULL * 4096);
  CHECK_THROWS_WITH(
      validate(transformer_shape{.sequence = 1, .hidden = 64, .heads = 8, .layers = 1, .vocabulary = 1, .kv_heads = 3}),
      Catch::Contains("kv_heads"));
}

TEST_CASE("architecture options change what a layer stores and the linear FLOPs") {
  // s = 128, h = 256, a = 4, 2 K/V heads, f = 512 gated, b = 1, 2-byte activations, sbh = 32,768:
  // whole (4e + 2) = 10 sbh; split e (1 + 2 x 2/4) = 4, + e = 2, + 4e f/h = 16: 22 sbh; core 5 a s^2 = 327,680.
  transformer_shape t{.sequence = 128, .hidden = 256, .heads = 4, .layers = 2, .vocabulary = 1000};
  t.kv_heads = 2;
  t.ffn_hidden = 512;
  t.gated_mlp = true;
  CHECK(activation_bytes_per_layer(t, 1, recompute::none) == 32ULL * 32768 + 327'680ULL);
  t.tensor_parallel = 2;  // the 22 sbh (and the core) split by t = 2
  CHECK(activation_bytes_per_layer(t, 1, recompute::none) == 10ULL * 32768 + 11ULL * 32768 + 163'840ULL);
  // Linear FLOPs: 3 passes x 2 s x L x layer parameters. Per layer: 2h^2 + 2h(h/2) + 3 h f = 131,072 + 65,536 +
  // 393,216 = 589,824; 6 x 128 x 2 x 589,824 = 905,969,664.
  t.tensor_parallel = 1;
  CHECK(layer_parameters(t) == 589'824ULL);
  CHECK(training_flops_split(t, recompute::none).linear == Approx(905'969'664.0).epsilon(1e-15));
  CHECK(training_flops_per_sample(t, recompute::none) ==
        Approx(training_flops_split(t, recompute::none).total()).epsilon(1e-15));
}

TEST_CASE("chunked cross-entropy: no s x v logits stored, one chunk's logits and gradient in backward") {
  // GPT-2 small with flash attention (s = 1024, h = 768, a = 12, L = 12, v = 50257), per sample:
  //   embedding mask s h = 786,432; 12 layers x 26,787,840 (34 s h + 4 a s) = 321,454,080;
  //   final norm and output-layer input 2e s h = 4 x 786,432 = 3,145,728 -> 325,386,240 before the logits.
  transformer_shape gpt2{.sequence = 1024,
                         .hidden = 768,
                         .heads = 12,
                         .layers = 12,
                         .vocabulary = 50257,
                         .attention = attention_kernel::flash};
  // Full logits: + 4 s v = 205,852,672 stored, + the same again as the backward's gradient: 737,091,584 at the peak.
  activation_ledger full = activation_ledger_for(gpt2, 1, recompute::none);
  CHECK(full.stored_bytes == 325'386'240ULL + 205'852'672ULL);
  CHECK(full.peak_bytes == 325'386'240ULL + 2 * 205'852'672ULL);
  // Chunked with Liger's default k = ceil(50257 / 768) = 66 chunks (65 x 768 = 49,920 < 50,257): c = ceil(1024 / 66)
  // = 16 tokens per chunk; the forward holds 4 c v = 3,216,448 at a time, the backward 8 c v = 6,432,896.
  CHECK(default_cross_entropy_chunks(gpt2) == 66);
  gpt2.cross_entropy_chunks = 66;
  const activation_ledger chunked = activation_ledger_for(gpt2, 1, recompute::none);
  CHECK(chunked.stored_bytes == 325'386'240ULL);
  CHECK(chunked.peak_bytes == 325'386'240ULL + 6'432'896ULL);
  CHECK(chunked.peak_block == "backward: one chunk's logits + gradient (fp32)");
  CHECK(chunked.entries.at(14).bytes == 3'216'448ULL);  // embedding, 12 layers, head input, then the forward chunk
  CHECK(chunked.entries.at(14).transient);
  // At microbatch 4 every term is 4x (the chunk taken per sample: ceil(b s / k) <= b ceil(s / k) tokens).
  CHECK(activation_ledger_for(gpt2, 4, recompute::none).peak_bytes == 4 * (325'386'240ULL + 6'432'896ULL));
  // The backward recomputes the chunks' logits: one more output-layer forward, 2 s h v = 79,047,426,048 FLOPs.
  transformer_shape stored = gpt2;
  stored.cross_entropy_chunks = 0;
  CHECK(chunked_loss_recompute_flops(gpt2) == 79'047'426'048.0);
  CHECK(training_flops_per_sample(gpt2, recompute::none) - training_flops_per_sample(stored, recompute::none) ==
        Approx(79'047'426'048.0).epsilon(1e-12));
  // One chunk per token is the most; more chunks than tokens is refused.
  gpt2.cross_entropy_chunks = 1025;
  CHECK_THROWS_WITH(validate(gpt2), Catch::Contains("cross_entropy_chunks"));
}
