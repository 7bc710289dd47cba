"""A launch's life that needs no cluster: runs whose process was killed, the stop marker, the honest closing
line, the threads of a cluster job, the launch as an object, and what a launcher is (its class's ``HOST``) and
the job a run records."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from modula_cli.plumbing import threads
from modula_cli.sweep.host import Host
from modula_cli.plumbing.locks import is_held
from modula_cli.plumbing.signals import MARKER_POLL_S, StopSignal
from modula_cli.results.manifest import forget_launch, read_launch, record_launch
from modula_cli.results.status import INTERRUPTED, RUNNING
from modula_cli.results.summary import as_seen, mark_abandoned, read_summary, summary_record, write_summary
from modula_cli.sweep.cluster import runs_by_job
from modula_cli.sweep.launch import _hydra_quoted
from modula_cli.sweep.progress import closing


# --- runs whose process died -------------------------------------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from modula_cli.plumbing.locks import RunLocks
locks = RunLocks([Path(sys.argv[1])])
assert locks.try_acquire()
print("held", flush=True)
time.sleep(600)
"""


KNOBS = {"arch": "gpt", "data": "shakespeare", "optimizer": "adam", "mode": "normed", "variant": "paper",
         "width": 32, "lr": 0.1, "seed": 0}


def _running_summary(run_dir: Path, step: int) -> None:
    write_summary(run_dir, summary_record(RUNNING, run_dir, KNOBS, "fp", steps_done=step))


def test_a_run_whose_trainer_was_killed_reads_interrupted_at_its_checkpoint_and_a_live_one_running(tmp_path):
    run_dir = tmp_path / "lr=0.1"
    run_dir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        _running_summary(run_dir, 40)
        assert is_held(run_dir) and as_seen(run_dir, read_summary(run_dir))["status"] == RUNNING
        assert mark_abandoned(run_dir) is None  # a live trainer is never declared dead
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    finally:
        holder.kill()
    assert not is_held(run_dir)  # the kernel released the lock with its holder
    seen = as_seen(run_dir, read_summary(run_dir))
    assert (seen["status"], seen["steps_done"]) == (INTERRUPTED, 40) and "killed" in seen["ended"]
    assert read_summary(run_dir)["status"] == RUNNING  # reading changes nothing on disk
    settled = mark_abandoned(run_dir, "SLURM job 7_1: FAILED, exit code 9:0")
    assert settled["status"] == INTERRUPTED and read_summary(run_dir)["ended"] == "SLURM job 7_1: FAILED, exit code 9:0"
    assert mark_abandoned(run_dir) is None  # once


def test_a_lock_left_by_this_very_job_on_a_lost_node_is_taken_over_and_no_other(tmp_path, monkeypatch, caplog):
    """A node that stops answering keeps its trainer, and that trainer's lock. The scheduler requeues the job
    elsewhere: the same job, on another host, takes the run over; another job, or the same job on the
    holder's own host (where the kernel would have released a dead holder's lock), does not."""
    from modula_cli.plumbing.locks import HOST, OWNER_FILE, RunLocks, owner_of

    run_dir = tmp_path / "lr=0.1"
    run_dir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lost = {"pid": holder.pid, "host": "node-lost", "since": 1.0, "job": "slurm:9_0"}
        (run_dir / OWNER_FILE).write_text(json.dumps(lost))  # as the frozen node wrote it
        assert not RunLocks([run_dir], job="slurm:9_1").try_acquire()  # another job: the holder may well be alive
        (run_dir / OWNER_FILE).write_text(json.dumps({**lost, "host": HOST}))
        assert not RunLocks([run_dir], job="slurm:9_0").try_acquire()  # this host: its kernel is the judge
        (run_dir / OWNER_FILE).write_text(json.dumps(lost))
        survivor = RunLocks([run_dir], job="slurm:9_0")
        assert survivor.try_acquire()
        assert "held by pid" in caplog.text and "node-lost is lost, and this run takes over" in caplog.text
        assert owner_of(run_dir)["host"] == HOST and owner_of(run_dir)["job"] == "slurm:9_0"
        assert is_held(run_dir)  # by the survivor now, on the fresh lock file
        assert holder.poll() is None  # the lost holder was never touched
        survivor.release()
    finally:
        holder.kill()


