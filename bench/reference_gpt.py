#!/usr/bin/env python3
"""reference_gpt.py — the posgrad GPT in PyTorch, for a side-by-side throughput table with
bench_train (same sizes, same position encodings, same step: forward, backward, clip, AdamW).

    python3 bench/reference_gpt.py --size gpt2 --device cuda
    ./build/bench/bench_train --size gpt2 --device cuda

The model has posgrad's layout and parameter names, so posgrad's weights load into it by name; the
PyTorch replay fixtures (bench/make_replay_fixtures.py) are made with it.

Position encodings follow ../shared/SPEC-positions.md: T5 bucketed bias (causal buckets, one table
shared by all layers, added after 1/sqrt(d)), DeBERTa c2p + p2c with log buckets and a shared
LayerNorm-ed relative table projected by the content W_q/W_k (share_att_key), scale 1/sqrt(3d),
RoPE rotate-half with the linear / dynamic NTK / YaRN / Llama 3 scalings, ALiBi causal slopes,
sinusoidal (Vaswani interleaved), learned, none; and from ../shared/SPEC-positions-2.md: partial
rotary in both conventions (§2: HF GPT-NeoX's int(D f) channels, its odd case, p-RoPE), xPos
(§6: torchscale's XPOS, centre ceil(T_train / 2)), Sandwich (§7: NeMo's form) and learnable attention
sinks (§5: gpt-oss sdpa, a sink column appended to the scores and dropped after the softmax). Not
used by posgrad, its tests or CI (the replay fixtures it makes are committed).
"""
import argparse
import logging
import math
import time
import warnings

# Without numpy installed, importing torch warns "Failed to initialize NumPy"; nothing here
# uses numpy, so the warning says nothing about these results. Likewise torch.compile's C++ setup logs
# "No CUDA runtime is found" on a CPU-only machine, where these CPU runs need none.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # layers, heads, width, context, default batch, vocab
    "compare": (2, 4, 64, 64, 16, 65),
    "nanogpt": (4, 4, 128, 64, 12, 65),
    "cpu": (6, 6, 384, 256, 16, 65),
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


class Attention(nn.Module):
    def __init__(self, C, H, sinks=False):
        super().__init__()
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.H = H
        if sinks:  # gpt-oss AttentionBlock.sinks: one logit per head
            self.sinks = nn.Parameter(torch.randn(H) * 0.02)
        else:
            self.sinks = None

    def forward(self, x, pe, layer):
        B, T, C = x.shape
        H, D = self.H, C // self.H
        q, k, v = self.qkv(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        scale = 1 / math.sqrt(D)
        bias = None
        if pe.kind == "rope":
            q, k = pe.rotate(q), pe.rotate(k)
        elif pe.kind == "xpos":
            q, k = pe.xpos(q, key=False), pe.xpos(k, key=True)
        elif pe.kind == "sandwich":
            bias = pe.sandwich_bias(T).to(q.dtype)
        elif pe.kind in ("t5", "alibi"):
            bias = pe.bias(T)
        elif pe.kind == "kerple":
            bias = pe.kerple_bias(T, layer)
        elif pe.kind == "fire":
            bias = pe.fire_bias(T, layer)
        elif pe.kind == "fox":
            bias = pe.fox_bias(x, layer)
        elif pe.kind == "cope":
            bias = pe.cope_bias(q, k, layer, scale)
        elif pe.kind == "hybrid":
            if pe.hybrid_uses_rope(layer):
                q, k = pe.rotate(q), pe.rotate(k)
            elif pe.o.get("hybrid_temperature", True):
                q = q * pe.nope_temperature(T).to(q.dtype)
        elif pe.kind == "deberta":
            R = pe.rel_norm(pe.rel_embeddings)                 # (2S, C), shared by all layers
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
        if self.sinks is not None:
            # gpt-oss sdpa: QK scale + bias + mask, the sink column appended, softmax, the column dropped.
            s = q @ k.transpose(-2, -1) * scale
            if bias is not None:
                s = s + bias
            s = s.masked_fill(~mask, float("-inf"))
            s = torch.cat([s, self.sinks.view(1, H, 1, 1).expand(B, H, T, 1)], dim=-1)
            y = torch.softmax(s, dim=-1)[..., :T] @ v
            return self.proj(y.transpose(1, 2).reshape(B, T, C))
        if bias is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")), scale=scale)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    """posgrad's block, with its parameter names (blocks.N.ln_1, .attn.qkv, .attn.proj, .ln_2, .fc, .proj)."""

    def __init__(self, C, H, sinks=False):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.attn = Attention(C, H, sinks)
        self.fc, self.proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x, pe, layer):
        x = x + self.attn(self.ln_1(x), pe, layer)
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


