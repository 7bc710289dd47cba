"""Record the reference numbers of tests/test_mup_depth.py by running EleutherAI/nanoGPT-mup's CompleteP recipe.

The reference is not part of this project: get it yourself, then point this script at it,

    git clone https://github.com/EleutherAI/nanoGPT-mup /tmp/nanogpt-mup
    git -C /tmp/nanogpt-mup checkout 3904404337aba284322696123bbed0c378c43774
    python scripts/record_nanogpt_mup.py /tmp/nanogpt-mup > /tmp/nanogpt_mup_table.py

For α = 1 (CompleteP) and α = ½ (Depth-μP) it builds the reference's GPT (n_embd 16 over a base width of 8,
8 heads, 4 blocks over a base depth of 2, vocabulary 11, context 8, bias=False, float64), unties its
wte/lm_head (lm_head joins the embedding group, where the tied matrix is), draws every parameter from its own
seeded generator at the reference's init std, takes one step of the AdamW its ``configure_optimizers`` returns
(each group's LR the base LR × its ``lr_scale``, as its train loop sets them) on a batch drawn from seeds 7 and 8,
and prints, per parameter: its group's LR, its decay per unit weight decay, its ε, Σ Δ² and the first six
entries of its change Δ, then those six again for the same step at weight decay 0.1, as the Python literal the
test holds.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path

import torch

VOCAB, CONTEXT, HEADS, BASE_WIDTH, WIDTH, BASE_DEPTH, DEPTH = 11, 8, 8, 8, 16, 2, 4
LR, EPS, WD = 2.0**-5, 1e-3, 0.1


def reference_model(checkout: Path):
    spec = importlib.util.spec_from_file_location("nanogpt_mup_model", checkout / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def draw(k: int, shape: tuple[int, ...], std: float) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1000 + k), dtype=torch.float64) * std


def parameter_names() -> list[str]:
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(DEPTH):
        names += [f"transformer.h.{i}.attn.c_attn.weight", f"transformer.h.{i}.attn.c_proj.weight",
                  f"transformer.h.{i}.mlp.c_fc.weight", f"transformer.h.{i}.mlp.c_proj.weight"]
    return names + ["lm_head.weight"]


def one_step(ref, alpha: float, weight_decay: float) -> dict:
    m_w = WIDTH / BASE_WIDTH
    cfg = ref.GPTConfig(block_size=CONTEXT, vocab_size=VOCAB, n_layer=DEPTH, n_head=HEADS, n_embd=WIDTH, bias=False,
                        mup_enabled=True, mup_width_multiplier=m_w, depth_alpha_enabled=True,
                        depth_multiplier=DEPTH / BASE_DEPTH, depth_alpha_exp=alpha)
    model = ref.GPT(cfg).double()
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())  # untied
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, name in enumerate(parameter_names()):
            outer = any(key in name for key in ("wte", "wpe", "lm_head"))
            params[name].copy_(draw(k, tuple(params[name].shape), 0.02 if outer else 0.02 / math.sqrt(m_w)))
    head, lm_head = params["lm_head.weight"], model.lm_head
    del model.lm_head  # configure_optimizers knows no untied head: hidden from it, then put in the embedding group
    optimizer = model.configure_optimizers(weight_decay=weight_decay, learning_rate=LR, betas=(0.9, 0.99),
                                           adam_eps=EPS, device_type="cpu")
    model.lm_head = lm_head
    optimizer.param_groups[0]["params"].append(head)
    for group in optimizer.param_groups:
        group["lr"] = LR * group["lr_scale"]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    idx = torch.randint(0, VOCAB, (4, CONTEXT), generator=torch.Generator().manual_seed(7))
    targets = torch.randint(0, VOCAB, (4, CONTEXT), generator=torch.Generator().manual_seed(8))
    _, loss = model(idx, targets)
    loss.backward()
    group_of = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    optimizer.step()
    out = {"branch": model.transformer.h[0].residual_scaling, "loss": loss.item(), "params": {}}
    for name, p in model.named_parameters():
        if name not in before or name not in parameter_names():
            continue
        group, delta = group_of[id(p)], before[name] - p.detach()
        out["params"][name] = {"lr": group["lr"], "decay": group["lr"] * group["weight_decay"], "eps": group["eps"],
                               "squares": float(f"{delta.pow(2).sum().item():.10g}"),
                               "head": [float(f"{v:.10g}") for v in delta.flatten()[:6].tolist()]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a nanoGPT-mup checkout (its model.py is imported)")
    ref = reference_model(parser.parse_args().checkout)
    for table, alpha in (("COMPLETEP", 1.0), ("DEPTH_MUP", 0.5)):
        plain, decayed = one_step(ref, alpha, 0.0), one_step(ref, alpha, WD)
        print(f"{table} = {{  # α = {alpha:g}: branch {plain['branch']!r}, loss {plain['loss']!r}")
        for name, record in plain["params"].items():
            decay = decayed["params"][name]["decay"] / WD
            print(f'    "{name.removeprefix("transformer.")}": ({record["lr"]!r}, {decay!r}, {record["eps"]!r}, '
                  f'{record["squares"]!r},\n        {record["head"]!r},\n        {decayed["params"][name]["head"]!r}),')
        print("}")


if __name__ == "__main__":
    sys.exit(main())