def test_the_report_never_shows_a_killed_run_as_running(tmp_path, capsys):
    from modula_cli.analysis.report import main

    sweep = tmp_path / "sweep"
    run_dir = sweep / "lr=0.1"
    run_dir.mkdir(parents=True)
    _running_summary(run_dir, 30)
    (run_dir / "run.lock").touch()  # it started, and no process holds it now
    main([str(sweep)])
    assert "1 interrupted" in capsys.readouterr().out
    assert json.loads((run_dir / "summary.json").read_text())["status"] == RUNNING  # the report writes no run


def test_a_report_of_a_sweep_still_queued_writes_every_file_and_says_pending(tmp_path, capsys):
    from modula_cli.analysis.report import main

    planned = {f"lr={lr},width={w}": {**KNOBS, "width": w, "lr": lr, "fingerprint": "f"}
               for w in (32, 64, 128) for lr in (0.125, 0.25, 0.5)}
    record_launch(tmp_path, "l1", planned)
    main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "  9 pending" in out and out.count("no completed run: 3 pending") == 3, out
    for name in ("results.csv", "curves.csv", "optimal_lr.csv", "transfer.csv", "transfer.png", "scale.png",
                 "scale.csv"):
        assert (tmp_path / name).exists(), name


def test_a_report_asked_of_a_presets_folder_names_the_sweeps_in_it(tmp_path, capsys):
    from modula_cli.analysis.report import main

    record_launch(tmp_path / "width" / "gpt_shakespeare_paper", "l1", {"lr=0.1": {**KNOBS, "fingerprint": "f"}})
    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path / "width")])
    assert f"the sweeps in it: {tmp_path / 'width' / 'gpt_shakespeare_paper'}" in str(stopped.value)


def test_forgetting_a_refused_launch_leaves_what_was_there_before(tmp_path):
    sweep = tmp_path / "sweep"
    record_launch(sweep, "refused", {"lr=0.1": {"lr": 0.1}})
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    forget_launch(sweep, "refused")
    assert not sweep.exists()  # nothing left behind
    record_launch(sweep, "earlier", {"lr=0.2": {"lr": 0.2}})
    record_launch(sweep, "refused", {"lr=0.1": {"lr": 0.1}, "lr=0.2": {"lr": 0.2}})
    forget_launch(sweep, "refused")
    manifest = json.loads((sweep / "sweep.json").read_text())
    assert list(manifest["launches"]) == ["earlier"] and list(manifest["runs"]) == ["lr=0.2"]


def test_each_job_knows_its_runs_from_the_launch_record(tmp_path):
    record_launch(tmp_path, "l", {"a": {}, "b": {}, "c": {}}, jobs=[(["optim.lr=[0.1,0.2]"], ["b", "a"]),
                                                                    (["optim.lr=0.3"], ["c"])])
    record = read_launch(tmp_path, "l")
    assert runs_by_job(record, [["optim.lr=0.3"], ["optim.lr=[0.1,0.2]"], ["optim.lr=0.4"]]) == \
        [["c"], ["a", "b"], ["lr=0.4"]]  # an unlisted job: its run named from its overrides


# --- stopping and ending ---------------------------------------------------------------------------------

def test_a_stop_marker_reaches_a_job_within_its_poll(tmp_path):
    stop = StopSignal()
    marker = tmp_path / ".stop.launch-1"
    stop.watch(marker)
    assert not stop.requested
    marker.write_text("15")
    deadline = time.monotonic() + MARKER_POLL_S + 1
    while not stop.requested and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stop.requested and stop.signum == signal.SIGTERM
    other = StopSignal()
    other.watch(tmp_path / ".stop.launch-2")  # another launch into the same folder is not stopped
    time.sleep(MARKER_POLL_S + 0.1)
    assert not other.requested


