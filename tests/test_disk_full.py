"""A disk that fills up while a run writes its checkpoint, on a real file system of a few megabytes that the test
mounts (tmpfs with a size: mounting needs root, as CI has): the run ends ``failed`` with one line naming the
disk, its last good checkpoint whole, and the same run resumes from it once space is freed
(docs/reliability.md, section 13)."""

import json
import os
import shutil
import subprocess

import pytest
import torch

from helpers import compose_config, tiny_gpt
from modula_cli.plumbing.atomic import DiskFull
from modula_cli.run import checkpoint
from modula_cli.run.trainer import train

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root")


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_fails_the_run_in_one_line_keeps_its_checkpoint_and_it_resumes(small_disk, tiny_text_root,
                                                                                 tmp_path, monkeypatch):
    import modula_cli.run.loop as loop_module

    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=40", "train.checkpoint_every=10"))
    reference = train(cfg, tmp_path / "reference").summary
    run_dir = small_disk / "run"
    filler = small_disk / "filler"
    original = loop_module.optimizer_step

    def fill_the_disk_at_step_25(*args, **kwargs):
        if args[5] == 25:  # the step-20 checkpoint is on disk; leave less room than a checkpoint takes
            room = (run_dir / checkpoint.CHECKPOINT_FILE).stat().st_size // 2
            filler.write_bytes(b"\0" * max(0, shutil.disk_usage(small_disk).free - room))
        return original(*args, **kwargs)

    monkeypatch.setattr(loop_module, "optimizer_step", fill_the_disk_at_step_25)
    with pytest.raises(DiskFull):
        train(cfg, run_dir)
    failed = json.loads((run_dir / "summary.json").read_text())
    assert failed["status"] == "failed" and "traceback" not in failed
    error = failed["error"]
    assert "\n" not in error and error.startswith(f"DiskFull: no space left on the disk at {small_disk} (")
    assert f"while writing {run_dir / 'checkpoint.pt'}; the last checkpoint.pt is kept as it was; free space and run " \
           f"the same command to resume" in error
    saved = torch.load(run_dir / checkpoint.CHECKPOINT_FILE, weights_only=True)  # whole, not cut short
    assert saved["state"]["step"] == 20
    assert not [p.name for p in run_dir.iterdir() if ".tmp" in p.name]  # no half-written file left behind

    monkeypatch.setattr(loop_module, "optimizer_step", original)
    filler.unlink()  # space freed
    resumed = train(cfg, run_dir).summary
    assert (resumed["status"], resumed["resumed_from"]) == ("completed", 20)
    assert resumed["train_loss"] == reference["train_loss"]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if "train_loss" in line]
    assert steps == sorted(set(steps)) and len(steps) == len(
        [line for line in (tmp_path / "reference" / "metrics.jsonl").read_text().splitlines() if "train_loss" in line])
