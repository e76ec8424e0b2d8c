#!/usr/bin/env python3
"""make_replay_fixtures.py — the PyTorch side of posgrad's replay test (the llm.c pattern).

For every replay variant (tests/support/replay.h: each position encoding, and RoPE with each
scaling) posgrad's exporter writes its initial weights, a fixed batch and the hyperparameters;
this script loads them into the same GPT in PyTorch (bench/reference_gpt.py, posgrad's layout and
names), runs one forward/backward and then AdamW steps with gradient clipping, and writes
tests/fixtures/replay/<variant>.safetensors with

    init.<param>   the initial weights (so the test does not depend on posgrad's initialiser)
    x, y           the batch (int64, (B, T))
    logits         (B, T, V) of the first forward; loss: (1,) its mean cross-entropy
    grad.<param>   every parameter's gradient of that loss
    losses         (steps,) the loss before each AdamW step

All float32, as posgrad trains. tests/test_replay.cpp replays them. CI needs no PyTorch: the
fixtures are committed. To regenerate (after changing the model, an encoding or replay.h):

    ./scripts/setup.sh                                  # builds build/replay_export
    python3 -m venv .venv-torch && .venv-torch/bin/pip install torch safetensors numpy
    .venv-torch/bin/python bench/make_replay_fixtures.py --build build
    .venv-torch/bin/python bench/make_replay_fixtures.py --build build --only fire,hybrid_rn   # new variants only
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_gpt import GPT  # noqa: E402


def parse_options(text):
    out = {}
    for line in text.strip().splitlines():
        k, v = line.split("=", 1)
        if v in ("true", "false"):
            out[k] = v == "true"
        else:
            try:
                out[k] = int(v)
            except ValueError:
                try:
                    out[k] = float(v)
                except ValueError:
                    out[k] = v
    return out


def replay(path):
    with safe_open(path, "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    m = {k: meta[k] for k in ("vocab", "n_embd", "n_head", "n_layer", "block_size", "steps")}
    V, C, H, L, T0, steps = (int(m[k]) for k in ("vocab", "n_embd", "n_head", "n_layer", "block_size", "steps"))
    opts = parse_options(meta["options"])
    init = {k[5:]: v for k, v in tensors.items() if k.startswith("init.")}
    x, y = tensors["x"], tensors["y"]

    torch.manual_seed(0)
    model = GPT(meta["kind"], L, H, C, T0, V, opts, sinks=meta.get("attention_sinks") == "true")
    model.load_state_dict(init, strict=True)
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()
    out = {"init." + k: v.contiguous() for k, v in init.items()}
    out.update({"x": x, "y": y, "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1)})
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.detach().clone().contiguous()

    # Training: AdamW with decay on matrices only (posgrad's decay_groups), clipping, constant lr.
    model.load_state_dict(init, strict=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(meta["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=float(meta["lr"]), betas=(float(meta["beta1"]), float(meta["beta2"])), eps=1e-8)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(meta["clip"]))
        opt.step()
    out["losses"] = torch.tensor(losses, dtype=torch.float32)
    return meta["variant"], out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="posgrad build directory (holds replay_export)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "replay"))
    ap.add_argument("--only", default="", help="comma-separated variants to (re)write; empty: every variant")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([os.path.join(a.build, "replay_export"), tmp], check=True, stdout=subprocess.DEVNULL)
        os.makedirs(a.out, exist_ok=True)
        for name in sorted(os.listdir(tmp)):
            if only and name.split(".")[0] not in only:
                continue
            variant, out = replay(os.path.join(tmp, name))
            save_file(out, os.path.join(a.out, variant + ".safetensors"),
                      metadata={"variant": variant, "torch_version": torch.__version__,
                                "generator": "bench/make_replay_fixtures.py"})
            print(f"{variant:<20} loss {out['loss'].item():.6f} -> {out['losses'][-1].item():.6f}")


if __name__ == "__main__":
    main()
