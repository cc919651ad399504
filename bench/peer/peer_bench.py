#!/usr/bin/env python3
"""The simulator against PyTorch on the CPU, in one run (issue 18).

Trains the default scenario's transformer, and a copy N times wider (--wide, default 4), in PyTorch (fp32,
1 and 2 threads) and in safeamp's simulator (its fp32 reference and its emulated "fp16-mixed dynamic"
candidate, 1 and 2 threads, through the bench/peer driver safeamp_peer_sim), interleaved and repeated, and
prints each configuration's median time and its ratio to PyTorch fp32 at the same thread count.

The PyTorch model is built from what the driver says the scenario is (`safeamp_peer_sim --describe`):
token + learned position embeddings, pre-norm blocks (LN, fused QKV, causal softmax attention, output
projection, LN, Linear-GELU(tanh)-Linear with the scenario's ffn multiplier), a final LN and a linear head over
the corpus's byte vocabulary; cross-entropy times the scenario's loss multiplier; torch.optim.AdamW with the
scenario's learning rate, betas, epsilon and weight decay; clip_grad_norm_ at the scenario's clip norm; the
scenario's batch (sequences of `context` bytes of the same corpus) and steps; then one forward over the
held-out sequences, as the simulator's run ends with its evaluation. Timed: model construction, every step and
that evaluation, on both sides (the simulator's figure is train()'s wall time; its step-only time is printed
too; PyTorch's one-time start-up in the process is excluded by an untimed warm-up run). Not a test and not run in CI: it needs PyTorch (`pip install torch`) and minutes of quiet CPU.

Usage:
    python3 bench/peer/peer_bench.py [--driver build/bench/peer/safeamp_peer_sim] [--repeats 3]
                                     [--steps N] [--wide 4] [--threads 1,2] [--json out.json]
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # not an error of the benchmark: say so and stop
    print("peer_bench.py: PyTorch is not importable here (pip install torch); nothing measured", file=sys.stderr)
    sys.exit(77)


def describe(driver, width_multiplier):
    out = subprocess.run([driver, "--describe", "--width-multiplier", str(width_multiplier)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


class Block(nn.Module):
    """Pre-norm block: x += proj(attention(qkv(LN1 x))); x += fc2(GELU(fc1(LN2 x)))."""

    def __init__(self, width, heads, ffn_multiplier):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width, eps=1e-5)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width, eps=1e-5)
        self.fc1 = nn.Linear(width, ffn_multiplier * width)
        self.fc2 = nn.Linear(ffn_multiplier * width, width)

    def forward(self, x):  # x (B, T, C)
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(o.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Transformer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.tokens = nn.Embedding(d["vocab"], d["width"])
        self.positions = nn.Embedding(d["context"], d["width"])
        self.blocks = nn.ModuleList(Block(d["width"], d["heads"], d["ffn_multiplier"]) for _ in range(d["layers"]))
        self.final_ln = nn.LayerNorm(d["width"], eps=1e-5)
        self.head = nn.Linear(d["width"], d["vocab"])
        for name, p in self.named_parameters():  # the simulator's initialisation scales (models.cpp)
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2 and "ln" not in name:
                std = 0.1 if name.startswith(("tokens", "positions")) else 1.0 / math.sqrt(p.shape[1])
                nn.init.normal_(p, std=std)

    def forward(self, idx):  # idx (B, T) -> logits (B*T, vocab)
        t = idx.shape[1]
        x = self.tokens(idx) + self.positions(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.final_ln(x)).view(-1, self.head.out_features)


class Corpus:
    """The corpus's bytes as ids of its sorted distinct bytes (as the simulator's corpus_data), split as it is."""

    def __init__(self, d):
        with open(d["corpus_path"], "rb") as f:
            data = f.read()
        alphabet = sorted(set(data))
        if len(alphabet) != d["vocab"]:
            raise SystemExit(f"peer_bench.py: {d['corpus_path']} has {len(alphabet)} distinct bytes, the driver "
                             f"says {d['vocab']}")
        lookup = {b: i for i, b in enumerate(alphabet)}
        self.ids = torch.tensor([lookup[b] for b in data], dtype=torch.long)
        self.split = len(data) - int(d["eval_fraction"] * len(data))
        self.context = d["context"]

    def train_batch(self, gen, sequences):
        starts = torch.randint(0, self.split - self.context, (sequences,), generator=gen)
        window = starts[:, None] + torch.arange(self.context + 1)[None, :]
        w = self.ids[window]
        return w[:, :-1], w[:, 1:].reshape(-1)

    def eval_set(self, count):
        t = self.context
        count = min(count, (len(self.ids) - self.split - 1) // t)
        starts = self.split + t * torch.arange(count)
        w = self.ids[starts[:, None] + torch.arange(t + 1)[None, :]]
        return w[:, :-1], w[:, 1:].reshape(-1)


def torch_run(d, corpus, threads, steps):
    """Seconds of one fp32 PyTorch run (model, steps, held-out forward) and of its steps alone."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    torch.manual_seed(1)
    model = Transformer(d)
    opt = torch.optim.AdamW(model.parameters(), lr=d["learning_rate"], betas=(d["beta1"], d["beta2"]),
                            eps=d["epsilon"], weight_decay=d["weight_decay"])
    gen = torch.Generator().manual_seed(1)
    steps_start = time.perf_counter()
    for _ in range(steps):
        x, y = corpus.train_batch(gen, d["batch_size"])
        loss = F.cross_entropy(model(x), y) * d["loss_multiplier"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if d["clip_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), d["clip_norm"])
        opt.step()
    steps_seconds = time.perf_counter() - steps_start
    with torch.no_grad():
        x, y = corpus.eval_set(d["eval_samples"])
        final = F.cross_entropy(model(x), y).item()
    return {"wall_seconds": time.perf_counter() - start, "step_seconds": steps_seconds, "final_loss": final}


def sim_run(driver, policy, width_multiplier, threads, steps):
    cmd = [driver, "--policy", policy, "--width-multiplier", str(width_multiplier), "--threads", str(threads),
           "--steps", str(steps)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_driver = os.path.join(here, "..", "..", "build", "bench", "peer", "safeamp_peer_sim")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", default=default_driver, help="the safeamp_peer_sim binary")
    ap.add_argument("--repeats", type=int, default=3, help="rounds over every configuration (median taken)")
    ap.add_argument("--steps", type=int, default=0, help="steps per run (0: the scenario's)")
    ap.add_argument("--wide", type=int, default=4, help="width multiplier of the wide shape (0: default shape only)")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--json", help="also write every measurement here")
    args = ap.parse_args()

    threads = [int(t) for t in args.threads.split(",")]
    shapes = [1] + ([args.wide] if args.wide > 1 else [])
    described = {m: describe(args.driver, m) for m in shapes}
    corpora = {m: Corpus(described[m]) for m in shapes}
    steps = {m: args.steps or described[m]["steps"] for m in shapes}
    kinds = [("torch", "fp32")] + [("sim", p) for p in ("fp32", "fp16-mixed")]
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for m in shapes:
        d = described[m]
        print(f"shape x{m}: width {d['width']}, heads {d['heads']}, layers {d['layers']}, context {d['context']}, "
              f"vocab {d['vocab']}, batch {d['batch_size']}, {steps[m]} steps")

    # PyTorch's first run in a process pays one-time start-up (library loading, kernel selection, thread pool):
    # a short untimed run per shape and thread count first, so that the rounds time training only.
    for m in shapes:
        for t in threads:
            torch_run(described[m], corpora[m], t, 2)
    results = {}  # (m, side, policy, threads) -> list of runs
    for rep in range(args.repeats):
        for m in shapes:
            for t in threads:
                for side, policy in kinds:
                    if side == "torch":
                        r = torch_run(described[m], corpora[m], t, steps[m])
                    else:
                        r = sim_run(args.driver, policy, m, t, steps[m])
                    results.setdefault((m, side, policy, t), []).append(r)
                    print(f"  round {rep + 1}: x{m} {side} {policy} {t} thread(s): {r['wall_seconds']:.3f} s "
                          f"(steps {r['step_seconds']:.3f} s)", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    def med(key, field):
        return statistics.median(r[field] for r in results[key])

    print("\nmedian of %d rounds; ratio = time / PyTorch fp32 time at the same thread count (<= 1.0: faster)"
          % args.repeats)
    print(f"{'shape':>5} {'threads':>7} {'run':<18} {'total s':>8} {'ratio':>6} {'steps s':>8} {'ratio':>6}")
    for m in shapes:
        for t in threads:
            base = (m, "torch", "fp32", t)
            for side, policy in kinds:
                key = (m, side, policy, t)
                wall, step = med(key, "wall_seconds"), med(key, "step_seconds")
                print(f"{'x' + str(m):>5} {t:>7} {side + ' ' + policy:<18} {wall:>8.3f} "
                      f"{wall / med(base, 'wall_seconds'):>6.2f} {step:>8.3f} {step / med(base, 'step_seconds'):>6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"width_multiplier": k[0], "side": k[1], "policy": k[2], "threads": k[3], "runs": v}
                       for k, v in results.items()], f, indent=1)


if __name__ == "__main__":
    main()
