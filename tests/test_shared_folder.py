"""A sweep folder on a cluster's shared file system may be writable by other users' jobs: nothing the program
reads there may run code (checkpoints, CIFAR batches), and what it creates is no more writable than the
user's umask allows (docs/reliability.md, "What a shared folder is trusted with")."""

import os
import pickle
import stat
import sys

import numpy as np
import pytest
import torch

from helpers import TINY_TRAIN, compose_config, interrupted_at_step_12, tiny_gpt
import prewarmed
from modula_cli.data.cifar10 import cifar10
from modula_cli.data.storage import DataUnavailable
from modula_cli.run import checkpoint
from modula_cli.run.trainer import train


class Payload:
    """Unpickled, it writes ``marker``: proof that loading the file ran code of the file's choosing."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def test_a_crafted_checkpoint_never_runs_its_code_and_the_run_starts_afresh(tmp_path, tiny_text_root, monkeypatch,
                                                                            caplog):
    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=20", "train.checkpoint_every=7"))
    reference = train(cfg, tmp_path / "reference").summary
    interrupted_at_step_12(cfg, tmp_path / "run", monkeypatch)
    path = tmp_path / "run" / checkpoint.CHECKPOINT_FILE
    genuine = torch.load(path, weights_only=True)
    marker = tmp_path / "payload-ran"
    # the right format and fingerprint, so only the payload itself can get it refused
    torch.save({**genuine, "state": {**genuine["state"], "step": Payload(marker)}}, path)

    resumed = train(cfg, tmp_path / "run").summary
    assert not marker.exists()
    assert "checkpoint.pt is refused: it holds objects other than tensors and plain values" in caplog.text
    assert (tmp_path / "run" / "checkpoint.pt.corrupt").exists()
    assert resumed["status"] == "completed" and resumed["train_loss"] == reference["train_loss"]
    torch.load(tmp_path / "run" / "checkpoint.pt.corrupt", weights_only=False)  # the payload was real
    assert marker.read_text() == "ran"


@pytest.mark.parametrize("overrides", [["optim.mode=normed"], ["optim=adam", "optim.mode=normed"],
                                       ["optim.mode=manifold"], ["optim.mode=muon"], ["optim.mode=dualized"]],
                         ids=["normed-sgd", "normed-adam", "manifold", "muon", "dualized"])
def test_every_mode_checkpoints_only_tensors_and_plain_values(overrides, tmp_path, tiny_text_root, monkeypatch,
                                                              caplog):
    """Each mode's state (power iteration, Adam's moments, manifold multipliers) loads with weights_only=True:
    the run resumes at step 13 instead of being refused and retrained."""
    caplog.set_level("INFO")
    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=20", "train.checkpoint_every=7", *overrides))
    interrupted_at_step_12(cfg, tmp_path / "run", monkeypatch)
    assert train(cfg, tmp_path / "run").status == "completed"
    assert "resuming run from step 13" in caplog.text and "moved to" not in caplog.text


def _crafted_batch(path, payload):
    with open(path, "wb") as handle:
        pickle.dump({"batch_label": "x", "labels": [0], "data": np.zeros((1, 3072), np.uint8), "extra": payload},
                    handle, protocol=2)


def test_a_crafted_cifar_batch_is_refused_in_one_line_before_its_code_runs(cifar_root, tmp_path):
    folder = cifar_root / "cifar10" / "cifar-10-batches-py"
    marker = tmp_path / "payload-ran"
    _crafted_batch(folder / "data_batch_3", Payload(marker))
    with pytest.raises(DataUnavailable) as refused:
        cifar10(str(cifar_root), augment="none")
    message = str(refused.value)
    assert not marker.exists()
    assert "\n" not in message and str(folder / "data_batch_3") in message
    assert "__builtin__.exec" in message and "only arrays and plain values" in message  # protocol 2 spelling


def test_cifar_batches_pickled_as_the_official_files_are_still_read(cifar_root):
    """The official batches are protocol-2 pickles of numpy 1 arrays; the test batches are numpy 2's: both read."""
    folder = cifar_root / "cifar10" / "cifar-10-batches-py"
    rows = np.arange(2 * 3072).reshape(2, 3072).astype(np.uint8)
    for name in ("data_batch_1", "test_batch"):
        with open(folder / name, "wb") as handle:
            pickle.dump({"batch_label": name, "labels": [3, 7], "data": rows, "filenames": ["a", "b"]}, handle,
                        protocol=2)
    data = cifar10(str(cifar_root), augment="none")
    assert data.test_labels.tolist() == [3, 7]
    assert torch.equal(data.test_images.reshape(2, -1), torch.from_numpy(rows))
    assert len(data.train_labels) == 2 + 4 * 16


@pytest.mark.slow
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_sweep_folders_are_no_more_writable_than_the_umask_allows(umask, tiny_text_root, tmp_path):
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "modula_cli.train", "-m", "arch=gpt", "arch.width=8", "arch.depth=1",
            "arch.heads=2", f"data.root={tiny_text_root}", "data.context=8", *TINY_TRAIN, "train.steps=6",
            "optim.lr=0.1,0.2",
            "train.keep_checkpoint=true", f"hydra.sweep.dir={sweep}"]
    done = prewarmed.run(args, timeout=300, umask=umask, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    made = [sweep, *sweep.rglob("*")]
    assert any(p.name == "checkpoint.pt" for p in made) and any(p.name == "results.csv" for p in made)
    loose = [f"{p} {stat.filemode(p.stat().st_mode)}" for p in made if p.stat().st_mode & umask]
    assert loose == []
