"""Sweeps as a cluster user meets them: two launches into one folder, corrupt files, signals, runs that all
diverge or fail, bad input, an unreachable W&B, missing data and long override lists (docs/reliability.md)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from helpers import TINY_TRAIN, compose_config, iterations, tiny_gpt
from modula_cli.config.identity import MAX_NAME_BYTES, run_name
from modula_cli.config.members import member_overrides
from modula_cli.analysis.report import write_report
from modula_cli.run.trainer import train
from modula_cli.plumbing.signals import StopRequested
import prewarmed

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "modula_cli.train"]


def tiny_sweep_args(tmp_path, sweep_dir, *overrides):
    return ["-m", "arch=gpt", "arch.width=8", "arch.depth=1", "arch.heads=2", f"data.root={tmp_path / 'data'}",
            "data.context=8", *TINY_TRAIN, f"hydra.sweep.dir={sweep_dir}", *overrides]


def start(args, cwd, env_extra=None):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return prewarmed.start([*CLI, *args], cwd=cwd, env=env)


def finish(process, timeout=300):
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # a hung sweep must not outlive its test (and load the machine)
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"no exit within {timeout} s:\n{out[-2000:]}\n{err[-2000:]}") from None
    return process.returncode, out, err


def run_folders(sweep_dir):
    return sorted(p for p in Path(sweep_dir).iterdir() if p.is_dir() and not p.name.startswith("."))


def steps_of(steps: int) -> list[int]:
    """The logged steps of a finished run of ``train.steps=steps`` under the default variant."""
    return list(range(iterations(compose_config(f"train.steps={steps}"))))


def metric_steps(run_dir):
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if "train_loss" in line]


@pytest.fixture
def text_tmp(tiny_text_root):
    return tiny_text_root.parent


def test_two_launches_into_one_sweep_folder_train_each_run_once(text_tmp):
    sweep_dir = text_tmp / "sweep"
    args = tiny_sweep_args(text_tmp, sweep_dir, "optim.lr=0.02,0.05,0.1,0.2", "train.steps=40")
    first, second = start(args, text_tmp), start(args, text_tmp)
    outcomes = [finish(first), finish(second)]
    for code, out, err in outcomes:
        assert code == 0, err[-3000:]
        assert "sweep finished:" in out and " 0 failed" in out, out
    trained = sum(int(out.split("sweep finished: ")[1].split(" completed")[0]) for _, out, _ in outcomes)
    assert trained == 4  # every run trained exactly once, by one process or the other
    for run in run_folders(sweep_dir):
        assert metric_steps(run) == steps_of(40), run.name  # one writer: no duplicated records
        assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    results = pd.read_csv(sweep_dir / "results.csv")
    assert len(results) == 4 and set(results["status"]) == {"completed"}


def test_corrupt_summaries_are_retrained_and_never_crash_the_report(text_tmp, caplog):
    sweep_dir = text_tmp / "sweep"
    args = tiny_sweep_args(text_tmp, sweep_dir, "optim.lr=0.05,0.1,0.2", "train.steps=6")
    code, out, err = finish(start(args, text_tmp))
    assert code == 0, err
    runs = run_folders(sweep_dir)
    (runs[0] / "summary.json").write_bytes(b'{"status": "compl\xff\xfe')     # not UTF-8
    (runs[1] / "summary.json").write_text('["completed", 1.0]')              # JSON, but not a summary
    (runs[2] / "summary.json").write_text('{"status": "completed", "tra')   # truncated
    frame = write_report(sweep_dir, quiet=True)["results"]  # the report reads them as not finished
    assert len(frame) == 3 and set(frame["status"]) == {"pending"}
    report = prewarmed.run([sys.executable, "-m", "modula_cli.analysis.report", str(sweep_dir)], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0 and "Traceback" not in report.stderr
    assert "is corrupt" in report.stdout + report.stderr
    code, out, err = finish(start(args, text_tmp))
    assert code == 0, err
    assert "sweep finished: 3 completed, 0 skipped" in out
    for run in runs:
        assert f"{run / 'summary.json'}" in out + err  # each warning names its file
        assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_truncated_checkpoint_warns_and_starts_afresh(tmp_path, tiny_text_root, monkeypatch, caplog):
    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=12", "train.checkpoint_every=4"))
    reference = train(cfg, tmp_path / "reference").summary
    import modula_cli.run.loop as run_module

    original = run_module.optimizer_step

    def stop_at_step_6(*args, **kwargs):
        if args[5] == 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    monkeypatch.setattr(run_module, "optimizer_step", stop_at_step_6)
    with pytest.raises(StopRequested):
        train(cfg, tmp_path / "run")
    monkeypatch.setattr(run_module, "optimizer_step", original)
    path = tmp_path / "run" / "checkpoint.pt"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a node died mid-copy
    resumed = train(cfg, tmp_path / "run").summary
    assert "checkpoint.pt is unreadable" in caplog.text and "starting this run afresh" in caplog.text
    assert (tmp_path / "run" / "checkpoint.pt.corrupt").exists()
    assert resumed["status"] == "completed" and resumed["train_loss"] == reference["train_loss"]
    assert metric_steps(tmp_path / "run") == steps_of(12)


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_stops_the_sweep_writes_the_report_and_relaunch_resumes(signum, exit_code, text_tmp):
    sweep_dir = text_tmp / "sweep"
    args = tiny_sweep_args(text_tmp, sweep_dir, "optim.lr=0.05,0.1,0.2", "train.steps=400",
                           "train.checkpoint_every=0")
    process = start(args, text_tmp)
    deadline = time.time() + 120
    while time.time() < deadline and not any(len(p.read_text().splitlines()) >= 5
                                              for p in sweep_dir.glob("*/metrics.jsonl")):
        time.sleep(0.05)  # signal a few steps into the first run, long before its 400th step
    sent = time.time()
    process.send_signal(signum)
    code, out, err = finish(process)
    assert code == exit_code, err[-3000:]
    assert time.time() - sent < 30
    assert "sweep stopped by signal" in out and "Traceback" not in err
    # no job is announced as if it started (Hydra's "#N : …" lines; each run has its own progress line)
    assert not [line for line in out.splitlines() if "\t#" in line], out
    statuses = {p.name: json.loads((p / "summary.json").read_text())["status"]
                for p in run_folders(sweep_dir) if (p / "summary.json").exists()}
    assert list(statuses.values()) == ["interrupted"]  # no further run started
    stopped = sweep_dir / next(iter(statuses))
    assert (stopped / "checkpoint.pt").exists() and (sweep_dir / "results.csv").exists()
    steps_before = metric_steps(stopped)
    assert 0 < len(steps_before) < 400
    if signum == signal.SIGINT:
        return
    code, out, err = finish(start(args, text_tmp))
    assert code == 0 and "sweep finished: 3 completed" in out, err[-3000:]
    assert f"resuming {stopped.name} from step" in out + err
    assert metric_steps(stopped) == steps_of(400)


def test_all_diverged_or_all_failed_sweeps_still_report(text_tmp):
    sweep_dir = text_tmp / "diverged"
    args = tiny_sweep_args(text_tmp, sweep_dir, "optim.mode=unnormed", "optim.lr=1000,2000", "train.steps=20")
    code, out, err = finish(start(args, text_tmp))
    assert code == 0, err[-3000:]
    assert "no completed run: 2 diverged" in out  # this grid sweeps only the LR: one line, no scale value
    assert "sweep finished: 0 completed, 0 skipped, 2 diverged, 0 failed" in out
    # the report's files say so: each run diverged early, without a loss; each LR point diverged, without a
    # mean; no optimum and no transfer to report; the plot is drawn all the same
    results = pd.read_csv(sweep_dir / "results.csv").sort_values("lr")
    assert list(results["status"]) == ["diverged", "diverged"] and list(results["lr"]) == [1000.0, 2000.0]
    assert results["train_loss"].isna().all() and (results["steps_done"] < 20).all()
    curves = pd.read_csv(sweep_dir / "curves.csv").sort_values("lr")
    assert list(curves["lr"]) == [1000.0, 2000.0] and list(curves["diverged"]) == [1, 1]
    assert list(curves["seeds"]) == [0, 0] and curves["mean"].isna().all() and (curves["missing"] == 0).all()
    assert pd.read_csv(sweep_dir / "optimal_lr.csv").empty and pd.read_csv(sweep_dir / "transfer.csv").empty
    assert (sweep_dir / "transfer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sweep_dir = text_tmp / "failed"
    lrs = ("0.1", "0.2")
    for lr in lrs:  # disk problems in every run folder
        job = ["arch=gpt", "arch.width=8", "arch.depth=1", "arch.heads=2", "data.context=8", *TINY_TRAIN,
               "train.steps=20", f"optim.lr={lr}"]
        (sweep_dir / run_name(job) / "metrics.jsonl").mkdir(parents=True)
    code, out, err = finish(start(tiny_sweep_args(text_tmp, sweep_dir, "optim.lr=0.1,0.2", "train.steps=20"),
                                  text_tmp))
    assert code == 1 and "no completed run: 2 failed" in out, out + err[-2000:]
    results = pd.read_csv(sweep_dir / "results.csv").sort_values("lr")
    assert list(results["status"]) == ["failed", "failed"] and list(results["lr"]) == [0.1, 0.2]
    assert results["error"].str.contains("IsADirectoryError").all() and results["train_loss"].isna().all()
    curves = pd.read_csv(sweep_dir / "curves.csv")
    assert list(curves["failed"]) == [1, 1] and list(curves["diverged"]) == [0, 0] and curves["mean"].isna().all()
    assert pd.read_csv(sweep_dir / "optimal_lr.csv").empty and pd.read_csv(sweep_dir / "transfer.csv").empty


@pytest.mark.parametrize("override, message", [
    ("data.context=5000", "data.context=5000 needs 5001 tokens per window, but the validation split"),
    ("data.context=100000", "exceeds data.max_context=8192"),
    ("+train.stepz=5", "unknown key train.stepz; did you mean train.steps?"),
    ("+optim.betta1=0.5", "unknown key optim.betta1; did you mean optim.beta1?"),
    ("train.steps=-3", "train.steps=-3; must be an integer >= 1"),
])
def test_bad_single_run_rejected_in_one_line_before_training(override, message, text_tmp):
    args = tiny_gpt(text_tmp / "data", "train.steps=5", override, f"hydra.run.dir={text_tmp / 'run'}")
    result = prewarmed.run([*CLI, *args], cwd=text_tmp, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (text_tmp / "run" / "metrics.jsonl").exists()


def test_bad_sweep_rejected_before_any_run(text_tmp):
    sweep_dir = text_tmp / "sweep"
    args = tiny_sweep_args(text_tmp, sweep_dir, "data.context=8,5000", "+train.stepz=5", "optim.lr=0.1")
    code, out, err = finish(start(args, text_tmp))
    assert code != 0 and "Traceback" not in err
    assert "data.context=5000 needs 5001 tokens" in err and "unknown key train.stepz" in err
    assert not sweep_dir.exists() or not run_folders(sweep_dir)


def test_unreachable_wandb_warns_once_per_sweep_and_logs_locally(text_tmp):
    sweep_dir = text_tmp / "sweep"
    env = {"WANDB_API_KEY": "x" * 40, "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_SILENT": "true",
           "WANDB_DIR": str(text_tmp)}
    args = tiny_sweep_args(text_tmp, sweep_dir, "logger=wandb", "optim.lr=0.1,0.2", "train.steps=4")
    began = time.time()
    code, out, err = finish(start(args, text_tmp, env), timeout=240)
    assert code == 0, err[-3000:]
    assert (out + err).count("W&B is unreachable") == 1
    assert time.time() - began < 120
    runs = [p for p in run_folders(sweep_dir) if (p / "summary.json").exists()]
    assert len(runs) == 2
    for run in runs:
        assert metric_steps(run) == steps_of(4) and any((run / "wandb").glob("offline-run-*"))


def test_missing_local_dataset_path_is_named_and_leaves_nothing(text_tmp):
    missing = text_tmp / "no_such_corpus"
    args = ["arch=gpt", "data=tinystories", f"data.source={missing}", "data.tokenizer=byte",
            f"data.root={text_tmp / 'data'}", "train.steps=2", f"hydra.run.dir={text_tmp / 'run'}"]
    result = prewarmed.run([*CLI, *args], cwd=text_tmp, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and f"data.source={missing}: no such folder" in result.stderr
    assert "hub" not in result.stderr and not list((text_tmp / "data").rglob("*.tmp"))


def test_prepared_cache_build_failure_leaves_no_temporary_folder(tmp_path):
    from modula_cli.data.storage import prepare_once

    def broken(folder):
        (folder / "train.bin").write_bytes(b"partial")
        raise RuntimeError("tokenizer crashed")

    with pytest.raises(RuntimeError):
        prepare_once(tmp_path / "corpus" / "variant", {"dataset": "x"}, broken)
    assert [p.name for p in (tmp_path / "corpus").iterdir()] == [".variant.lock"]  # only the hidden lock


def test_run_folder_names_stay_short_readable_and_distinct():
    lrs = ",".join(repr(2.0**e) for e in range(-13, -2))
    overrides = ["arch=gpt", "arch.depth=16", "arch.width=128", "arch.heads=8", "arch.blocks_mass=5",
                 "data=shakespeare", "data.context=256", "optim=adam", "optim.mode=unnormed", "optim.wd=0.01",
                 "optim.beta2=0.95", "optim.warmup_steps=100", "train.steps=2000", "train.batch_size=64",
                 "train.eval_batches=20", "train.seed=3", "data.root=/a/very/long/path/that/never/enters/a/name",
                 f"optim.lr=[{lrs}]"]
    pack = run_name(overrides)
    members = [run_name(member_overrides(overrides, {"optim.lr": 2.0**e})) for e in range(-13, -2)]
    for name in [pack, *members]:
        assert len(name.encode()) <= MAX_NAME_BYTES and "/" not in name
        assert "depth=16" in name and "mode=unnormed" in name and ",h=" in name
    assert len(set(members)) == 11 and "lr=0.0001220703125" in members[0]
    assert run_name(list(reversed(overrides))) == pack  # order never matters
    assert run_name([*overrides[:-1], "optim.wd=0.02", overrides[-1]]) != pack  # the hash keeps them apart
    assert run_name(["arch.width=64", "optim.lr=1e-3"]) == run_name(["optim.lr=0.001", "arch.width=64"]) \
        == "lr=0.001,width=64"


def test_packed_sweep_with_many_overrides_runs(text_tmp):
    sweep_dir = text_tmp / "sweep"
    args = tiny_sweep_args(text_tmp, sweep_dir, "optim.mode=unnormed", "sweep.pack=true", "train.steps=3",
                           "optim.lr=[0.001,0.002,0.004,0.008,0.016,0.032,0.064,0.128,0.256,0.512,1.024]",
                           "optim.wd=0.001", "optim.beta2=0.95", "optim.warmup_steps=1", "arch.blocks_mass=4",
                           "train.seed=1", "optim.eps=1e-12")
    code, out, err = finish(start(args, text_tmp))
    assert code == 0, err[-3000:]
    assert "sweep finished: " in out and " 0 failed" in out  # 1.024 may diverge: finished all the same
    summaries = [json.loads((p / "summary.json").read_text()) for p in run_folders(sweep_dir)
                 if (p / "summary.json").exists()]
    assert len(summaries) == 11 and {s["status"] for s in summaries} <= {"completed", "diverged"}
    assert sorted(s["lr"] for s in summaries)[-1] == 1.024 and all(s["packed_with"] == 11 for s in summaries)
    assert all("optim.wd=0.001" in s["overrides"] for s in summaries)
    assert torch.tensor([len(p.name) for p in run_folders(sweep_dir)]).max() <= MAX_NAME_BYTES


def test_stop_request_survives_the_trip_back_from_a_job_process():
    import pickle

    stop = pickle.loads(pickle.dumps(StopRequested(signal.SIGTERM)))
    assert stop.signum == signal.SIGTERM and stop.exit_code == 143
