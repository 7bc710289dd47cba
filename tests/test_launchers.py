"""The cluster launchers' logic that needs no cluster: fitting a request to what SLURM's commands and Ray
report (GPU partitions and GPU nodes, which this machine cannot offer: their configuration is tested here, on
the commands' real output formats), the sbatch script a GPU partition gets, task states, runs whose process
was killed, the stop marker, the honest closing line, and the threads of a cluster job."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra.utils import get_class

from modula_cli.plumbing import threads
from modula_cli.sweep.host import Host
from modula_cli.plumbing.locks import is_held
from modula_cli.plumbing.signals import MARKER_POLL_S, StopSignal
from modula_cli.results.manifest import forget_launch, read_launch, record_launch
from modula_cli.results.status import INTERRUPTED, RUNNING
from modula_cli.results.summary import as_seen, mark_abandoned, read_summary, summary_record, write_summary
from modula_cli.sweep import ray_cluster, slurm, slurm_tasks
from modula_cli.sweep.cluster import runs_by_job
from modula_cli.sweep.launch import _hydra_quoted
from modula_cli.sweep.progress import closing

# `scontrol show partition -o` / `scontrol show node -o` of a cluster with a CPU and a GPU partition
DATA = Path(__file__).parent / "data"
PARTITIONS = (DATA / "scontrol_show_partition.txt").read_text()
NODES = (DATA / "scontrol_show_node.txt").read_text()
BASE = {"partition": None, "cpus_per_task": "auto", "gpus_per_node": "auto", "mem_gb": "auto", "tasks_per_node": 1,
        "nodes": 1, "timeout_min": 240, "gres": None, "gpus_per_task": None}


@pytest.fixture
def cluster():
    return slurm.partitions(PARTITIONS, NODES)


def test_scontrol_records_times_and_gres_parse_as_slurm_prints_them(cluster):
    assert set(cluster) == {"cpu", "gpu", "old"} and cluster["cpu"].default and not cluster["gpu"].default
    assert [n.name for n in cluster["cpu"].nodes] == ["c01", "c02"] and cluster["old"].nodes[0].name == "c01"
    g01 = cluster["gpu"].nodes[0]
    assert (g01.cpus, g01.memory_mb, g01.gpus, g01.usable) == (48, 512000, 4, True)
    assert not cluster["cpu"].nodes[1].usable  # DRAINED
    gpu = cluster["gpu"]
    assert (gpu.max_time_min, gpu.max_mem_per_node_mb, gpu.max_nodes) == (240, 256000, 1)
    assert cluster["cpu"].max_time_min == 2 * 1440 and math.isinf(cluster["old"].max_time_min)
    assert [slurm.minutes(t) for t in ("30", "1:30", "2:00:00", "1-12", "1-00:30", "1-00:00:30")] == \
        [30, 1.5, 120, 2160, 1470, 1440.5]
    assert [slurm.gpu_count(g) for g in ("(null)", "gpu:4", "gpu:a100:2,gpu:v100:2(S:0)", "shard:8", "gpu")] == \
        [0, 4, 4, 0, 1]
    record = slurm.records("NodeName=x OS=Linux 6.1 #1 SMP Gres=gpu:2 AllocTRES=")[0]
    assert record == {"NodeName": "x", "OS": "Linux 6.1 #1 SMP", "Gres": "gpu:2", "AllocTRES": ""}


def test_auto_follows_the_partition_one_gpu_per_task_only_where_there_are_gpus(cluster):
    cpu = slurm.fit(BASE, cluster)
    assert not cpu.problems and cpu.partition == "cpu"
    # no GPU asked on a CPU partition; 8 CPUs; memory in proportion: 128000 MB × 8 / 32 CPUs = 31.25 GB → 31
    assert (cpu.params["gpus_per_node"], cpu.params["cpus_per_task"], cpu.params["mem_gb"]) == (None, 8, 31)
    gpu = slurm.fit({**BASE, "partition": "gpu"}, cluster)
    assert not gpu.problems
    # one GPU per task; memory 512000 × 8 / 48 = 85 GB, capped at 32 GB
    assert (gpu.params["gpus_per_node"], gpu.params["cpus_per_task"], gpu.params["mem_gb"]) == (1, 8, 32)
    two = slurm.fit({**BASE, "partition": "gpu", "tasks_per_node": 2}, cluster)
    assert two.params["gpus_per_node"] == 2 and two.params["cpus_per_task"] == 8
    by_gres = slurm.fit({**BASE, "partition": "gpu", "gres": "gpu:2"}, cluster)
    assert by_gres.params["gpus_per_node"] is None  # asked for another way: not twice
    assert cpu.notes == [] and gpu.describe() == "partition gpu, 8 CPU per task, 32 GB and 1 GPU per node"


def sbatch_script(params: dict, tmp_path: Path) -> str:
    """The sbatch script submitit submits for a task with these fitted settings, as the launcher builds its
    executor: a submission through submitit's public API to an ``sbatch`` on PATH that keeps the script it is
    given. (submitit's executor only refuses to be made where `srun` is not on PATH, which says nothing of the
    script's text, so that one check is answered here.)"""
    from submitit.slurm.slurm import SlurmExecutor

    from hydra_plugins.modula_sweep.slurm_launcher import slurm_executor

    bin_dir, kept = tmp_path / "bin", tmp_path / "submitted.sh"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\ncp "$1" {kept}\necho "Submitted batch job 4242"\n')
    (bin_dir / "sbatch").chmod(0o755)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 1))
        patch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        job = slurm_executor(params).submit(print, "the task")
    assert job.job_id == "4242"
    return kept.read_text()


