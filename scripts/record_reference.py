"""Record the numbers of tests/data/reference_paper.json by running the authors' reference code.

The reference is not part of this project: get it yourself, then point this script at it,

    git clone https://github.com/jxbz/modula /tmp/modula-ref
    git -C /tmp/modula-ref checkout eccf3cca4af1bce85af2c17bc536b3b7b0aa07da
    python scripts/record_reference.py /tmp/modula-ref > /tmp/reference_values.json

It builds the reference's GPT, ResMLP and ResCNN at tiny sizes, sets explicit weights (0.5 · N(0, 1), one
seeded generator per atom) and power-iteration start vectors, and records their forward passes and a few
steps of the update loop of the reference's paper/main.py (written out here: its Adam / SGD moments,
normalize or plain step, regularize), for tests/test_variant_paper.py to compare variant=paper with.
"""
import argparse
import json
import sys

import torch

GPT = ResMLP = ResCNN = None  # the reference's builders, imported in main()


def gen(seed):
    return torch.Generator().manual_seed(seed)


def case_net(arch):
    if arch == "gpt":
        return GPT(vocab_size=11, context=8, num_heads=2, d_embed=8, d_query=4, d_value=4, num_blocks=2)
    if arch == "resmlp":
        return ResMLP(8, 2, 2, 3 * 4 * 4, 10)
    return ResCNN(4, 2, 1, 3, 10)


def batch(arch):
    if arch == "gpt":
        return torch.randint(0, 11, (2, 8), generator=gen(3000)), torch.randint(0, 11, (2, 8), generator=gen(3001))
    return torch.randn(4, 3, 4, 4, generator=gen(3000)), torch.randint(0, 10, (4,), generator=gen(3001))


def atoms(net):
    out = []

    def walk(m):
        if hasattr(m, "scale") and not m.children:
            out.append(m)
        for c in m.children:
            walk(c)
    walk(net)
    return out


def setup(arch):
    net = case_net(arch)
    torch.manual_seed(0)
    w = net.initialize(device="cpu")  # shapes, and each atom's u (overwritten below)
    ats = atoms(net)
    assert len(ats) == len(w)
    for i, (atom, p) in enumerate(zip(ats, w)):
        with torch.no_grad():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen(1000 + i)))
        if hasattr(atom, "u"):
            atom.u = torch.randn(atom.u.shape, generator=gen(2000 + i))
    return net, w, ats


def loss_of(arch, out, y):
    if arch == "gpt":
        out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
    return (-out[range(y.shape[0]), y] + out.logsumexp(dim=1)).mean()


def linear(step, max_step):  # paper/misc.py's Scheduler.linear with min_lr_factor 0
    return 1 - step / max_step


def train(arch, optimizer, normalize, lr, steps=2, beta1=0.9, beta2=0.99, wd=0.0, schedule=None):
    """schedule None: a constant LR for `steps` iterations; "linear": paper/main.py's loop, steps + 1
    iterations with the linear schedule over `steps` (the last at LR 0)."""
    net, w, ats = setup(arch)
    x, y = batch(arch)
    beta2 = beta2 if optimizer == "adam" else -1
    with torch.no_grad():
        mom1 = 0 * w
        mom2 = 0 * w
    losses = []
    for step in range(steps + 1 if schedule else steps):
        loss = loss_of(arch, net.forward(x, w), y)
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            grad = w.grad()
            if beta2 >= 0:
                mom1 += (1 - beta1) ** (step / (step + 1)) * (grad - mom1)
                mom2 += (1 - beta2) ** (step / (step + 1)) * (grad ** 2 - mom2)
                update = mom1 / mom2 ** 0.5
            else:
                mom1 += (1 - beta1) ** (step / (step + 1)) * (grad - mom1)
                update = mom1 * 1.0
            update.zero_nans()
            factor = linear(step, steps) if schedule else 1.0
            if normalize:
                net.normalize(update, target_norm=lr * factor)
            else:
                update *= lr * factor
            w -= update
            net.regularize(w, strength=lr * factor * wd)
            w.zero_grad()
    final = loss_of(arch, net.forward(x, w), y).item()
    atoms_out = []
    for i, p in enumerate(w):
        probe = torch.randn(p.shape, generator=gen(4000 + i))
        atoms_out.append({"norm": p.detach().norm().item(), "probe": (p.detach() * probe).sum().item()})
    return {"losses": losses, "final_loss": final, "weights": atoms_out}


def record() -> dict:
    results = {"reference": "jxbz/modula eccf3cca4af1bce85af2c17bc536b3b7b0aa07da", "torch": torch.__version__,
               "forward": {}, "training": {}}
    for arch in ("gpt", "resmlp", "resnet"):
        net, w, _ = setup(arch)
        x, _ = batch(arch)
        with torch.no_grad():
            results["forward"][arch] = net.forward(x, w).reshape(-1).tolist()
        for optimizer in ("sgd", "adam"):
            for normalize in (0, 1):
                lr = (0.5 if optimizer == "sgd" else 0.01) if not normalize else 0.25
                key = f"{arch}/{optimizer}/{'normed' if normalize else 'unnormed'}"
                results["training"][key] = {"lr": lr, **train(arch, optimizer, normalize, lr)}
        # paper/main.py's whole loop: linear decay over 3 steps, 4 iterations, weight decay 0.1
        for optimizer, normalize, lr in (("adam", 1, 0.25), ("sgd", 0, 0.5 if arch != "resmlp" else 0.2)):
            key = f"{arch}/{optimizer}/{'normed' if normalize else 'unnormed'}/linear+wd"
            results["training"][key] = {"lr": lr, "steps": 3, "wd": 0.1,
                                        **train(arch, optimizer, normalize, lr, steps=3, wd=0.1, schedule="linear")}
    return results


def main() -> None:
    global GPT, ResMLP, ResCNN
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", help="a checkout of jxbz/modula at commit eccf3cca")
    args = parser.parse_args()
    sys.path.insert(0, args.reference)
    from modula.compound import GPT, ResCNN, ResMLP  # noqa: F811 - the reference's, from the given folder
    json.dump(record(), sys.stdout, indent=1)


if __name__ == "__main__":
    main()