def _launch_with(tmp_path: Path, statuses: dict[str, str | None]) -> tuple:
    planned = {name: {"lr": 0.1, "fingerprint": "f"} for name in statuses}
    record_launch(tmp_path, "L", planned)
    for name, status in statuses.items():
        if status:
            (tmp_path / name).mkdir()
            write_summary(tmp_path / name, {**summary_record(status, tmp_path / name, {}, "f", steps_done=20),
                                            "launch": "L"})
    record = read_launch(tmp_path, "L")
    return record, record.summaries(tmp_path)


def test_the_unfinished_runs_are_listed_interrupted_first_then_by_their_knobs(tmp_path, capsys):
    """The run a relaunch resumes comes first, then the failed, then those not started; widths as numbers."""
    record, summaries = _launch_with(tmp_path, {
        "lr=1.0,width=128": None, "lr=0.5,width=32": None, "lr=4.0,width=64": "failed",
        "lr=0.5,width=64": "interrupted", "lr=0.25,width=128": None})
    closing(tmp_path, record, summaries, stopped=2)
    listed = [line.split(":")[0].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("  lr=")]
    assert listed == ["lr=0.5,width=64", "lr=4.0,width=64", "lr=0.25,width=128", "lr=0.5,width=32",
                      "lr=1.0,width=128"], listed


def test_a_launch_whose_runs_never_landed_is_incomplete_never_exit_0(tmp_path, capsys):
    record, summaries = _launch_with(tmp_path, {"a": None, "b": None})
    assert closing(tmp_path, record, summaries, stopped=None) == 1
    out = capsys.readouterr().out
    assert "sweep incomplete: 0 completed, 0 skipped, 0 diverged, 0 failed, 0 interrupted, 2 not started" in out
    assert "  a: not started" in out


def test_the_closing_line_names_each_unfinished_run_and_its_step(tmp_path, capsys):
    record, summaries = _launch_with(tmp_path, {"a": "completed", "b": "interrupted", "c": None})
    assert closing(tmp_path, record, summaries, stopped=15) == 143
    out = capsys.readouterr().out
    assert "  b: interrupted at step 20\n  c: not started" in out
    assert "sweep stopped by signal 15: 1 completed, 0 skipped, 0 diverged, 0 failed, 1 interrupted, 1 not started" \
        in out


def test_hydra_quoting_keeps_any_sweep_folder_whole():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for folder in ("/tmp/plain", "/tmp/a,b=c [x]", "/tmp/it's", "/tmp/say \"hi\" it's"):
        parsed = OverridesParser.create().parse_override(f"hydra.sweep.dir={_hydra_quoted(folder)}")
        assert parsed.value() == folder


def test_a_cluster_jobs_threads_are_the_cpus_it_was_given(monkeypatch):
    """The CPUs a launcher says its scheduler gave the job (Ray's num_cpus, SLURM's cpus_per_task) are auto's
    count, before the user's OMP_NUM_THREADS; a local launch inside a SLURM allocation takes the allocation's."""
    for name in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = threads.torch.get_num_threads()
    try:
        # more than this 2-core machine: auto alone never says 3 or 5
        assert threads.configure_threads("auto", given=(5, "hydra.launcher.ray.remote.num_cpus")) == 5
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
        assert threads.configure_threads("auto") == 3
        assert threads.configure_threads(2, given=(5, "num_cpus")) == 2  # an explicit count wins
    finally:
        threads.torch.set_num_threads(before)


def _job_config(threads_setting="auto", root=None):
    return OmegaConf.create({"data": {"root": root}, "train": {"threads": threads_setting}, "sweep": {}})