def test_a_gpu_partition_gets_an_sbatch_script_that_asks_for_its_gpu(cluster, tmp_path):
    fitted = slurm.fit({**BASE, "partition": "gpu", "submitit_folder": str(tmp_path), "max_num_timeout": 20,
                        "signal_delay_s": 120, "array_parallelism": 64, "setup": [], "additional_parameters": {},
                        "name": "train", "stderr_to_stdout": False}, cluster)
    script = sbatch_script(fitted.params, tmp_path)
    for line in ("--partition=gpu", "--gpus-per-node=1", "--cpus-per-task=8", "--mem=32GB", "--time=240",
                 "--signal=USR2@120"):
        assert f"#SBATCH {line}\n" in script, script
    on_cpu = slurm.fit({**BASE, "submitit_folder": str(tmp_path)}, cluster)
    assert "gpus" not in sbatch_script(on_cpu.params, tmp_path)


def test_runs_per_task_sizes_one_job_for_its_runs_and_auto_fills_a_gpu_node(cluster, tmp_path):
    """runs_per_task=N: N SLURM tasks in one job, each with a run's CPUs; auto: one run per GPU of a node."""
    auto = slurm.fit({**BASE, "partition": "gpu", "runs_per_task": "auto"}, cluster)
    assert not auto.problems
    # the gpu nodes have 4 GPUs and 48 CPUs: 4 runs, 8 CPUs each (48 // 4 = 12, at most 8), 4 × 32 GB capped at
    # the node's share for 32 CPUs (512000 MB × 32 / 48 = 333 GB) and the partition's 250 GB per node
    assert (auto.params["runs_per_task"], auto.params["tasks_per_node"], auto.params["gpus_per_node"],
            auto.params["cpus_per_task"], auto.params["mem_gb"]) == (4, 4, 4, 8, 128)
    assert auto.describe() == "partition gpu, 4 runs per job (a task each), 8 CPU per task, 128 GB and 4 GPU per node"
    assert slurm.fit({**BASE, "runs_per_task": "auto"}, cluster).params["runs_per_task"] == 1  # no GPU: one run
    two = slurm.fit({**BASE, "runs_per_task": 2, "cpus_per_task": 4}, cluster)
    assert (two.params["tasks_per_node"], two.params["cpus_per_task"], two.params["gpus_per_node"]) == (2, 4, None)
    script = sbatch_script({**auto.params, "submitit_folder": str(tmp_path), "max_num_timeout": 20,
                            "signal_delay_s": 120, "array_parallelism": 64, "setup": [], "additional_parameters": {},
                            "name": "train", "stderr_to_stdout": False, "runs_per_task": None}, tmp_path)
    for line in ("--ntasks-per-node=4", "--gpus-per-node=4", "--cpus-per-task=8", "--mem=128GB"):
        assert f"#SBATCH {line}\n" in script, script


