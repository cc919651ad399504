// The device table: datasheet capacity, memory bandwidth and dense peak throughput of common training cards (24 GB
// cards first, then 12-16 GB GeForce, 32-48 GB cards, then data-center HBM parts), each figure with its source.
#pragma once

#include <cstdint>

#include "safeamp/memory/device_spec.hpp"

namespace safeamp {

// Sources (the figures are facts transcribed from them; see docs/memory.md, "Device table"):
//  [ADA]   NVIDIA Ada GPU Architecture whitepaper v2.02, Appendix A (RTX 4090 column); v2.02 corrected
//          FP8-with-FP32-accumulate to 330.3 TFLOPS (earlier versions printed 660.6).
//  [GA102] NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A (RTX 3090 column).
//  [A100]  NVIDIA A100 Tensor Core GPU Architecture whitepaper, Table 3 / "NVIDIA Ampere Architecture In-Depth".
//  [H100]  NVIDIA H100 datasheet (SXM5), sparse figures halved; cross-checked with glennklockwood.com's table.
//  [H200]  NVIDIA H200 datasheet: same GH100 compute as H100 SXM, 141 GB HBM3e at 4.8 TB/s.
//  [A10], [L4], [A5000]  NVIDIA product datasheets (headline tensor figures are "with sparsity", halved
//          here), cross-checked by tensor cores x boost clock x 256 FLOP/clock (dense FP16, FP32 accumulate).
//  [A6000] NVIDIA RTX A6000 datasheet: "Tensor Performance 309.7 TFLOPS" (sparse), halved; 336 TC x 1.8 GHz x 256.
//  [L40S]  NVIDIA L40S datasheet: FP32 91.6, TF32 183, BF16/FP16 362.05, FP8 733 TFLOPS dense (366, 733, 1466 with
//          sparsity), 48 GB GDDR6 with ECC, 864 GB/s.
//  [A100-80] NVIDIA A100 datasheet, 80GB SXM column: 2,039 GB/s HBM2e; compute as the 40GB part.
//  [H100P] NVIDIA H100 datasheet, PCIe column: FP32 51, TF32 756, BF16/FP16 1,513, FP8 3,026 TFLOPS with sparsity
//          (halved here), 80 GB HBM2e at 2 TB/s.
//  [H200N] NVIDIA H200 datasheet, NVL column: FP32 60, TF32 835, BF16/FP16 1,671, FP8 3,341 TFLOPS with sparsity
//          (halved here), 141 GB HBM3e at 4.8 TB/s.
//  [DERIVED] GeForce rows without a retrieved whitepaper (RTX 4080, RTX 3060, RTX 5090): tensor cores x boost clock x
//          128 FLOP/clock (GeForce tensor math with FP32 accumulate runs at half the 256 of the pro parts, as the
//          whitepapers show for the RTX 4090 and 3090: 512 x 2.52 x 128 = 165.2, 328 x 1.695 x 128 = 71.2); their
//          capacities are the nominal GiB (nvidia-smi reports a little less: pass --capacity). The NVIDIA Ada
//          whitepaper's Appendix A (RTX 4080 column), the RTX Blackwell whitepaper (RTX 5090) and NVIDIA's RTX 3060
//          page were searched for and not retrieved (the GA102 whitepaper's Appendix A has the RTX 3090 and 3070 only),
//          so these stay derived; they are cross-checked against press spec tables ([PRESS]).
//  [PRESS] Secondary figures the derived rows are checked against (devices_roofline_test.cpp):
//          RTX 4080: Tom's Hardware's spec table (reproduced by holynerdvana.com, 2022-11-01): FP32 48.7 TFLOPS,
//            "FP16 TFLOPS with Sparsity (FP8) 390 (780)" (FP16 accumulate), 717 GB/s, 304 tensor cores, 2505 MHz.
//          RTX 5090: Linux Format, May 2025 (J. Walton) spec box: 104 FP32, 838 FP16, 3,352 FP8/4 TFLOPS (sparse, FP16
//            accumulate), 1,792 GB/s, 680 tensor cores, 2,407 MHz, 28 Gb/s on 512 bits.
//          RTX 3060: TechPowerUp's GPU database (via sysrqmts.com): FP32 12.74 TFLOPS, 360 GB/s, 112 tensor cores,
//            1777 MHz boost, 15 Gbps on 192 bits.
//  Capacities of the 24 GB cards are the totals nvidia-smi reports (MiB), because that is what a
//  process can allocate from; ECC on the data-center GDDR6 parts takes ~6.25%.
inline constexpr device_spec known_devices[] = {
    {.name = "RTX 4090",
     .capacity_bytes = 24564 * detail::mebibyte,          // nvidia-smi total 24564 MiB (23.99 GiB)
     .memory_bytes_per_second = 1008 * detail::giga,      // [ADA] 1008 GB/s GDDR6X
     .peak_fp32_flops = 82.6 * detail::tera,              // [ADA] 82.6 TFLOPS FP32
     .peak_tf32_flops = 82.6 * detail::tera,              // [ADA] TF32 tensor 82.6 dense (165.2 sparse)
     .peak_fp16_flops = 165.2 * detail::tera,             // [ADA] FP16 tensor, FP32 acc: 165.2 (half rate)
     .peak_bf16_flops = 165.2 * detail::tera,             // [ADA] BF16 tensor, FP32 acc: 165.2 (half rate)
     .peak_fp8_flops = 330.3 * detail::tera,              // [ADA] v2.02: FP8, FP32 acc 330.3 (FP16 acc 660.6)
     .peak_fp16_fp16_accumulate_flops = 330.3 * detail::tera,  // [ADA] FP16 tensor, FP16 acc: 330.3
     .half_rate_fp32_accumulate = true,
     .source = "NVIDIA Ada GPU Architecture whitepaper v2.02, Appendix A"},
    {.name = "RTX 3090",
     .capacity_bytes = 24268 * detail::mebibyte,          // nvidia-smi total 24268 MiB (typical)
     .memory_bytes_per_second = 936 * detail::giga,       // [GA102] 936 GB/s GDDR6X
     .peak_fp32_flops = 35.6 * detail::tera,              // [GA102] 35.6 TFLOPS FP32
     .peak_tf32_flops = 35.6 * detail::tera,              // [GA102] TF32 tensor 35.6 dense (= FP32 rate)
     .peak_fp16_flops = 71.0 * detail::tera,              // [GA102] FP16 tensor, FP32 acc: 71 (half rate)
     .peak_bf16_flops = 71.0 * detail::tera,              // [GA102] BF16 tensor, FP32 acc: 71 (half rate)
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 142.0 * detail::tera,  // [GA102] FP16 acc: 142
     .half_rate_fp32_accumulate = true,
     .source = "NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A"},
    {.name = "A10",
     .capacity_bytes = 23028 * detail::mebibyte,          // nvidia-smi 23028 MiB with ECC on (24564 off)
     .memory_bytes_per_second = 600 * detail::giga,       // [A10] 600 GB/s GDDR6
     .peak_fp32_flops = 31.2 * detail::tera,              // [A10] 31.2 TFLOPS FP32
     .peak_tf32_flops = 62.5 * detail::tera,              // [A10] TF32 tensor 62.5 dense (125 sparse)
     .peak_fp16_flops = 125.0 * detail::tera,             // [A10] 125 dense (250 sparse); 288 TC x 1.695 GHz x 256
     .peak_bf16_flops = 125.0 * detail::tera,             // [A10] same as FP16
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 125.0 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA A10 datasheet (sparse figures halved); 288 tensor cores x 1.695 GHz x 256"},
    {.name = "L4",
     .capacity_bytes = 23034 * detail::mebibyte,          // nvidia-smi 23034 MiB (ECC on)
     .memory_bytes_per_second = 300 * detail::giga,       // [L4] 300 GB/s GDDR6
     .peak_fp32_flops = 30.3 * detail::tera,              // [L4] 30.3 TFLOPS FP32
     .peak_tf32_flops = 60.0 * detail::tera,              // [L4] TF32 tensor 60 dense (120 sparse)
     .peak_fp16_flops = 121.0 * detail::tera,             // [L4] 121 dense (242 sparse); 232 TC x 2.04 GHz x 256
     .peak_bf16_flops = 121.0 * detail::tera,             // [L4] same as FP16
     .peak_fp8_flops = 242.5 * detail::tera,              // [L4] FP8 242.5 dense (485 sparse)
     .peak_fp16_fp16_accumulate_flops = 121.0 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA L4 datasheet (sparse figures halved); 232 tensor cores x 2.04 GHz x 256"},
    {.name = "RTX A5000",
     .capacity_bytes = 24564 * detail::mebibyte,          // nvidia-smi 24564 MiB (ECC off)
     .memory_bytes_per_second = 768 * detail::giga,       // [A5000] 768 GB/s GDDR6
     .peak_fp32_flops = 27.8 * detail::tera,              // [A5000] 27.8 TFLOPS FP32
     .peak_tf32_flops = 55.6 * detail::tera,              // [DERIVED] half the FP16 dense rate
     .peak_fp16_flops = 111.1 * detail::tera,             // [A5000] "Tensor 222.2 TFLOPS" sparse / 2; 256 TC x 1.695 x 256
     .peak_bf16_flops = 111.1 * detail::tera,             // same as FP16
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 111.1 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA RTX A5000 datasheet (222.2 sparse tensor TFLOPS halved); 256 TC x 1.695 GHz x 256"},
    {.name = "RTX 4080",
     .capacity_bytes = 16ULL << 30,                       // 16 GiB GDDR6X (nominal)
     .memory_bytes_per_second = 716.8 * detail::giga,     // [DERIVED] 22.4 Gbps x 256-bit / 8
     .peak_fp32_flops = 48.7 * detail::tera,              // [DERIVED] 9728 cores x 2 x 2.505 GHz
     .peak_tf32_flops = 48.7 * detail::tera,              // [DERIVED] GeForce: TF32 tensor = half the FP16 rate
     .peak_fp16_flops = 97.5 * detail::tera,              // [DERIVED] 304 TC x 2.505 GHz x 128 (half rate)
     .peak_bf16_flops = 97.5 * detail::tera,
     .peak_fp8_flops = 194.9 * detail::tera,              // [DERIVED] twice the FP16 rate, as on the RTX 4090
     .peak_fp16_fp16_accumulate_flops = 194.9 * detail::tera,
     .half_rate_fp32_accumulate = true,
     .source = "derived: 304 tensor cores x 2.505 GHz x 128 (GeForce half rate); Ada whitepaper's RTX 4080 column not retrieved; press figures agree"},
    {.name = "RTX 3060",
     .capacity_bytes = 12ULL << 30,                       // 12 GiB GDDR6 (nominal)
     .memory_bytes_per_second = 360 * detail::giga,       // [DERIVED] 15 Gbps x 192-bit / 8
     .peak_fp32_flops = 12.7 * detail::tera,              // [DERIVED] 3584 cores x 2 x 1.777 GHz
     .peak_tf32_flops = 12.7 * detail::tera,              // [DERIVED] Ampere GeForce: TF32 = FP32 rate
     .peak_fp16_flops = 25.5 * detail::tera,              // [DERIVED] 112 TC x 1.777 GHz x 128 (half rate)
     .peak_bf16_flops = 25.5 * detail::tera,
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 51.0 * detail::tera,
     .half_rate_fp32_accumulate = true,
     .source = "derived: 112 tensor cores x 1.777 GHz x 128 (GeForce half rate); no whitepaper lists the RTX 3060; press figures agree"},
    {.name = "RTX 5090",
     .capacity_bytes = 32ULL << 30,                       // 32 GiB GDDR7 (nominal)
     .memory_bytes_per_second = 1792 * detail::giga,      // [DERIVED] 28 Gbps x 512-bit / 8
     .peak_fp32_flops = 104.8 * detail::tera,             // [DERIVED] 21760 cores x 2 x 2.407 GHz
     .peak_tf32_flops = 104.8 * detail::tera,             // [DERIVED] half the FP16 rate, as on Ada GeForce
     .peak_fp16_flops = 209.5 * detail::tera,             // [DERIVED] 680 TC x 2.407 GHz x 128 (half rate)
     .peak_bf16_flops = 209.5 * detail::tera,
     .peak_fp8_flops = 419.0 * detail::tera,              // [DERIVED] twice the FP16 rate
     .peak_fp16_fp16_accumulate_flops = 419.0 * detail::tera,  // [PRESS] 838 FP16 tensor TFLOPS with sparsity / 2
     .half_rate_fp32_accumulate = true,
     .source = "derived: 680 tensor cores x 2.407 GHz x 128 (half rate assumed as on Ada); RTX Blackwell whitepaper not retrieved; press figures agree"},
    {.name = "RTX A6000",
     .capacity_bytes = 48ULL << 30,                       // 48 GiB GDDR6 (nominal; ECC on takes ~6.25%)
     .memory_bytes_per_second = 768 * detail::giga,       // [A6000] 768 GB/s
     .peak_fp32_flops = 38.7 * detail::tera,              // [A6000] 38.7 TFLOPS FP32
     .peak_tf32_flops = 77.4 * detail::tera,              // [DERIVED] half the FP16 dense rate
     .peak_fp16_flops = 154.8 * detail::tera,             // [A6000] 309.7 sparse / 2
     .peak_bf16_flops = 154.8 * detail::tera,
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 154.8 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA RTX A6000 datasheet (309.7 sparse tensor TFLOPS halved); 336 TC x 1.8 GHz x 256"},
    {.name = "L40S",
     .capacity_bytes = 48ULL << 30,                       // [L40S] 48 GB GDDR6 (nominal GiB; ECC on takes ~6.25%)
     .memory_bytes_per_second = 864 * detail::giga,       // [L40S] 864 GB/s
     .peak_fp32_flops = 91.6 * detail::tera,              // [L40S] 91.6
     .peak_tf32_flops = 183.0 * detail::tera,             // [L40S] 183 dense (366 sparse)
     .peak_fp16_flops = 362.05 * detail::tera,            // [L40S] 362.05 dense (733 sparse)
     .peak_bf16_flops = 362.05 * detail::tera,
     .peak_fp8_flops = 733.0 * detail::tera,              // [L40S] 733 dense (1466 sparse)
     .peak_fp16_fp16_accumulate_flops = 362.05 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA L40S datasheet (dense figures as listed; sparse are 2x)"},
    {.name = "A100 40GB SXM",
     .capacity_bytes = 40 * detail::gigabyte,             // [A100] 40 GB HBM2 (nominal; read mem_get_info)
     .memory_bytes_per_second = 1555 * detail::giga,      // [A100] 1555 GB/s
     .peak_fp32_flops = 19.5 * detail::tera,              // [A100] 19.5 TFLOPS FP32
     .peak_tf32_flops = 156.0 * detail::tera,             // [A100] TF32 156 dense (312 sparse)
     .peak_fp16_flops = 312.0 * detail::tera,             // [A100] FP16 312 dense (624 sparse)
     .peak_bf16_flops = 312.0 * detail::tera,             // [A100] BF16 312 dense
     .peak_fp8_flops = 0.0,                               // Ampere has no FP8 tensor cores
     .peak_fp16_fp16_accumulate_flops = 312.0 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA A100 Tensor Core GPU Architecture whitepaper, Table 3",
     .short_name = "a100"},
    {.name = "A100 80GB SXM",
     .capacity_bytes = 80 * detail::gigabyte,             // [A100-80] 80 GB HBM2e (nominal)
     .memory_bytes_per_second = 2039 * detail::giga,      // [A100-80] 2,039 GB/s
     .peak_fp32_flops = 19.5 * detail::tera,
     .peak_tf32_flops = 156.0 * detail::tera,
     .peak_fp16_flops = 312.0 * detail::tera,
     .peak_bf16_flops = 312.0 * detail::tera,
     .peak_fp8_flops = 0.0,
     .peak_fp16_fp16_accumulate_flops = 312.0 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA A100 datasheet, 80GB SXM (compute as the 40GB part)"},
    {.name = "H100 SXM",
     .capacity_bytes = 80 * detail::gigabyte,             // [H100] 80 GB HBM3 (nominal; read mem_get_info)
     .memory_bytes_per_second = 3350 * detail::giga,      // [H100] 3.35 TB/s
     .peak_fp32_flops = 66.9 * detail::tera,              // [H100] 67 TFLOPS FP32 (66.9)
     .peak_tf32_flops = 494.7 * detail::tera,             // [H100] TF32 989.4 sparse / 2
     .peak_fp16_flops = 989.4 * detail::tera,             // [H100] FP16 1978.9 sparse / 2
     .peak_bf16_flops = 989.4 * detail::tera,             // [H100] BF16 1978.9 sparse / 2
     .peak_fp8_flops = 1978.9 * detail::tera,             // [H100] FP8 3957.8 sparse / 2
     .peak_fp16_fp16_accumulate_flops = 989.4 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA H100 datasheet, SXM5 (sparse figures halved)",
     .short_name = "h100"},
    {.name = "H100 PCIe",
     .capacity_bytes = 80 * detail::gigabyte,             // [H100P] 80 GB HBM2e (nominal)
     .memory_bytes_per_second = 2000 * detail::giga,      // [H100P] 2 TB/s
     .peak_fp32_flops = 51.0 * detail::tera,              // [H100P] 51 TFLOPS FP32
     .peak_tf32_flops = 378.0 * detail::tera,             // [H100P] TF32 756 sparse / 2
     .peak_fp16_flops = 756.5 * detail::tera,             // [H100P] FP16 1513 sparse / 2
     .peak_bf16_flops = 756.5 * detail::tera,             // [H100P] BF16 1513 sparse / 2
     .peak_fp8_flops = 1513.0 * detail::tera,             // [H100P] FP8 3026 sparse / 2
     .peak_fp16_fp16_accumulate_flops = 756.5 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA H100 datasheet, PCIe (sparse figures halved)"},
    {.name = "H200 SXM",
     .capacity_bytes = 141 * detail::gigabyte,            // [H200] 141 GB HBM3e (nominal; read mem_get_info)
     .memory_bytes_per_second = 4800 * detail::giga,      // [H200] 4.8 TB/s
     .peak_fp32_flops = 67.0 * detail::tera,              // [H200] 67 TFLOPS FP32
     .peak_tf32_flops = 494.7 * detail::tera,             // [H200] same GH100 compute as H100 SXM
     .peak_fp16_flops = 989.4 * detail::tera,
     .peak_bf16_flops = 989.4 * detail::tera,
     .peak_fp8_flops = 1978.9 * detail::tera,
     .peak_fp16_fp16_accumulate_flops = 989.4 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA H200 datasheet (sparse figures halved)",
     .short_name = "h200"},
    {.name = "H200 NVL",
     .capacity_bytes = 141 * detail::gigabyte,            // [H200N] 141 GB HBM3e (nominal)
     .memory_bytes_per_second = 4800 * detail::giga,      // [H200N] 4.8 TB/s
     .peak_fp32_flops = 60.0 * detail::tera,              // [H200N] 60 TFLOPS FP32
     .peak_tf32_flops = 417.5 * detail::tera,             // [H200N] TF32 835 sparse / 2
     .peak_fp16_flops = 835.5 * detail::tera,             // [H200N] FP16 1671 sparse / 2
     .peak_bf16_flops = 835.5 * detail::tera,             // [H200N] BF16 1671 sparse / 2
     .peak_fp8_flops = 1670.5 * detail::tera,             // [H200N] FP8 3341 sparse / 2
     .peak_fp16_fp16_accumulate_flops = 835.5 * detail::tera,
     .half_rate_fp32_accumulate = false,
     .source = "NVIDIA H200 datasheet, NVL (sparse figures halved)"},
};

}  // namespace safeamp