def test_a_placed_task_settles_each_jobs_config_from_its_launch(tmp_path, monkeypatch):
    """What a job takes from its launch travels in the task the launcher sends, not the environment: the launch's
    id and the launching process's data root (where the job names none) in its config, the scheduler's CPUs as
    auto's count, and, for a launcher that runs every job in its own process, the first job's count (the load is
    measured once)."""
    from modula_cli.sweep.job_place import JobPlace, PlacedTask, carry_launch, launch_of

    for name in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODULA_DATA", "shared/data")  # the user's, relative: the job reads it absolute
    measured = []
    monkeypatch.setattr(threads, "busy_cores", lambda *a, **k: measured.append(1) or 0.0)
    hydra_cfg = OmegaConf.create({"launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher."
                                                            "BasicLauncher"}, "job": {"num": 0}})
    multirun = OmegaConf.create({"sweep": {"name": "width"}})
    carry_launch(multirun, "20261206-1")
    seen = []
    before = threads.torch.get_num_threads()
    try:
        monkeypatch.chdir(tmp_path)
        place = JobPlace.here(multirun)
        assert (place.launch, place.cwd, place.data_root, place.cpus) == \
            ("20261206-1", str(tmp_path), str(tmp_path / "shared/data"), None)
        task = PlacedTask.of(seen.append, place)
        for cfg in (_job_config(), _job_config(root="mine"), _job_config(threads_setting=1)):
            task.settle(cfg, hydra_cfg)
            seen.append((launch_of(cfg), cfg.data.root, cfg.train.threads, threads.torch.get_num_threads()))
        auto = seen[0][3]
        root = str(tmp_path / "shared/data")
        assert seen == [("20261206-1", root, "auto", auto), ("20261206-1", "mine", "auto", auto),
                        ("20261206-1", root, 1, 1)]
        assert measured == [1], "a sweep's later jobs keep the first job's count"
        given = PlacedTask.of(task, place.given(3, "hydra.launcher.cpus_per_task"))
        given.settle(_job_config(), hydra_cfg)
        assert threads.torch.get_num_threads() == 3 and measured == [1]
        own = OmegaConf.create({"data": {"name": "my_data:corpus"}, "train": {"threads": 1}, "sweep": {}})
        given.settle(own, hydra_cfg)  # a user's data node without a root gets none
        assert "root" not in own.data
    finally:
        threads.torch.set_num_threads(before)