@pytest.mark.parametrize("change, message", [
    ({"partition": "gpu", "runs_per_task": 8}, "hydra.launcher.runs_per_task=8 × 1 GPU, but the nodes of partition "
                                               "gpu have at most 4 GPUs; set hydra.launcher.runs_per_task=4 or less "
                                               "(or auto)"),
    ({"cpus_per_task": 20, "runs_per_task": 2}, "hydra.launcher.cpus_per_task=20 × runs_per_task=2 needs 40 CPUs on "
                                                "one node, but the nodes of partition cpu have at most 32"),
    ({"runs_per_task": 0}, "hydra.launcher.runs_per_task=0; allowed: auto, or an integer >= 1"),
    ({"runs_per_task": 2, "tasks_per_node": 2}, "hydra.launcher.runs_per_task=2 with tasks_per_node=2: a run of "
                                                "several tasks (one process per GPU) trains alone in its job"),
    ({"cpus_per_task": 64}, "hydra.launcher.cpus_per_task=64 needs 64 CPUs on one node, but the nodes of partition "
                            "cpu have at most 32; set hydra.launcher.cpus_per_task=32 or less (or auto)"),
    ({"cpus_per_task": 20, "tasks_per_node": 2}, "cpus_per_task=20 × tasks_per_node=2 needs 40 CPUs on one node"),
    ({"gpus_per_node": 1}, "hydra.launcher.gpus_per_node=1, but no node of partition cpu has a GPU; set "
                           "hydra.launcher.gpus_per_node=0 (or auto)"),
    ({"partition": "gpu", "gpus_per_node": 8}, "gpus_per_node=8, but the nodes of partition gpu have at most 4 GPUs; "
                                               "set hydra.launcher.gpus_per_node=4 or less"),
    ({"partition": "gpu", "gpus_per_task": 3, "tasks_per_node": 2, "gpus_per_node": 0},
     "gpus_per_task=3 (6 GPUs per node in all), but the nodes of partition gpu have at most 4 GPUs"),
    ({"mem_gb": 200}, "hydra.launcher.mem_gb=200 is more than a node of partition cpu has (125.0 GB at most)"),
    ({"partition": "gpu", "mem_gb": 300}, "mem_gb=300 is more than a node of partition gpu has (250.0 GB at most)"),
    ({"partition": "gpu", "timeout_min": 600}, "timeout_min=600 exceeds the time limit of partition gpu (240 minutes)"),
    ({"partition": "gpu", "nodes": 2}, "hydra.launcher.nodes=2: partition gpu has 1 node(s) for one job"),
    ({"gres": "gpu:1"}, "hydra.launcher.gres=gpu:1, but no node of partition cpu has a GPU; remove it: "
                        "hydra.launcher.gres=null"),
    ({"partition": "nope"}, "hydra.launcher.partition=nope is not a partition of this cluster (partitions: cpu, gpu, "
                            "old)"),
    ({"partition": "old"}, "partition old is INACTIVE: it accepts no jobs"),
    ({"cpus_per_task": "many"}, "hydra.launcher.cpus_per_task='many'; allowed: auto, or an integer >= 0"),
])
def test_a_request_no_node_can_satisfy_is_named_with_what_the_cluster_has(cluster, change, message):
    problems = slurm.fit({**BASE, **change}, cluster).problems
    assert any(message in problem for problem in problems), problems


def test_no_default_partition_and_nodes_down_are_said():
    text = PARTITIONS.replace("Default=YES", "Default=NO")
    assert slurm.fit(BASE, slurm.partitions(text, NODES)).problems == [
        "this cluster has no default partition: set hydra.launcher.partition (one of cpu, gpu, old)"]
    all_drained = NODES.replace("State=IDLE", "State=DOWN+DRAIN")
    fitted = slurm.fit(BASE, slurm.partitions(PARTITIONS, all_drained))
    assert not fitted.problems and "down or drained now" in fitted.notes[0]


def test_task_states_from_squeue_and_sacct_as_they_print_them():
    live = slurm_tasks.squeue_states("12_1|RUNNING|None\n12_2|PENDING|Resources\n12_3|PENDING|BeginTime\n")
    assert live["12_1"].live and live["12_2"].text() == "PENDING (Resources)"
    ended = slurm_tasks.sacct_states("12_[4-5]|PENDING|0:0\n12_0|REQUEUED|0:15\n12_0|FAILED|9:0\n"
                               "12_1|CANCELLED by 0|0:15\n12_6|COMPLETED|0:0\n")
    assert "12_[4-5]" not in ended and ended["12_0"].text() == "FAILED, exit code 9:0"  # the last row counts
    assert not ended["12_1"].live and ended["12_1"].state == "CANCELLED by 0"


def test_ray_auto_takes_a_gpu_only_where_a_node_has_one_and_refuses_what_no_node_holds():
    gpu_nodes = [{"CPU": 16.0, "GPU": 2.0, "memory": 6e10}, {"CPU": 64.0, "memory": 2e11}]
    fitted = ray_cluster.fit({"num_cpus": "auto", "num_gpus": "auto", "max_retries": 3}, gpu_nodes)
    assert fitted.options == {"num_cpus": 4, "num_gpus": 1, "max_retries": 3} and not fitted.problems
    cpu_only = ray_cluster.fit({"num_cpus": "auto", "num_gpus": "auto"}, [{"CPU": 2.0, "memory": 1e10}])
    assert cpu_only.options == {"num_cpus": 2, "num_gpus": 0} and cpu_only.describe() == "2 CPU per task, no GPU"
    # 16 CPUs with a GPU: the GPU node has them, the big node has no GPU: no single node holds the task
    both = ray_cluster.fit({"num_cpus": 32, "num_gpus": 1}, gpu_nodes)
    assert both.problems == ["no single node of this Ray cluster has 32 CPU, 1 GPU at once; ask for less of one "
                             "(hydra.launcher.ray.remote)"]
    assert ray_cluster.fit({"num_gpus": 4}, gpu_nodes).problems == [
        "hydra.launcher.ray.remote.num_gpus=4, but the nodes of this Ray cluster have at most 2 GPU; set "
        "hydra.launcher.ray.remote.num_gpus=2 or less (or auto)"]
    assert ray_cluster.fit({"num_cpus": "x"}, gpu_nodes).problems == [
        "hydra.launcher.ray.remote.num_cpus='x'; allowed: auto, or a number >= 0"]
    assert ray_cluster.fit({"resources": {"TPU": 1}}, gpu_nodes).problems[0].startswith(
        "hydra.launcher.ray.remote.resources.TPU=1, but no node of this Ray cluster has TPU")


