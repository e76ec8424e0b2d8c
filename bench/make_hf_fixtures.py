#!/usr/bin/env python3
"""make_hf_fixtures.py — reference outputs from HF transformers' own code for the pieces of
SPEC-positions-2 that it implements, replayed by tests/test_replay.cpp (HfReference.*):

  * partial rotary, GPT-NeoX convention: GPTNeoXRotaryEmbedding + apply_rotary_pos_emb
    (models/gpt_neox/modeling_gpt_neox.py) with rope_parameters.partial_rotary_factor, including an
    odd int(head_dim * factor) (HF then rotates one more channel) and the truncated product 100 x 0.57;
  * p-RoPE: ROPE_INIT_FUNCTIONS["proportional"] (modeling_rope_utils.py, used by Gemma 4) applied
    with Gemma 4's apply_rotary_pos_emb over the whole head;
  * learnable attention sinks: gpt-oss's eager_attention_forward (models/gpt_oss/modeling_gpt_oss.py)
    forward and backward (float64), with a causal mask;
  * Llama 4's NoPE-layer temperature: Llama4TextAttention (models/llama4/modeling_llama4.py) on a layer
    that no_rope_layers marks NoPE, attn_temperature_tuning on, forward and backward into its input
    (float64), past two floor_scale boundaries.

Written to tests/fixtures/hf/<case>.safetensors. CI needs neither PyTorch nor transformers: the
fixtures are committed. To regenerate:

    python3 -m venv .venv-torch && .venv-torch/bin/pip install torch safetensors numpy transformers
    .venv-torch/bin/python bench/make_hf_fixtures.py
"""
import argparse
import math
import os
import types

import torch
import transformers
from safetensors.torch import save_file
from transformers import GPTNeoXConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gemma4 import modeling_gemma4
from transformers.models.gpt_neox import modeling_gpt_neox
from transformers.models.gpt_oss import modeling_gpt_oss


def gen(shape, s, dtype=torch.float32):
    """SPEC-positions-2 §0.1: 0.5 sin(1 + s + 0.7 i0 + 1.3 i1 + 0.37 i2 + 0.91 i3)."""
    coef = (0.7, 1.3, 0.37, 0.91, 0.23)
    idx = torch.meshgrid(*[torch.arange(n, dtype=torch.float64) for n in shape], indexing="ij")
    acc = 1.0 + s + sum(coef[i] * idx[i] for i in range(len(shape)))
    return (0.5 * torch.sin(acc)).to(dtype)


def neox_case(head_dim, factor, heads=2, T=12):
    cfg = GPTNeoXConfig(hidden_size=head_dim * heads, num_attention_heads=heads,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                         "partial_rotary_factor": factor})
    rot = modeling_gpt_neox.GPTNeoXRotaryEmbedding(cfg)
    q, k = gen((1, heads, T, head_dim), 1.0), gen((1, heads, T, head_dim), 2.0)
    pos = torch.arange(T)[None]
    cos, sin = rot(q, pos)
    qr, kr = modeling_gpt_neox.apply_rotary_pos_emb(q, k, cos, sin)
    return {"q": q, "k": k, "q_rot": qr.contiguous(), "k_rot": kr.contiguous()}, {
        "head_dim": str(head_dim), "fraction": repr(factor), "convention": "neox_hf",
        "rotated_width": str(cos.shape[-1])}


def proportional_case(head_dim, factor, heads=2, T=12):
    cfg = GPTNeoXConfig(hidden_size=head_dim * heads, num_attention_heads=heads,
                        rope_parameters={"rope_type": "proportional", "rope_theta": 10000.0,
                                         "partial_rotary_factor": factor})
    inv_freq, scaling = ROPE_INIT_FUNCTIONS["proportional"](cfg)
    assert inv_freq.shape[0] == head_dim // 2 and scaling == 1.0
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq.float()[None]
    emb = torch.cat((freqs, freqs), dim=-1)[None]  # (1, T, head_dim), as Gemma4RotaryEmbedding
    q, k = gen((1, heads, T, head_dim), 3.0), gen((1, heads, T, head_dim), 4.0)
    qr = modeling_gemma4.apply_rotary_pos_emb(q, emb.cos(), emb.sin())
    kr = modeling_gemma4.apply_rotary_pos_emb(k, emb.cos(), emb.sin())
    return {"q": q, "k": k, "q_rot": qr.contiguous(), "k_rot": kr.contiguous()}, {
        "head_dim": str(head_dim), "fraction": repr(factor), "convention": "prope",
        "rotated_width": str(head_dim)}


