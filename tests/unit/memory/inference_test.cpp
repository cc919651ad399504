// Inference with a KV cache (issue 14): the cache per token from its definition (K and V, every layer, every K/V head),
// checked against NVIDIA's published Llama 2 7B figure and grouped-query attention's Llama 3 8B figure; the transients
// of the prefill and of one decode step, the largest batch and the longest context on an RTX 4090, all worked by hand.
#include "safeamp/memory/inference.hpp"

#include <catch2/catch.hpp>
#include <cstdint>

#include "published_shapes.hpp"
#include "safeamp/memory/model_states.hpp"

using namespace safeamp;

namespace {
using test_shapes::llama2_7b;
using test_shapes::llama3_8b;
// The RTX 4090's pool with the tool's defaults (24564 MiB, 512 MiB context, 5% reserve, 5% fragmentation, 32 MiB
// workspace), the figure phases_test.cpp and docs/memory.md work out: 22,727,811,399 bytes.
constexpr std::uint64_t rtx4090_usable = 22'727'811'399ULL;
}  // namespace

TEST_CASE("KV cache per token: 2 x layers x K/V heads x head dim x bytes") {
  // NVIDIA, "Mastering LLM Techniques: Inference Optimization" (2023): Llama 2 7B, fp16, batch 1, 4096 tokens:
  // 1 x 4096 x 2 x 32 x 4096 x 2 bytes, "~2 GB". Per token 2 x 32 x 32 x 128 x 2 = 524,288.
  CHECK(kv_cache_bytes_per_token(llama2_7b, 2) == 524'288);
  CHECK(kv_cache_bytes_per_token(llama2_7b, 2) * 4096 == 2'147'483'648ULL);  // 2 GiB
  // Grouped-query attention stores the 8 K/V heads only: 2 x 32 x 8 x 128 x 2 = 131,072 (128 KiB per token).
  CHECK(kv_cache_bytes_per_token(llama3_8b, 2) == 131'072);
  CHECK(kv_cache_bytes_per_token(llama3_8b, 1) == 65'536);  // an fp8 cache halves it
  transformer_shape tp = llama2_7b;
  tp.tensor_parallel = 2;  // heads are split over the tensor-parallel ranks
  CHECK(kv_cache_bytes_per_token(tp, 2) == 262'144);
  CHECK_THROWS_WITH(kv_cache_bytes_per_token(llama2_7b, 0), Catch::Contains("kv-cache"));
}

TEST_CASE("Llama 2 7B in bf16 on an RTX 4090: prefill and decode per sequence, largest batch, longest context") {
  const inference_needs n = inference_needs_for({.shape = llama2_7b, .context_tokens = 4096});
  // Weights: 6,738,149,376 parameters (activations_test.cpp: Hugging Face's count less the norms) x 2 bytes.
  CHECK(n.parameters == 6'738'149'376ULL);
  CHECK(n.weight_bytes == 13'476'298'752ULL);
  // Prefill of 4096 tokens (e = 2, q = k = 4096, h = 4096, a = 32, f = 11008, flash):
  //   residual e q h = 33,554,432
  //   attention: normed input + Q + output 3 e q h + 4 a q = 100,663,296 + 524,288 = 101,187,584
  //   MLP: normed input e q h + gate, up, SiLU(gate) 3 e q f = 33,554,432 + 270,532,608 = 304,087,040 (the larger)
  //   logits of the last position, fp32: 4 v = 128,000
  // = 33,554,432 + 304,087,040 + 128,000 = 337,769,472, with the prompt's cache 4096 x 524,288 = 2,147,483,648.
  CHECK(n.prefill.transient_bytes_per_sequence == 337'769'472ULL);
  CHECK(n.prefill.kv_cache_bytes_per_sequence == 2'147'483'648ULL);
  // Decode of the last token (q = 1, k = 4096): residual 8,192 + MLP 8,192 + 6 x 11,008 = 74,240 + logits 128,000.
  CHECK(n.decode.transient_bytes_per_sequence == 210'432);
  CHECK(n.decode.kv_cache_bytes_per_sequence == 2'147'483'648ULL);
  // Largest batch: floor((22,727,811,399 - 13,476,298,752) / (2,147,483,648 + 337,769,472))
  //              = floor(9,251,512,647 / 2,485,253,120) = floor(3.72) = 3.
  CHECK(max_inference_batch(n, rtx4090_usable) == 3);
  CHECK(n.peak_bytes(3) == 13'476'298'752ULL + 3 * 2'485'253'120ULL);
  // Longest context at batch 1, all of it prompt: per token 524,288 (cache) + 8,192 (residual) + 74,240 (MLP), plus
  // the 128,000 logits: floor((9,251,512,647 - 128,000) / 606,720) = floor(15,248.2) = 15,248 tokens.
  CHECK(max_inference_context({.shape = llama2_7b, .context_tokens = 4096},
                              {.generated_tokens = 0, .batch = 1, .available_bytes = rtx4090_usable}) == 15'248);
  // The weights alone (13.5 GB) do not fit a 12 GB pool: batch 0, context 0.
  CHECK(max_inference_batch(n, 12'000'000'000ULL) == 0);
  CHECK(max_inference_context({.shape = llama2_7b, .context_tokens = 4096},
                              {.generated_tokens = 0, .batch = 1, .available_bytes = 12'000'000'000ULL}) == 0);
}

TEST_CASE("eager attention's s^2 scores dominate the prefill; all-position logits add 4 s v") {
  transformer_shape eager = llama2_7b;
  eager.attention = attention_kernel::eager;
  // Attention: normed input + Q 2 e q h = 67,108,864, scores and softmax 2 e a q^2 = 2 x 2 x 32 x 4096^2 =
  // 2,147,483,648: 2,214,592,512 > the MLP's 304,087,040. + residual 33,554,432 + logits 128,000 = 2,248,274,944.
  CHECK(inference_needs_for({.shape = eager, .context_tokens = 4096}).prefill.transient_bytes_per_sequence ==
        2'248'274'944ULL);
  // Llama 3 8B, 8192 tokens, logits of every position in fp32: 4 x 8192 x 128256 = 4,202,692,608 on top of the
  // residual 2 x 8192 x 4096 = 67,108,864 and the MLP 67,108,864 + 3 x 2 x 8192 x 14336 = 771,751,936.
  const inference_needs all =
      inference_needs_for({.shape = llama3_8b, .context_tokens = 8192, .logits = kept_logits::all});
  CHECK(all.prefill.transient_bytes_per_sequence == 67'108'864ULL + 771'751'936ULL + 4'202'692'608ULL);
  CHECK(all.prefill.kv_cache_bytes_per_sequence == 8192ULL * 131'072ULL);  // 1 GiB
}

TEST_CASE("a prompt shorter than the context: the prefill covers the prompt, the decode the whole context") {
  // 3072 prompt tokens + 1024 generated: prefill cache 3072 x 524,288 = 1,610,612,736; its MLP transient
  // 3072 x (8,192 + 74,240) + 128,000 = 253,359,104; decode as before (4096 cached).
  const inference_needs n = inference_needs_for({.shape = llama2_7b, .context_tokens = 4096, .prompt_tokens = 3072});
  CHECK(n.prefill.kv_cache_bytes_per_sequence == 1'610'612'736ULL);
  CHECK(n.prefill.transient_bytes_per_sequence == 3072ULL * 82'432ULL + 128'000ULL);
  CHECK(n.decode.kv_cache_bytes_per_sequence == 2'147'483'648ULL);
  // NF4 weights (QLoRA's 4.127 bits): 6,738,149,376 x 0.515869140625 = 3,476,003,328 exactly.
  const inference_needs q =
      inference_needs_for({.shape = llama2_7b, .context_tokens = 4096, .weight_bytes_per_param = nf4_bytes_per_param});
  CHECK(q.weight_bytes == 3'476'003'328ULL);
}

TEST_CASE("bad inference requests name the field") {
  CHECK_THROWS_WITH(inference_needs_for({.shape = llama2_7b, .context_tokens = 0}), Catch::Contains("context tokens"));
  CHECK_THROWS_WITH(inference_needs_for({.shape = llama2_7b, .context_tokens = 10, .prompt_tokens = 11}),
                    Catch::Contains("prompt tokens"));
  CHECK_THROWS_WITH(inference_needs_for({.shape = llama2_7b, .context_tokens = 10, .weight_bytes_per_param = 0.0}),
                    Catch::Contains("weight bytes"));
  CHECK_THROWS_WITH(max_inference_context({.shape = llama2_7b, .context_tokens = 10},
                                          {.generated_tokens = 0, .batch = 0, .available_bytes = rtx4090_usable}),
                    Catch::Contains("batch"));
  CHECK_THROWS_WITH(parse_kept_logits("some"), Catch::Contains("logits"));
}

TEST_CASE("the longest-context search treats a need beyond the ledger's 2^62 bytes as not fitting") {
  // Eager attention with 100,000 heads: at 10^7 tokens the scores alone are 2 x 2 x 10^5 x 10^14 = 4e19 bytes > 2^62,
  // which the ledger refuses; the search still answers for the contexts that can be counted. With h = 10^5 the weights
  // are 2 x 12 h^2 = 2.4e11 bytes and the scores 2 e a T^2 = 4e5 T^2, so a 1e12-byte pool holds about
  // sqrt(7.6e11 / 4e5) ~ 1,380 tokens, far below the 10^7 cap.
  const transformer_shape wide{.sequence = 16, .hidden = 100'000, .heads = 100'000, .layers = 1, .vocabulary = 10};
  const std::uint64_t longest =
      max_inference_context({.shape = wide, .context_tokens = 16},
                            {.generated_tokens = 0, .batch = 1, .available_bytes = 1'000'000'000'000ULL});
  CHECK(longest > 0);
  CHECK(longest < 10'000);
  CHECK(inference_needs_for({.shape = wide, .context_tokens = longest}).peak_bytes(1) <= 1'000'000'000'000ULL);
  CHECK(inference_needs_for({.shape = wide, .context_tokens = longest + 1}).peak_bytes(1) > 1'000'000'000'000ULL);
}