def test_ray_runs_per_task_asks_a_task_for_its_runs_and_refuses_what_no_node_holds():
    gpu_nodes = [{"CPU": 16.0, "GPU": 2.0, "memory": 6e10}, {"CPU": 64.0, "memory": 2e11}]
    auto = ray_cluster.fit({"num_cpus": "auto", "num_gpus": "auto"}, gpu_nodes, "auto")
    # one run per GPU of the GPU node: 2 runs, each 1 GPU and 4 CPUs (16 // 2 = 8, at most 4): the task 2 and 8
    assert (auto.problems, auto.runs, auto.options["num_gpus"], auto.options["num_cpus"]) == ([], 2, 1, 4)
    assert (auto.task_options["num_gpus"], auto.task_options["num_cpus"]) == (2, 8)
    assert auto.describe() == "2 runs per task, 4 CPU per run, 1 GPU"
    cpu_only = ray_cluster.fit({"num_cpus": 1, "num_gpus": 0}, [{"CPU": 4.0}], 3)
    assert (cpu_only.runs, cpu_only.task_options["num_cpus"], cpu_only.task_options["num_gpus"]) == (3, 3, 0)
    assert ray_cluster.fit({"num_cpus": 1}, [{"CPU": 4.0}], "auto").runs == 1  # no GPU: one run per task
    assert ray_cluster.fit({"num_cpus": 1, "num_gpus": 1}, gpu_nodes, 4).problems == [
        "hydra.launcher.runs_per_task=4 × 1 GPU, but the nodes of this Ray cluster have at most 2 GPU; set "
        "hydra.launcher.runs_per_task=2 or less (or auto)"]
    assert ray_cluster.fit({"num_cpus": 2, "num_gpus": 0}, [{"CPU": 4.0}], 3).problems == [
        "hydra.launcher.runs_per_task=3 × 2 CPU, but the nodes of this Ray cluster have at most 4 CPU; set "
        "hydra.launcher.runs_per_task=2 or less"]
    assert ray_cluster.fit({"num_cpus": 1}, [{"CPU": 4.0}], 0).problems == [
        "hydra.launcher.runs_per_task=0; allowed: auto, or an integer >= 1"]