def sinks_case(B=2, H=3, T=7, D=4):
    q = gen((B, H, T, D), 5.0, torch.float64).requires_grad_(True)
    k = gen((B, H, T, D), 6.0, torch.float64).requires_grad_(True)
    v = gen((B, H, T, D), 7.0, torch.float64).requires_grad_(True)
    module = types.SimpleNamespace(sinks=torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True),
                                   num_key_value_groups=1, training=False)
    mask = torch.full((T, T), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)[None, None]
    out, _ = modeling_gpt_oss.eager_attention_forward(module, q, k, v, mask, scaling=1 / math.sqrt(D))
    out = out.transpose(1, 2).contiguous()  # back to (B, H, T, D)
    dout = gen((B, H, T, D), 8.0, torch.float64)
    (out * dout).sum().backward()
    t = {"q": q.detach(), "k": k.detach(), "v": v.detach(), "sinks": module.sinks.detach(), "out": out.detach(),
         "dout": dout, "dq": q.grad, "dk": k.grad, "dv": v.grad, "dsinks": module.sinks.grad}
    return t, {"scale": repr(1 / math.sqrt(D)), "causal": "true"}


def llama4_nope_case(T=40, C=16, H=2, floor_scale=16, alpha=0.1):
    from transformers import Llama4TextConfig
    from transformers.models.llama4 import modeling_llama4
    cfg = Llama4TextConfig(hidden_size=C, num_attention_heads=H, num_key_value_heads=H, head_dim=C // H,
                           num_hidden_layers=4, no_rope_layers=[1, 1, 1, 0], attn_temperature_tuning=True,
                           floor_scale=floor_scale, attn_scale=alpha, attention_bias=False, use_qk_norm=False)
    cfg._attn_implementation = "eager"
    attn = modeling_llama4.Llama4TextAttention(cfg, layer_idx=3).double()
    assert not attn.use_rope
    weights = {}
    for i, (name, lin) in enumerate((("wq", attn.q_proj), ("wk", attn.k_proj), ("wv", attn.v_proj),
                                     ("wo", attn.o_proj))):
        with torch.no_grad():
            lin.weight.copy_(gen(tuple(lin.weight.shape), 20.0 + i, torch.float64))
        weights[name] = lin.weight.detach().clone()
    x = gen((1, T, C), 19.0, torch.float64).requires_grad_(True)
    mask = torch.full((T, T), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)[None, None]
    out, _ = attn(x, None, mask)
    dout = gen((1, T, C), 24.0, torch.float64)
    (out * dout).sum().backward()
    t = {"x": x.detach(), "out": out.detach().contiguous(), "dout": dout, "dx": x.grad}
    t.update(weights)
    return t, {"floor_scale": repr(floor_scale), "attn_scale": repr(alpha), "layer": "3", "n_layer": "4",
               "n_head": str(H)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "hf"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    cases = {
        "neox_d64_f0.25": neox_case(64, 0.25),
        "neox_d64_f0.3_odd": neox_case(64, 0.3),
        "neox_d100_f0.57": neox_case(100, 0.57),
        "prope_d64_f0.25": proportional_case(64, 0.25),
        "prope_d32_f0.75": proportional_case(32, 0.75),
        "gpt_oss_sinks": sinks_case(),
        "llama4_nope_temperature": llama4_nope_case(),
    }
    for name, (tensors, meta) in cases.items():
        meta.update({"case": name, "transformers_version": transformers.__version__,
                     "torch_version": torch.__version__, "generator": "bench/make_hf_fixtures.py"})
        save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(a.out, name + ".safetensors"),
                  metadata=meta)
        print(name, {k: tuple(v.shape) for k, v in tensors.items()}, meta.get("rotated_width", ""))


if __name__ == "__main__":
    main()
