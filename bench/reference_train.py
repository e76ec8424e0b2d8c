#!/usr/bin/env python3
"""reference_train.py — `posgrad train --preset nanogpt-shakespeare` in PyTorch eager, for an
end-to-end comparison of wall time and final validation loss (bench/vs_pytorch_train.sh).

    python3 bench/reference_train.py --corpus ../shared/data/tinyshakespeare.txt --threads 2

The same run as posgrad's preset: the model of reference_gpt.py (posgrad's GPT layout, tied LM
head, GELU, pre-LayerNorm) at 4 layers x 4 heads x 128 wide, context 64, learned positions; the
same initialisation scheme (normal(0, 0.02) weights, residual projections 0.02 / sqrt(2 L), zero
biases, as nanoGPT and nn/gpt.cpp); character tokens (sorted distinct bytes), the first 90% of the
tokens for training, the last 10% for validation; batches of 12 random training windows; AdamW
(lr 1e-3, betas 0.9 / 0.99, weight decay 0.1 on matrices only), 100 warm-up steps then cosine decay
to 1e-4 at step 2000, gradient clipping at 1.0; validation loss every 250 steps and at the end on
the first 200 non-overlapping windows of 64 tokens of the validation split (train/evaluate.h). Data order and
initial values come from PyTorch's generator, not posgrad's, so the two runs agree statistically,
not bit for bit. Prints one line: `wall_s=... final_val_loss=... tokens_per_s=...`. Not used by
posgrad, its tests or CI.
"""
import argparse
import math
import os
import sys
import time
import warnings

# Without numpy installed, importing torch warns "Failed to initialize NumPy"; nothing here
# uses numpy, so the warning says nothing about these results.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_gpt import GPT  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="text file (TinyShakespeare)")
    ap.add_argument("--pos", default="learned")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=0, help="0: PyTorch's default")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--eval-interval", type=int, default=250)
    a = ap.parse_args()
    if a.iters < 1:
        ap.error("--iters must be >= 1")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t_start = time.perf_counter()

    data = open(a.corpus, "rb").read()
    symbols = sorted(set(data))
    lut = torch.zeros(256, dtype=torch.long)
    for i, s in enumerate(symbols):
        lut[s] = i
    ids = lut[torch.frombuffer(bytearray(data), dtype=torch.uint8).long()]
    n_train = len(ids) * 90 // 100
    train, val = ids[:n_train], ids[n_train:]

    L, H, C, T, B, V = 4, 4, 128, 64, 12, len(symbols)
    lr, min_lr, warmup, decay_iters = 1e-3, 1e-4, 100, a.iters
    model = GPT(a.pos, L, H, C, T, V)
    for name, p in model.named_parameters():  # nn/gpt.cpp's initialisation
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
            torch.nn.init.normal_(p, 0.0, std)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.99))

    def lr_at(it):  # train/optim.h LRSchedule: linear warm-up, then cosine to min_lr
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        if it > decay_iters:
            return min_lr
        ratio = (it - warmup) / max(1, decay_iters - warmup)
        return min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (lr - min_lr)

    def evaluate():
        model.eval()
        with torch.no_grad():
            n = min(200, (len(val) - 1) // T)
            x = torch.stack([val[k * T:k * T + T] for k in range(n)])
            y = torch.stack([val[k * T + 1:k * T + T + 1] for k in range(n)])
            out = F.cross_entropy(model(x).view(-1, V), y.view(-1)).item()
        model.train()
        return out

    t_train = time.perf_counter()
    val_loss = float("nan")
    for it in range(a.iters):
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        starts = torch.randint(len(train) - T, (B,))
        x = torch.stack([train[s:s + T] for s in starts])
        y = torch.stack([train[s + 1:s + 1 + T] for s in starts])
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (it + 1) % a.eval_interval == 0 or it + 1 == a.iters:
            val_loss = evaluate()
    train_s = time.perf_counter() - t_train
    print(f"wall_s={time.perf_counter() - t_start:.2f} train_s={train_s:.2f} final_val_loss={val_loss:.4f} "
          f"tokens_per_s={a.iters * B * T / train_s:.0f} threads={torch.get_num_threads()}")


if __name__ == "__main__":
    main()