def test_ray_tasks_of_several_runs_end_each_run_with_its_own_result():
    from hydra.core.utils import JobReturn

    from modula_cli.sweep.jobs import JobEnd

    first = JobReturn(overrides=["optim.lr=0.1"])
    end = JobEnd("finished", [first, "its process ended with exit code -9 before its run did"])
    assert ray_cluster._member_end(end, 0) == JobEnd("finished", first)
    assert ray_cluster._member_end(end, 1) == JobEnd(
        "finished", error="its process ended with exit code -9 before its run did")
    failed = JobEnd("raised", error="RuntimeError: boom")
    assert ray_cluster._member_end(failed, 1) is failed  # the whole task failed: each of its runs with it


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
    for name in ("MODULA_JOB_CPUS", "SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "_CHOSEN", {})
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")  # more than this 2-core machine: auto alone never says 3
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = threads.torch.get_num_threads()
    try:
        assert threads.configure_threads("auto") == 3
        monkeypatch.setattr(threads, "_CHOSEN", {})
        monkeypatch.setenv("MODULA_JOB_CPUS", "5")  # Ray's num_cpus, passed by the launcher
        assert threads.configure_threads("auto") == 5
        monkeypatch.setattr(threads, "_CHOSEN", {})
        assert threads.configure_threads(2) == 2  # an explicit count wins
    finally:
        threads.torch.set_num_threads(before)


# --- following jobs: SLURM's task states and the follower, on a scripted scheduler ---------------------------

def test_slurm_array_ends_a_task_after_two_polls_unlisted_once_and_rides_out_a_requeue(monkeypatch, caplog):
    T = slurm_tasks.TaskState
    script = iter([
        {"5_0": T("RUNNING", "None"), "5_1": T("RUNNING", "None")},
        {"5_1": T("RUNNING", "None")},                                             # 5_0 left the queue...
        {"5_0": T("COMPLETED", "0:0", listed=False), "5_1": T("PENDING", "BeginTime")},  # ...and 5_1 was requeued
        slurm.SlurmError("`squeue`: Socket timed out"),
        slurm.SlurmError("`squeue`: Socket timed out"),
        {"5_0": T("COMPLETED", "0:0", listed=False), "5_1": T("RUNNING", "None", listed=False)},
        {"5_0": T("COMPLETED", "0:0", listed=False), "5_1": T("RUNNING", "None", listed=False)},
    ])

    def states(array, accounting, ended_ask=True):
        step = next(script)
        if isinstance(step, Exception):
            raise step
        return step

    monkeypatch.setattr(slurm_tasks, "task_states", states)
    array = slurm_tasks.SlurmArray(["5_0", "5_1"], accounting=True, results=[lambda: (None, None)] * 2,
                             logs=["/logs/5_0.err", "/logs/5_1.err"])
    polls = [array.poll() for _ in range(7)]
    assert polls[:2] == [{}, {}] and list(polls[2]) == [0]  # unlisted twice: ended, said once
    assert (polls[2][0].state, polls[2][0].log, polls[2][0].cancelled) == ("COMPLETED", "/logs/5_0.err", False)
    assert slurm_tasks.TaskState("FAILED", "9:0").text() == "FAILED, exit code 9:0"
    assert polls[3] == polls[4] == {} and polls[5] == {}  # SLURM silent: nothing decided; 5_1 unlisted once
    assert polls[6][1].state == "(SLURM has not recorded how yet)"  # sacct lags behind squeue
    assert sum("did not answer" in r.message for r in caplog.records) == 1  # said once
    assert array.owner(1) == "slurm:5_1" and array.name(0) == "SLURM job 5_0"


def test_a_task_accounting_has_not_recorded_yet_is_waited_for_before_it_is_called_unknown(monkeypatch):
    """A freshly started slurmdbd recorded a killed task two polls after squeue dropped it: with accounting on,
    a task neither lists is given ACCOUNTING_LAG_S; without accounting there is nobody to wait for."""
    T = slurm_tasks.TaskState
    monkeypatch.setattr(slurm_tasks, "task_states", lambda array, accounting, ended_ask=True: next(script))
    script = iter([{"5_0": T("RUNNING", "None")}, {}, {}, {}, {"5_0": T("FAILED", "9:0", listed=False)}])
    array = slurm_tasks.SlurmArray(["5_0"], accounting=True, results=[lambda: (None, None)])
    assert [array.poll() for _ in range(4)] == [{}, {}, {}, {}]  # unlisted twice, then unknown for a while
    assert array.poll()[0].state == "FAILED, exit code 9:0"  # sacct's word, once it has it
    monkeypatch.setattr(slurm_tasks, "ACCOUNTING_LAG_S", 0.0)
    script = iter([{"6_0": T("RUNNING", "None")}, {}, {}])
    array = slurm_tasks.SlurmArray(["6_0"], accounting=True, results=[lambda: (None, None)])
    assert [array.poll() for _ in range(2)] == [{}, {}] and array.poll()[0].state == "(no longer known to SLURM)"
    monkeypatch.setattr(slurm_tasks, "ACCOUNTING_LAG_S", 3600.0)
    script = iter([{"7_0": T("RUNNING", "None")}, {}, {}])
    array = slurm_tasks.SlurmArray(["7_0"], accounting=False, results=[lambda: (None, None)])
    assert [array.poll() for _ in range(2)] == [{}, {}] and array.poll()[0].state == "(no longer known to SLURM)"


def test_slurm_cancels_only_after_a_reason_that_never_clears_has_stood(monkeypatch):
    array = slurm_tasks.SlurmArray(["7_0", "7_1"], accounting=False)
    array._states = {"7_0": slurm_tasks.TaskState("PENDING", "MaxCpuPerAccount"),  # clears as others' jobs end
                     "7_1": slurm_tasks.TaskState("PENDING", "Resources")}
    monkeypatch.setattr(slurm_tasks, "NEVER_STARTS_AFTER_S", 0.0)
    assert array.never_starts() is None
    array._states["7_1"] = slurm_tasks.TaskState("PENDING", "PartitionConfig")
    monkeypatch.setattr(slurm_tasks, "NEVER_STARTS_AFTER_S", 3600.0)
    assert array.never_starts() is None  # not yet long enough
    monkeypatch.setattr(slurm_tasks, "NEVER_STARTS_AFTER_S", 0.0)
    assert "PartitionConfig (the request does not fit the partition's configuration)" in array.never_starts()
    array._states["7_0"] = slurm_tasks.TaskState("PENDING", "JobHeldAdmin")
    assert "held" not in array.waiting() and "release with: scontrol release 7" in array.waiting()


class ScriptedJobs:
    """A scheduler that says what a test scripts: poll results in turn, and records stops and cancels."""

    scheduler = "slurm"  # its jobs are named as SLURM names them

    def __init__(self, polls, never=None, ids=None):
        self.polls, self.never, self.ids = list(polls), never, ids
        self.stops, self.cancels = [], 0

    def poll(self):
        return self.polls.pop(0) if self.polls else {}

    def waiting(self):
        return "1 running"

    def never_starts(self):
        return self.never

    def stop(self, training):
        self.stops.append(set(training))

    def cancel(self):
        self.cancels += 1

    def name(self, index):
        return f"SLURM job 9_{index}"

    def owner(self, index):
        return f"slurm:9_{index}"

    def scheduler_ids(self):
        return self.ids


@pytest.fixture
def three_jobs(tmp_path, monkeypatch):
    planned = {name: {**KNOBS, "lr": lr, "fingerprint": "fp"} for name, lr in (("a", 0.1), ("b", 0.2), ("c", 0.4))}
    record_launch(tmp_path, "L", planned, jobs=[([f"optim.lr={k['lr']}"], [name]) for name, k in planned.items()])
    return tmp_path, [[f"optim.lr={k['lr']}"] for k in planned.values()]


def _summary_of_launch(run_dir: Path, status: str, step: int, owner_host: str | None = None, job: str = "") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_summary(run_dir, {**summary_record(status, run_dir, KNOBS, "fp", steps_done=step,
                                             train_loss=2.5 if status == "completed" else None), "launch": "L"})
    (run_dir / "run.lock").touch()
    if owner_host:
        (run_dir / "run.owner").write_text(json.dumps({"pid": 1, "host": owner_host, "job": job}))


def test_the_follower_ends_every_job_honestly(three_jobs, caplog):
    """A completed job, a job whose trainer died on another node (its lock says nothing there: the scheduler
    does), and a job that died before its run started: completed, interrupted at its checkpoint, failed."""
    import logging

    from modula_cli.sweep.cluster import Follower

    caplog.set_level(logging.INFO)
    from modula_cli.sweep.jobs import JobEnd

    sweep, overrides = three_jobs
    _summary_of_launch(sweep / "a", "completed", 101)
    _summary_of_launch(sweep / "b", "running", 40, owner_host="node-17", job="slurm:9_1")
    assert as_seen(sweep / "b", read_summary(sweep / "b"))["status"] == RUNNING  # another host: not decided here
    jobs = ScriptedJobs([{0: JobEnd("COMPLETED")},
                         {1: JobEnd("NODE_FAIL"), 2: JobEnd("FAILED, exit code 1:0", log="/logs/9_2.err")}])
    results = Follower(jobs, overrides, sweep, "L", poll_s=0.01, grace_s=5).follow()
    assert [r.return_value.status for r in results] == ["completed", "interrupted", "failed"]
    b, c = read_summary(sweep / "b"), read_summary(sweep / "c")
    assert (b["status"], b["steps_done"], b["ended"]) == (INTERRUPTED, 40, "SLURM job 9_1: NODE_FAIL")
    assert c["status"] == "failed" and c["error"] == ("SLURM job 9_2 ended FAILED, exit code 1:0 before its runs "
                                                      "started (log: /logs/9_2.err)")
    assert c["lr"] == 0.4 and c["launch"] == "L"  # its own knobs, from the plan: the report places it
    progress = [r.message for r in caplog.records if " of 3]" in r.message]
    assert [m[:8] for m in progress] == ["[1 of 3]", "[2 of 3]", "[3 of 3]"] and jobs.stops == []


def test_a_stop_ends_pending_jobs_lets_training_ones_checkpoint_then_cancels_what_is_left(three_jobs, monkeypatch):
    from modula_cli.plumbing.signals import STOP
    from modula_cli.sweep.cluster import Follower

    sweep, overrides = three_jobs
    _summary_of_launch(sweep / "b", "running", 20, owner_host="node-3")  # training there
    monkeypatch.setattr(STOP, "signum", signal.SIGTERM)
    jobs = ScriptedJobs([])  # nothing ever ends
    started = time.monotonic()
    results = Follower(jobs, overrides, sweep, "L", poll_s=0.01, grace_s=0.3).follow()
    assert 0.3 <= time.monotonic() - started < 5
    assert jobs.stops and all(training == {1} for training in jobs.stops)  # job 1 trains: it checkpoints itself
    assert jobs.cancels == 1 and len(results) == 3  # the grace is over: nothing of the launch goes on


def test_jobs_that_can_never_start_are_cancelled_and_the_closing_says_why(three_jobs, capsys):
    from modula_cli.sweep.cluster import Follower

    sweep, overrides = three_jobs
    jobs = ScriptedJobs([], never="SLURM has kept them pending with reason PartitionConfig")
    Follower(jobs, overrides, sweep, "L", poll_s=0.01, grace_s=0.1).follow()
    assert jobs.stops and jobs.cancels == 1
    note = ("the jobs were cancelled: SLURM has kept them pending with reason PartitionConfig; "
            "change the request (hydra.launcher) or the partition, and run the command again")
    assert read_launch(sweep, "L").notes == (note,)  # on disk: whichever process ends the launch says it
    record = read_launch(sweep, "L")
    closing(sweep, record, record.summaries(sweep), stopped=None)
    assert note in capsys.readouterr().out


# --- detached launches, their followers and modula-sweep-status ---------------------------------------------

def test_a_detached_launch_records_its_jobs_and_follows_none(three_jobs, capsys):
    from modula_cli.sweep.cluster import run_unfinished
    from modula_cli.sweep.progress import detached_closing

    sweep, overrides = three_jobs
    jobs = ScriptedJobs([{0: "never polled"}], ids=["31_0", "31_1", "31_2"])
    results = run_unfinished(overrides, sweep, "L", lambda todo: jobs, poll_s=0.01, grace_s=1, detach=True)
    assert [r.return_value.status for r in results] == ["pending"] * 3 and jobs.polls  # nothing waited for
    record = read_launch(sweep, "L")
    assert record.detached and record.scheduler == "slurm"
    assert [(job.runs, job.job_id) for job in record.jobs] == [(("a",), "31_0"), (("b",), "31_1"), (("c",), "31_2")]
    assert detached_closing(sweep, record) == 0
    out = capsys.readouterr().out
    assert "sweep submitted: 3 runs in 3 SLURM jobs (array 31), training without this process" in out
    assert f"modula-sweep-status {sweep}" in out


def test_a_relaunch_leaves_runs_an_earlier_launchs_live_jobs_hold_to_them(three_jobs, caplog):
    """Launch L detached; the same command again (launch M, detached too) submits only what L's live jobs do
    not hold: here job 31_2 has ended (its run c is to retrain), 31_0 and 31_1 still run a and b."""
    import logging

    from modula_cli.results.manifest import record_submission
    from modula_cli.sweep.cluster import run_unfinished

    caplog.set_level(logging.INFO)
    sweep, overrides = three_jobs
    record_submission(sweep, "L", "slurm", {tuple(o): f"31_{i}" for i, o in enumerate(overrides)}, detached=True)
    planned = {name: {**KNOBS, "lr": lr, "fingerprint": "fp"} for name, lr in (("a", 0.1), ("b", 0.2), ("c", 0.4))}
    record_launch(sweep, "M", planned, jobs=[(o, [n]) for o, n in zip(overrides, "abc")])
    asked = []

    def adopt(job_ids):
        asked.append(list(job_ids))
        return [([0, 1], ScriptedJobs([]))]  # the scheduler lists 31_0 and 31_1 only

    submitted = []
    run_unfinished(overrides, sweep, "M", lambda todo: submitted.append(todo) or ScriptedJobs([], ids=["40_0"]),
                   poll_s=0.01, grace_s=1, detach=True, adopt=adopt)
    assert asked == [["31_0", "31_1", "31_2"]] and submitted == [[2]]
    assert "launch L's SLURM job 31 still holds 2 runs: not submitted again" in caplog.text


def test_status_reports_once_when_the_jobs_have_ended_and_never_on_a_silent_scheduler(three_jobs, monkeypatch,
                                                                                      capsys):
    from modula_cli.results.manifest import record_submission
    from modula_cli.sweep import sweep_status

    sweep, overrides = three_jobs
    record_submission(sweep, "L", "slurm", {tuple(o): f"31_{i}" for i, o in enumerate(overrides)}, detached=True)
    _summary_of_launch(sweep / "a", "completed", 101)
    _summary_of_launch(sweep / "b", "running", 40, owner_host="node-17", job="slurm:31_1")
    words = {"31_0": sweep_status.JobWord(False, "COMPLETED"),
             "31_1": sweep_status.JobWord(True, "SLURM did not answer (timed out)"),
             "31_2": sweep_status.JobWord(True, "PENDING (Resources), requeued 2×")}
    monkeypatch.setattr(sweep_status, "slurm_words", lambda ids: dict(words))
    assert sweep_status.main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "launch L (started " in out and "detached, SLURM job 31): 3 runs: 1 completed, 1 pending, 1 running" in out
    assert "  b: running at step 40 — SLURM job 31_1: SLURM did not answer (timed out)" in out
    assert "  c: pending — SLURM job 31_2: PENDING (Resources), requeued 2×" in out
    assert "not ended yet" in out and not (sweep / "results.csv").exists()  # a silence decides nothing

    words.update({"31_1": sweep_status.JobWord(False, "FAILED, exit code 9:0"),
                  "31_2": sweep_status.JobWord(False, "CANCELLED by 0")})
    assert sweep_status.main([str(sweep)]) == 1  # ended, not all finished
    out = capsys.readouterr().out
    b = read_summary(sweep / "b")
    assert (b["status"], b["ended"]) == (INTERRUPTED, "SLURM job 31_1: FAILED, exit code 9:0")  # settled
    assert (sweep / "results.csv").exists() and read_launch(sweep, "L").reported
    assert "sweep incomplete: 1 completed, 0 skipped, 0 diverged, 0 failed, 1 interrupted, 1 not started" in out
    assert sweep_status.main([str(sweep)]) == 1
    assert "report: written already" in capsys.readouterr().out


def test_status_of_a_folder_without_a_launch_says_so_in_one_line(tmp_path, capsys):
    from modula_cli.sweep import sweep_status

    assert sweep_status.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"modula-sweep-status: {tmp_path} holds no sweep launch (no readable sweep.json); give the "
                   f"folder a `modula-sweep -m` launch wrote into (its hydra.sweep.dir)"]


