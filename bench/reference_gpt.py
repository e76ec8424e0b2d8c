#!/usr/bin/env python3
"""reference_gpt.py — the posgrad GPT in PyTorch, for a side-by-side throughput table with
bench_train (same sizes, same position encodings, same step: forward, backward, clip, AdamW).

    python3 bench/reference_gpt.py --size gpt2 --device cuda
    ./build/bench/bench_train --size gpt2 --device cuda

Position encodings follow ../shared/SPEC-positions.md: T5 bucketed bias (causal buckets, one table
shared by all layers, added after 1/sqrt(d)), DeBERTa c2p + p2c with log buckets and a shared
LayerNorm-ed relative table projected by the content W_q/W_k (share_att_key), scale 1/sqrt(3d),
RoPE rotate-half, ALiBi causal slopes, sinusoidal (Vaswani interleaved), learned, none.
A reference for speed only: it is not used by posgrad and not part of the test suite.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # layers, heads, width, context, default batch, vocab
    "compare": (2, 4, 64, 64, 16, 65),
    "nanogpt": (4, 4, 128, 64, 12, 65),
    "gpt2": (12, 12, 768, 1024, 8, 50304),
}


def t5_bucket(n, num_buckets=32, max_distance=128):
    """Causal T5 bucket of n = max(i - j, 0) (spec §1.2)."""
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    return torch.where(n < max_exact, n, large.clamp(max=num_buckets - 1))


def deberta_bucket(r, pb=32, max_pos=128):
    """make_log_bucket_position (spec §2.2), r = i - j."""
    mid = pb // 2
    a = r.abs().float()
    lp = mid + torch.ceil(torch.log(a.clamp(min=1) / mid) / math.log((max_pos - 1) / mid) * (mid - 1))
    return torch.where(r.abs() <= mid, r, (torch.sign(r) * lp).long())


def alibi_slopes(n):
    c = 2 ** math.floor(math.log2(n))
    s = [2 ** (-8 * h / c) for h in range(1, c + 1)]
    s += [2 ** (-4 * (2 * t - 1) / c) for t in range(1, n - c + 1)]
    return torch.tensor(s)


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.H = H

    def attn(self, x, pe, rel):
        B, T, C = x.shape
        H, D = self.H, C // self.H
        q, k, v = self.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        scale = 1 / math.sqrt(D)
        bias = None
        if pe.kind == "rope":
            q, k = pe.rotate(q), pe.rotate(k)
        elif pe.kind in ("t5", "alibi"):
            bias = pe.bias(T)
        elif pe.kind == "deberta":
            R = pe.rel_ln(pe.rel_emb)                      # (2S, C), shared by all layers
            Wq, Wk, _ = self.qkv.weight.split(C)
            bq, bk, _ = self.qkv.bias.split(C)
            kr = F.linear(R, Wk, bk).view(-1, H, D).transpose(0, 1)  # (H, 2S, D)
            qr = F.linear(R, Wq, bq).view(-1, H, D).transpose(0, 1)
            idx = pe.rows(T)                                   # (T, T) row c(i, j)
            c2p = torch.einsum("bhid,hrd->bhir", q, kr).gather(3, idx.expand(B, H, T, T))
            p2c = torch.einsum("bhjd,hrd->bhjr", k, qr).gather(3, idx.t().expand(B, H, T, T)).transpose(2, 3)
            scale = 1 / math.sqrt(3 * D)
            bias = (c2p + p2c) * scale
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        if bias is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")), scale=scale)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x, pe, rel):
        x = x + self.attn(self.ln_1(x), pe, rel)
        return x + self.out(F.gelu(self.fc(self.ln_2(x))))


class PosEnc(nn.Module):
    def __init__(self, kind, C, H, T):
        super().__init__()
        self.kind, self.H, self.D = kind, H, C // H
        if kind == "learned":
            self.table = nn.Parameter(torch.randn(T, C) * 0.02)
        if kind == "t5":
            self.t5 = nn.Embedding(32, H)
        if kind == "deberta":
            self.rel_emb = nn.Parameter(torch.randn(64, C) * 0.02)
            self.rel_ln = nn.LayerNorm(C)
        if kind == "alibi":
            self.register_buffer("slopes", alibi_slopes(H))

    def embed(self, x):
        T, C = x.shape[1], x.shape[2]
        if self.kind == "learned":
            return x + self.table[:T]
        if self.kind == "sinusoidal":
            p = torch.arange(T, device=x.device).float()[:, None]
            w = torch.exp(-math.log(10000.0) * torch.arange(0, C, 2, device=x.device).float() / C)
            pe = torch.zeros(T, C, device=x.device)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(p * w), torch.cos(p * w)
            return x * math.sqrt(C) + pe
        return x

    def rotate(self, q):
        T, D = q.shape[2], q.shape[3]
        w = 10000.0 ** (-torch.arange(0, D, 2, device=q.device).float() / D)
        th = torch.arange(T, device=q.device).float()[:, None] * w
        cos, sin = torch.cat([th.cos(), th.cos()], -1), torch.cat([th.sin(), th.sin()], -1)
        rot = torch.cat([-q[..., D // 2:], q[..., :D // 2]], -1)
        return q * cos + rot * sin

    def bias(self, T):
        i = torch.arange(T, device=self.t5.weight.device if self.kind == "t5" else self.slopes.device)
        r = i[None, :] - i[:, None]  # j - i
        if self.kind == "t5":
            return self.t5(t5_bucket((-r).clamp(min=0))).permute(2, 0, 1)  # (H, T, T)
        return self.slopes[:, None, None] * r  # ALiBi causal m (j - i)

    def rows(self, T):
        i = torch.arange(T, device=self.rel_emb.device)
        return (deberta_bucket(i[:, None] - i[None, :]) + 32).clamp(0, 63)


class GPT(nn.Module):
    def __init__(self, kind, L, H, C, T, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.pe = PosEnc(kind, C, H, T)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx):
        x = self.pe.embed(self.wte(idx))
        for b in self.blocks:
            x = b(x, self.pe, None)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="compare", choices=SIZES)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--methods", default="none,sinusoidal,learned,t5,deberta,rope,alibi")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=0)
    a = ap.parse_args()
    L, H, C, T, B, V = SIZES[a.size]
    B = a.batch or B
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 like posgrad's default
    print(f"# pytorch {torch.__version__} size={a.size} batch={B} device={a.device}")
    print(f"{'method':<11} {'params':>12} {'tokens/s':>12} {'ms/step':>12}")
    for kind in a.methods.split(","):
        torch.manual_seed(0)
        m = GPT(kind, L, H, C, T, V).to(a.device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.1)
        times = []
        for s in range(a.warmup + a.steps):
            x = torch.randint(V, (B, T), device=a.device)
            y = torch.randint(V, (B, T), device=a.device)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(m(x).view(-1, V), y.view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            loss.item()
            if s >= a.warmup:
                times.append(time.perf_counter() - t0)
        med = sorted(times)[len(times) // 2]
        n = sum(p.numel() for p in m.parameters())
        print(f"{kind:<11} {n:>12} {B * T / med:>12.0f} {1000 * med:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