def test_a_sweep_with_a_sweeper_that_does_not_place_its_jobs_is_refused(tmp_path):
    """Hydra's basic sweeper would start jobs without their launch's id, folder, data root or threads."""
    modula_sweep = Path(sys.executable).parent / "modula-sweep"  # the user's command, installed beside this Python
    done = subprocess.run([str(modula_sweep), "-m", "hydra/sweeper=basic", "optim.lr=0.1,0.2",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}", "train.steps=2"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode != 0
    assert "hydra/sweeper: hydra._internal.core_plugins.basic_sweeper.BasicSweeper does not give its jobs their " \
        "place in the launch; allowed: packing (modula-sweep's own, the default) or a subclass of it" in done.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_job_whose_launch_folder_is_not_on_its_node_says_so(tmp_path):
    from modula_cli.sweep.job_place import JobPlace

    with pytest.raises(RuntimeError, match=r"the launch's working directory .*/gone is not on .*: launch from a "
                                           r"folder that every node mounts at the same path"):
        JobPlace("L", str(tmp_path / "gone"), str(tmp_path)).enter()


# --- the launch as an object ----------------------------------------------------------------------------------

def _open_launch(sweep: Path, runs: dict[str, dict]):
    from modula_cli.plumbing.signals import STOP
    from modula_cli.sweep.launch import Launch

    record_launch(sweep, "L", runs)
    launch = Launch("L", sweep, Host(in_process=True, local=True))
    launch.opened.enter_context(STOP.installed())
    launch.opened.enter_context(STOP.telling(launch._write_stop_marker))
    return launch


def test_the_launch_closes_what_it_opened_whatever_its_end_meets(tmp_path, monkeypatch, capsys):
    """An OSError settling one run costs neither the closing lines nor the signal handlers; an error in the
    report's writing still gives the signals back before it surfaces."""
    previous = signal.getsignal(signal.SIGTERM)
    launch = _open_launch(tmp_path, {"a": {"lr": 0.1, "fingerprint": "f"}})
    assert signal.getsignal(signal.SIGTERM) != previous
    monkeypatch.setattr("modula_cli.sweep.launch.mark_abandoned",
                        lambda run_dir: (_ for _ in ()).throw(OSError("stale NFS handle")))
    monkeypatch.setattr("modula_cli.sweep.launch.write_sweep_report", lambda config, sweep_dir: None)
    assert launch.end(None) == 1  # its run never started: incomplete
    assert signal.getsignal(signal.SIGTERM) == previous
    assert "sweep incomplete: 0 completed" in capsys.readouterr().out
    launch = _open_launch(tmp_path, {"a": {"lr": 0.1, "fingerprint": "f"}})
    monkeypatch.setattr("modula_cli.sweep.launch.write_sweep_report",
                        lambda config, sweep_dir: (_ for _ in ()).throw(RuntimeError("disk full")))
    with pytest.raises(RuntimeError, match="disk full"):
        launch.end(None)
    assert signal.getsignal(signal.SIGTERM) == previous


def test_a_signal_writes_the_launchs_own_stop_marker_and_only_while_it_is_open(tmp_path, monkeypatch):
    from modula_cli.plumbing.signals import STOP

    monkeypatch.setattr("modula_cli.sweep.launch.write_sweep_report", lambda config, sweep_dir: None)
    monkeypatch.setattr(STOP, "signum", None)  # restored after the test: the signal below is this test's own
    monkeypatch.setattr(STOP, "received", False)
    launch = _open_launch(tmp_path, {})
    STOP._handle(signal.SIGTERM, None)
    assert (tmp_path / ".stop.L").read_text() == str(int(signal.SIGTERM))
    assert launch.end(None) == 128 + signal.SIGTERM  # a local launch takes its marker back
    assert not (tmp_path / ".stop.L").exists()
    with STOP.installed():
        STOP._handle(signal.SIGTERM, None)  # the launch is over: nobody writes its marker now
    assert not (tmp_path / ".stop.L").exists()


def test_a_busy_run_of_a_job_in_this_process_is_left_for_the_end_of_its_launch(tmp_path):
    """Hydra's basic launcher ends each job with ``on_job_end`` on the callback that holds the launch: a busy
    run is deferred with what it needs to train later; any other end is not."""
    import pickle

    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    from modula_cli.results.status import BUSY
    from modula_cli.results.summary import Outcome
    from modula_cli.sweep.callback import SweepCallback

    callback = SweepCallback()
    callback.launch = _open_launch(tmp_path, {})
    try:
        for status in (BUSY, "completed"):
            hydra_cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(tmp_path / status)}}})
            ended = JobReturn(overrides=[f"optim.lr={len(status)}"], cfg=OmegaConf.create({"train": {"steps": 3}}),
                              hydra_cfg=hydra_cfg, status=JobStatus.COMPLETED)
            ended.return_value = Outcome(status)
            callback.on_job_end(ended.cfg, ended)
        failed = JobReturn(overrides=["x=1"], status=JobStatus.FAILED)
        failed.return_value = RuntimeError("boom")
        callback.on_job_end(None, failed)
        [deferred] = callback.launch.deferred
        assert (deferred.run_dir, deferred.overrides, deferred.cfg.train.steps) == (tmp_path / BUSY, ["optim.lr=4"], 3)
        assert pickle.loads(pickle.dumps(callback)).launch is None  # launchers pickle it into every job
    finally:
        callback.launch.opened.close()


HYDRAS_BASIC = get_class("hydra._internal.core_plugins.basic_launcher.BasicLauncher")


class EagerBasic(HYDRAS_BASIC):
    """A user's launcher built on Hydra's basic one: it runs where its base does."""


class Elsewhere(HYDRAS_BASIC):
    HOST = Host(on_stop="exit", detaches=True)  # a launcher of its own kind, declared on its class