def rope_frequencies(dr, base, scaling, s, L0, T, beta_fast=32.0, beta_slow=1.0, low=1.0, high=4.0):
    """(inv_freq (dr/2,) float64, attention_factor) of spec §3.4 for a forward over T positions."""
    k = torch.arange(0, dr, 2, dtype=torch.float64)
    if scaling == "dynamic" and T > L0:
        base = base * (s * T / L0 - (s - 1)) ** (dr / (dr - 2))
    w = 1.0 / base ** (k / dr)
    factor = 1.0
    if scaling == "linear":
        w = w / s
    elif scaling == "yarn":
        corr = lambda n_rot: dr * math.log(L0 / (n_rot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), dr - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(dr // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
        w = (w / s) * ramp + w * (1 - ramp)
        factor = 0.1 * math.log(s) + 1 if s > 1 else 1.0
    elif scaling == "llama3":
        lam = 2 * math.pi / w
        g = (L0 / lam - low) / (high - low)
        mid = (1 - g) * w / s + g * w
        w = torch.where(lam < L0 / high, w, torch.where(lam > L0 / low, w / s, mid))
    return w, factor


class PosEnc(nn.Module):
    """posgrad's encodings with their parameter names (pos.weight, pos.relative_attention_bias,
    pos.rel_embeddings, pos.rel_norm); tables computed in float64 and cast, as posgrad does."""

    def __init__(self, kind, C, H, T, opts=None, L=1):
        super().__init__()
        o = {"t5_num_buckets": 32, "t5_max_distance": 128, "deberta_position_buckets": 32, "rope_base": 10000.0,
             "rope_scaling": "none", "rope_scaling_factor": 1.0, "rope_yarn_beta_fast": 32.0,
             "rope_yarn_beta_slow": 1.0, "rope_llama3_low_freq_factor": 1.0, "rope_llama3_high_freq_factor": 4.0}
        o.update(opts or {})
        self.kind, self.H, self.D, self.L0, self.o = kind, H, C // H, T, o
        if kind == "learned":
            self.weight = nn.Parameter(torch.randn(T, C) * 0.02)
        if kind == "t5":
            self.relative_attention_bias = nn.Parameter(torch.randn(o["t5_num_buckets"], H) * C ** -0.5)
        if kind == "deberta":
            S = o["deberta_position_buckets"]
            self.rel_embeddings = nn.Parameter(torch.randn(2 * S, C) * 0.02)
            self.rel_norm = nn.LayerNorm(C, eps=1e-7)
        if kind == "alibi":
            self.register_buffer("slopes", alibi_slopes(H), persistent=False)
        if kind == "fire":  # per layer: Linear(1, W), Linear(W, H), c, m (Li et al. 2024 listing)
            W = o.get("fire_mlp_width", 32)
            for l in range(L):
                setattr(self, f"fire_w1_{l}", nn.Parameter(torch.empty(W, 1).uniform_(-1, 1)))
                setattr(self, f"fire_b1_{l}", nn.Parameter(torch.empty(W).uniform_(-1, 1)))
                setattr(self, f"fire_w2_{l}", nn.Parameter(torch.empty(H, W).uniform_(-W ** -0.5, W ** -0.5)))
                setattr(self, f"fire_b2_{l}", nn.Parameter(torch.empty(H).uniform_(-W ** -0.5, W ** -0.5)))
                setattr(self, f"fire_c_{l}", nn.Parameter(torch.full((1,), o.get("fire_init_c", 0.1))))
                setattr(self, f"fire_m_{l}", nn.Parameter(torch.ones(1)))
        if kind == "fox":  # per layer fgate_proj = Linear(C, H): w ~ N(0, 0.02^2), b = 0 (FoX _init_weights)
            for l in range(L):
                setattr(self, f"fox_w_{l}", nn.Parameter(torch.randn(H, C) * 0.02))
                setattr(self, f"fox_b_{l}", nn.Parameter(torch.zeros(H)))
        if kind == "cope":  # per layer E (D, P) = 0, shared by the heads (RAM ContextPosSelfAttn pos_emb)
            P = o.get("cope_positions", 0) or T + 1
            for l in range(L):
                setattr(self, f"cope_E_{l}", nn.Parameter(torch.zeros(C // H, P)))
        if kind == "kerple":  # per layer r1 ~ U(0, 2), r2 ~ U(0, 1), as KERPLE's GPT-NeoX code
            for l in range(L):
                setattr(self, f"r1_{l}", nn.Parameter(torch.rand(H) * 2))
                setattr(self, f"r2_{l}", nn.Parameter(torch.rand(H)))

    def embed(self, x):
        T, C = x.shape[1], x.shape[2]
        if self.kind == "learned":
            return x + self.weight[:T]
        if self.kind == "sinusoidal":
            p = torch.arange(T, dtype=torch.float64)[:, None]
            w = torch.exp(-math.log(10000.0) * torch.arange(0, C, 2, dtype=torch.float64) / C)
            pe = torch.zeros(T, C, dtype=torch.float64)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(p * w), torch.cos(p * w)
            return x * math.sqrt(C) + pe.to(x.dtype).to(x.device)
        return x

    def rotate(self, q):
        T, D = q.shape[2], q.shape[3]
        o = self.o
        f, conv = o.get("rope_fraction", 1.0), o.get("rope_partial", "neox")
        if conv == "prope":
            # p-RoPE / HF "proportional" / gemma rope_proportion (SPEC-2 §2.4): the full-head spectrum,
            # its int(f D // 2) highest frequencies kept, the rest 0; rotate_half over the whole head.
            n = int(f * D // 2)
            w = 1.0 / o["rope_base"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
            w[n:] = 0.0
            if o["rope_scaling"] == "linear":
                w = w / o["rope_scaling_factor"]
            a = 1.0
        else:
            # HF GPT-NeoX: dim = int(head_dim * partial_rotary_factor); an odd dim gives dim // 2 + 1
            # frequencies and a cos/sin table 2 (dim // 2 + 1) wide (SPEC-2 §2.3).
            dr = int(D * f)
            w, a = rope_frequencies(dr, o["rope_base"], o["rope_scaling"], o["rope_scaling_factor"], self.L0, T,
                                    o["rope_yarn_beta_fast"], o["rope_yarn_beta_slow"],
                                    o["rope_llama3_low_freq_factor"], o["rope_llama3_high_freq_factor"])
        width = 2 * w.shape[0]  # HF apply_rotary_pos_emb: rotary_dim = cos.shape[-1]
        th = torch.arange(T, dtype=torch.float64)[:, None] * w
        cos = (torch.cat([th.cos(), th.cos()], -1) * a).to(q.dtype).to(q.device)
        sin = (torch.cat([th.sin(), th.sin()], -1) * a).to(q.dtype).to(q.device)
        qr, qp = q[..., :width], q[..., width:]
        rot = torch.cat([-qr[..., width // 2:], qr[..., :width // 2]], -1)
        return torch.cat([qr * cos + rot * sin, qp], -1)

    def xpos(self, x, key):
        """torchscale XPOS (SPEC-2 §6.2): interleaved (rotate_every_two) or rotate_half pairs, angle
        n 10000^(-2k/d), scale zeta_k^((n - c)/B) (keys: its inverse), c = ceil(T_train / 2)."""
        T, D = x.shape[2], x.shape[3]
        k2 = torch.arange(0, D, 2, dtype=torch.float64)
        zeta = (k2 + 0.4 * D) / (1.4 * D)
        n = torch.arange(T, dtype=torch.float64)[:, None]
        scale = zeta ** ((n - math.ceil(self.L0 / 2)) / self.o.get("xpos_scale_base", 512.0))
        if key:
            scale = 1 / scale
        th = n / 10000.0 ** (k2 / D)
        cos, sin = th.cos() * scale, th.sin() * scale
        if self.o.get("xpos_interleaved", True):
            cos = cos.repeat_interleave(2, -1).to(x.dtype)
            sin = sin.repeat_interleave(2, -1).to(x.dtype)
            rot = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)  # rotate_every_two
        else:
            cos = torch.cat([cos, cos], -1).to(x.dtype)
            sin = torch.cat([sin, sin], -1).to(x.dtype)
            rot = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
        return x * cos + rot * sin

    def sandwich_bias(self, T):
        """NeMo Sandwich (SPEC-2 §7.2): (sum_{k=1..dbar/2} cos(|i-j| / 10000^(2k/dbar)) - dbar/2) H / (8 h)."""
        dbar = self.o.get("sandwich_dbar", 0) or self.D
        i = torch.arange(T, dtype=torch.float64)
        r = (i[None, :] - i[:, None]).abs()
        k = torch.arange(1, dbar // 2 + 1, dtype=torch.float64)
        base = torch.cos(r[..., None] / 10000.0 ** (2 * k / dbar)).sum(-1)
        h = torch.arange(1, self.H + 1, dtype=torch.float64)
        return ((base - dbar / 2)[None] * (self.H / (8 * h))[:, None, None]).to(torch.float32)

    def bias(self, T):
        dev = self.relative_attention_bias.device if self.kind == "t5" else self.slopes.device
        i = torch.arange(T, device=dev)
        r = i[None, :] - i[:, None]  # j - i
        if self.kind == "t5":
            b = t5_bucket((-r).clamp(min=0), self.o["t5_num_buckets"], self.o["t5_max_distance"])
            return self.relative_attention_bias[b].permute(2, 0, 1)  # (H, T, T)
        return self.slopes[:, None, None].to(torch.float32) * r  # ALiBi causal m (j - i)

    def kerple_bias(self, T, layer):
        # KERPLE log variant (Chi et al. 2022, sec. 4): -r1 log(1 + r2 |j - i|), r1, r2 kept >= 0.01.
        r1, r2 = getattr(self, f"r1_{layer}"), getattr(self, f"r2_{layer}")
        with torch.no_grad():
            r1.clamp_(min=0.01)
            r2.clamp_(min=0.01)
        i = torch.arange(T, device=r1.device)
        dist = (i[None, :] - i[:, None]).abs().to(r1.dtype)
        return -(r1[:, None, None] * torch.log(r2[:, None, None] * dist + 1))  # (H, T, T)

    def fire_bias(self, T, layer):
        """FIRE (Li et al. 2024, the paper's PyTorch listing): MLP(psi(|i - j|) / psi(max(i, L))),
        psi(x) = log(|c| x + 1), L = |m L0|, added to the scaled scores; (H, T, T)."""
        g = lambda n: getattr(self, f"fire_{n}_{layer}")
        L0 = self.o.get("fire_l0", 0) or max(1, self.L0 // 4)
        pos = torch.arange(T, dtype=torch.float32)
        rel = (pos[:, None] - pos[None, :]).abs()
        c, L = g("c").abs(), (g("m") * L0).abs()
        norm = torch.log(c * torch.maximum(pos[:, None], L) + 1) + 1e-6
        u = torch.log(c * rel + 1) / norm                                  # (T, T)
        hidden = torch.relu(u[..., None] * g("w1")[:, 0] + g("b1"))        # (T, T, W)
        return (hidden @ g("w2").t() + g("b2")).permute(2, 0, 1)           # (H, T, T)

    def fox_bias(self, x, layer):
        """FoX (forgetting-transformer ForgettingAttentionLayer): log f = logsigmoid(fgate_proj(x)) in
        float32, log_lambda = cumsum over time, bias[i, j] = log_lambda_i - log_lambda_j; (B, H, T, T)."""
        z = F.linear(x, getattr(self, f"fox_w_{layer}"), getattr(self, f"fox_b_{layer}"))  # (B, T, H)
        lam = torch.cumsum(F.logsigmoid(z.float()), dim=1).transpose(1, 2)                # (B, H, T)
        return lam[..., :, None] - lam[..., None, :]

    def cope_bias(self, q, k, layer, scale):
        """CoPE (Golovneva et al. 2024 §3, the RAM code's placement of 1/sqrt(D)): gates sigmoid(q.k scale)
        on the keys j <= i, positions their suffix sums clamped to P - 1, the logit q.E interpolated
        between floor and ceil; returned as the bias added to the scaled scores, (B, H, T, T)."""
        E = getattr(self, f"cope_E_{layer}")
        T = q.shape[2]
        keep = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        gates = torch.sigmoid(q @ k.transpose(-2, -1) * scale).masked_fill(~keep, 0.0)
        pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=E.shape[1] - 1)
        lo, hi = pos.floor().long(), pos.ceil().long()
        w = pos - lo
        z = q @ E                                                          # (B, H, T, P)
        logit = z.gather(-1, hi) * w + z.gather(-1, lo) * (1 - w)
        return logit * (1.0 if self.o.get("cope_nodiv", False) else scale)

    def hybrid_uses_rope(self, layer):
        """iRoPE (HF Llama 4 / SmolLM3 no_rope_layer_interval): layer l rotates iff (l + 1) % K != 0."""
        layers = self.o.get("hybrid_layers", "")
        if layers:
            return layers.split(",")[layer] == "rope"
        return (layer + 1) % self.o.get("hybrid_nope_interval", 4) != 0

    def nope_temperature(self, T):
        """Llama 4 attn_temperature_tuning: log1p(floor((p + 1) / F)) * alpha + 1 per query row."""
        F_ = self.o.get("hybrid_temp_floor_scale", 0.0) or max(1.0, self.L0 / 4)
        p = torch.arange(T, dtype=torch.float64)
        tau = torch.log1p(torch.floor((p + 1) / F_)) * self.o.get("hybrid_temp_scale", 0.1) + 1
        return tau[:, None]  # (T, 1): scales q's rows

    def rows(self, T):
        S = self.o["deberta_position_buckets"]
        i = torch.arange(T, device=self.rel_embeddings.device)
        return (deberta_bucket(i[:, None] - i[None, :], S) + S).clamp(0, 2 * S - 1)


class GPT(nn.Module):
    """posgrad's GPT (nn/gpt.h): names wte, pos, blocks, ln_f; LM head tied to wte."""

    def __init__(self, kind, L, H, C, T, V, opts=None, sinks=False):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.pos = PosEnc(kind, C, H, T, opts, L)
        self.blocks = nn.ModuleList(Block(C, H, sinks) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx):
        x = self.pos.embed(self.wte(idx))
        for l, b in enumerate(self.blocks):
            x = b(x, self.pos, l)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="compare", choices=SIZES)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--methods", default="none,sinusoidal,learned,t5,deberta,rope,alibi,kerple")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile", "bf16", "bf16-compile"],
                    help="eager fp32; torch.compile (default inductor backend, compiled during the warm-up steps); "
                         "bf16: forward and loss under torch.autocast(device, dtype=torch.bfloat16), fp32 master "
                         "weights and optimizer; bf16-compile: both")
    a = ap.parse_args()
    if a.mode.endswith("compile") and a.warmup < 1:
        ap.error("--mode compile needs --warmup >= 1 (the first steps compile)")
    L, H, C, T, B, V = SIZES[a.size]
    B = a.batch or B
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 like posgrad's default
    print(f"# pytorch {torch.__version__} size={a.size} batch={B} device={a.device} mode={a.mode}")
    print(f"{'method':<11} {'params':>12} {'tokens/s':>12} {'ms/step':>12}")
    for kind in a.methods.split(","):
        torch.manual_seed(0)
        m = GPT(kind, L, H, C, T, V).to(a.device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.1)
        fwd = torch.compile(m) if a.mode.endswith("compile") else m
        autocast = torch.autocast(a.device.split(":")[0], dtype=torch.bfloat16, enabled=a.mode.startswith("bf16"))
        times = []
        for s in range(a.warmup + a.steps):
            x = torch.randint(V, (B, T), device=a.device)
            y = torch.randint(V, (B, T), device=a.device)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with autocast:
                loss = F.cross_entropy(fwd(x).view(-1, V), y.view(-1))
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