def socket_host() -> str:
    from modula_cli.plumbing.locks import HOST

    return HOST


def test_task_states_merges_the_queue_with_accounting_and_survives_a_forgotten_array(monkeypatch):
    answers = {
        "squeue": "8_1|RUNNING|None\n8_2|PENDING|BeginTime\n",
        "squeue --states=all": "8_0|COMPLETED|None\n8_1|RUNNING|None\n8_2|PENDING|BeginTime\n",
        "sacct": "8_0|COMPLETED|0:0\n8_1|REQUEUED|0:15\n8_1|RUNNING|0:0\n",
    }

    def command(args, timeout=30):
        key = "sacct" if args[0] == "sacct" else "squeue --states=all" if "--states=all" in args else "squeue"
        answer = answers[key]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(slurm_tasks, "command", command)
    with_accounting = slurm_tasks.task_states("8", accounting=True)
    assert with_accounting["8_0"].state == "COMPLETED" and not with_accounting["8_0"].live
    assert with_accounting["8_1"].live and with_accounting["8_2"].text() == "PENDING (BeginTime)"  # the queue wins
    without = slurm_tasks.task_states("8", accounting=False)
    assert without["8_0"].state == "COMPLETED" and not without["8_0"].listed and without["8_1"].live
    assert set(slurm_tasks.task_states("8", accounting=True, ended_ask=False)) == {"8_1", "8_2"}
    answers["squeue"] = answers["squeue --states=all"] = slurm.SlurmError(
        "`squeue -h -r -j 8`: slurm_load_jobs error: Invalid job id specified")
    answers["sacct"] = "8_0|COMPLETED|0:0\n8_1|CANCELLED by 0|0:15\n8_2|CANCELLED by 0|0:0\n"
    forgotten = slurm_tasks.task_states("8", accounting=True)  # SLURM purged the array: nothing live, not an error
    assert not any(state.live for state in forgotten.values()) and forgotten["8_1"].state == "CANCELLED by 0"
    answers["squeue"] = slurm.SlurmError("`squeue`: Unable to contact slurm controller")
    with pytest.raises(slurm.SlurmError):  # a controller that does not answer is not an empty queue
        slurm_tasks.task_states("8", accounting=True)


