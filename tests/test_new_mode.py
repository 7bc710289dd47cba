"""A new mode is one file plus its settings block (docs/extending.md, "Your own mode"): a toy mode registered from
outside the package (tests/toy_mode/signed_mode.py) is checked, fingerprinted and trained like a built-in one,
with no other file edited. A fresh interpreter: the block is registered before the optim schema is built."""

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent

SCRIPT = r"""
import json, sys
sys.path[:0] = [sys.argv[1]]
import toy_mode.signed_mode  # its block, then its mode
import modula_cli.run.loop as loop
from helpers import compose_config, tiny_gpt
from modula_cli.config.identity import fingerprint, run_name
from modula_cli.config.validate import config_problems
from modula_cli.run.trainer import train

root, out = sys.argv[2], sys.argv[3]
sgd = ["variant=modular", "optim.name=sgd", "optim.beta1=0", "optim.lr=0.01", "train.steps=1"]
def cfg(*overrides):
    return compose_config(*tiny_gpt(root, *sgd, *overrides))
seen = {}
original = loop.optimizer_step
def spy(net, weights, grads, state, cfg_, t, total, **kwargs):
    before = [w.detach().clone() for w in weights]
    lr = original(net, weights, grads, state, cfg_, t, total, **kwargs)
    seen.setdefault("steps", sorted({round(abs(float(x)), 6) for b, w in zip(before, weights)
                                     for x in (b - w.detach()).flatten().tolist()}))
    seen.setdefault("lr", float(lr))
    return lr
loop.optimizer_step = spy
outcome = train(cfg("optim.mode=signed", "optim.signed.step=0.5"), __import__("pathlib").Path(out))
print(json.dumps({
    "status": outcome.status, "steps": seen["steps"], "lr": seen["lr"],
    "signed": [fingerprint(cfg("optim.mode=signed", f"optim.signed.step={s}")) for s in (0.5, 0.25)],
    "normed": [fingerprint(cfg("optim.mode=normed", *extra)) for extra in ((), ("optim.signed.step=0.5",))],
    "problems": config_problems(cfg("optim.mode=signed", "optim.signed.step=-1")),
    "name": run_name(["optim.mode=signed", "optim.signed.step=0.5"]),
}))
"""


def test_a_mode_registered_with_its_block_trains_checks_and_fingerprints_as_a_built_in_one(tiny_text_root, tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(TESTS), str(tiny_text_root), str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == "completed"
    # the sign map: every entry moved by 0.5 × the LR (or not at all, where its gradient is exactly 0)
    assert abs(seen["lr"] - 0.01) < 1e-9 and set(seen["steps"]) <= {0.0, 0.005} and 0.005 in seen["steps"]
    signed, normed = seen["signed"], seen["normed"]
    assert signed[0] != signed[1], "optim.signed.step is in the signed mode's fingerprint"
    assert normed[0] == normed[1], "and in no other mode's"
    assert seen["problems"] == ["optim.signed.step=-1; must be a finite number > 0"]
    assert seen["name"] == "mode=signed,signed_step=0.5"


def test_a_block_that_would_mix_fingerprints_or_come_too_late_is_refused():
    """A second block of one name, one whose flat names (a fingerprint's keys) are another block's, and one declared
    after the optim schema was made (it would not be in it) are refused when declared, in one line each."""
    import pytest

    import modula_cli.optim.config  # noqa: F401 - the schema, made from the blocks declared so far
    from modula_cli.optim.mode_settings import BLOCKS, settings_block
    from modula_cli.plumbing.settings import setting

    blocks = dict(BLOCKS)
    with pytest.raises(ValueError, match=r"^settings block optim\.mup: mup is a block already$"):
        settings_block("mup", "again")(type("Again", (), {"__annotations__": {"x": int}, "x": setting(1, "x")}))
    with pytest.raises(ValueError, match=r"its flat names \['mup_base_width'\] are another block's"):
        settings_block("mup_base", "a clash")(type("Clash", (), {"__annotations__": {"width": int},
                                                               "width": setting(1, "x")}))
    with pytest.raises(RuntimeError, match=r"optim\.late is declared after modula_cli\.optim\.config was imported"):
        settings_block("late", "too late")(type("Late", (), {"__annotations__": {"x": int}, "x": setting(1, "x")}))
    assert BLOCKS == blocks