def test_a_launchers_host_comes_from_its_class():
    """What a launcher is (in process, local, sharing cores, how a stopped job ends, whether it detaches) is read
    from its class: declared as HOST by a launcher of this package or a user's, else Hydra's own launchers by
    class, a subclass as its base; never from the spelling of its _target_."""
    from modula_cli.sweep.host import IN_ITS_CHILDREN, host_of

    def host(target):
        return host_of({"_target_": target})

    assert host("hydra._internal.core_plugins.basic_launcher.BasicLauncher") == Host(in_process=True, local=True)
    assert host("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher") == Host(local=True,
                                                                                              shares_cores=True)
    assert host("hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher").on_stop == "raise"
    ours = host("hydra_plugins.modula_sweep.slurm_launcher.SlurmLauncher")
    assert ours.on_stop == "exit" and ours.detaches and not ours.local
    ray = host("hydra_plugins.modula_sweep.ray_launcher.RayClusterLauncher")
    assert not ray.detaches and "Ray ends a driver's tasks" in ray.why_attached
    assert host(f"{__name__}.EagerBasic") == Host(in_process=True, local=True)
    assert host(f"{__name__}.Elsewhere") == Host(on_stop="exit", detaches=True)
    assert host("hydra.plugins.launcher.Launcher") == Host() and Host().why_attached == IN_ITS_CHILDREN


def test_a_runs_job_is_the_one_its_launcher_names(tmp_path, tiny_text_root):
    """The job a run trains in reaches it from its launcher (the scheduler's name on the launcher's class, the
    job's id as hydra.job.id), not from the environment: recorded in run.owner and summary.json as
    "slurm:12_3"; a launcher without a scheduler names none."""
    from helpers import compose_config, tiny_gpt
    from modula_cli.sweep.host import job_of
    from modula_cli.sweep.job import train_job

    assert job_of(Host(scheduler="slurm"), "12_3") == "slurm:12_3" and job_of(Host(scheduler="ray"), "ab") == "ray:ab"
    assert job_of(Host(in_process=True, local=True), 0) is None and job_of(Host(scheduler="slurm"), None) is None
    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=2"))
    run_dir = tmp_path / "sweep" / "lr=0.1"
    outcome = train_job(cfg, run_dir, ["optim.lr=0.1"], "L", wait=True, job="slurm:12_3")
    assert outcome.status == "completed"
    assert json.loads((run_dir / "summary.json").read_text())["job"] == "slurm:12_3"


def test_a_launcher_registered_from_outside_runs_a_sweep_end_to_end(tmp_path, tiny_text_root):
    """A new launcher is its class (with its HOST), its scheduler's Jobs and a config file: the toy of
    tests/toy_plugin/, a Hydra plugin on the launch's path named in a --config-dir. A sweep through it trains every
    run, each recording the job it trained in as the launcher's scheduler names it ("toy:t0"), and a relaunch
    sends nothing to it."""
    import prewarmed

    plugin = Path(__file__).parent / "toy_plugin"  # on the launch's path: Hydra finds the plugin there
    config_dir = tmp_path / "conf"
    (config_dir / "hydra" / "launcher").mkdir(parents=True)
    (config_dir / "hydra" / "launcher" / "toy.yaml").write_text(
        "_target_: hydra_plugins.modula_toy.toy_launcher.ToyLauncher\npoll_s: 0.1\n")
    sweep_dir = tmp_path / "sweep"
    command = [sys.executable, "-m", "modula_cli.train", "-m", "--config-dir", str(config_dir), "hydra/launcher=toy",
               *tiny_gpt_overrides(tiny_text_root), "optim.lr=0.05,0.1", f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    first = prewarmed.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "sweep finished: 2 completed, 0 skipped, 0 diverged, 0 failed" in first.stdout, first.stdout[-3000:]
    summaries = [json.loads(path.read_text()) for path in sorted(sweep_dir.glob("*/summary.json"))]
    assert sorted(summary["job"] for summary in summaries) == ["toy:t0", "toy:t1"]
    assert {summary["status"] for summary in summaries} == {"completed"}
    again = prewarmed.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "sweep finished: 0 completed, 2 skipped, 0 diverged, 0 failed" in again.stdout, again.stdout[-3000:]


def tiny_gpt_overrides(root) -> list[str]:
    from helpers import tiny_gpt

    return tiny_gpt(root, "train.steps=3")