def test_a_stop_by_marker_is_not_a_signal_a_later_one_is_not_a_second_ctrl_c_and_nothing_is_chained(tmp_path):
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    stop = StopSignal()
    try:
        with stop.installed():
            marker = tmp_path / ".stop.L"
            marker.write_text("15")
            stop.watch(marker)
            assert stop.requested and not stop.received
            stop.chain()
            assert calls == []  # the marker is not a signal: no handler below is told of one
            os.kill(os.getpid(), signal.SIGINT)  # e.g. Ray's cancel, which interrupts the task's main thread
            time.sleep(0.05)
            assert stop.received and stop.signum == signal.SIGINT  # a first signal: no KeyboardInterrupt
            with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C after a real first one stops at once
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_local_parallel_jobs_inside_a_cluster_job_share_its_cpus(monkeypatch):
    for name in ("MODULA_JOB_CPUS", "SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "_CHOSEN", {})
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")
    before = threads.torch.get_num_threads()
    try:
        assert threads.configure_threads("auto", parallel_jobs=4) == 2
    finally:
        threads.torch.set_num_threads(before)


def test_auto_yields_to_the_users_own_form_of_a_request(cluster):
    fitted = slurm.fit({**BASE, "partition": "gpu", "mem_per_gpu": "40G", "cpus_per_gpu": 6}, cluster)
    assert (fitted.params["mem_gb"], fitted.params["cpus_per_task"], fitted.params["gpus_per_node"]) == (None, None, 1)
    extra = slurm.fit({**BASE, "partition": "gpu", "additional_parameters": {"mem-per-cpu": "4G", "gpus": 2}}, cluster)
    assert extra.params["mem_gb"] is None and extra.params["gpus_per_node"] is None
    listed = slurm.fit({**BASE, "partition": "cpu,gpu", "gpus_per_node": 2}, cluster)
    assert not listed.problems and listed.params["partition"] == "cpu,gpu"  # gpu can run it
    none = slurm.fit({**BASE, "partition": "cpu,old", "gpus_per_node": 1}, cluster)
    assert none.problems[0].startswith("no partition of cpu,old can run it: hydra.launcher.gpus_per_node=1, but")


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
