"""A launch's request fitted to what SLURM's commands and Ray report (GPU partitions and GPU nodes, which this
machine cannot offer: their configuration is tested on the commands' real output formats), the sbatch script a
GPU partition gets, and task states as SLURM prints them."""

import math
import os
from pathlib import Path

import pytest

from modula_cli.schedulers import ray_cluster, slurm, slurm_tasks


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

    from modula_cli.schedulers.slurm_submit import slurm_executor

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

    from modula_cli.schedulers.jobs import JobEnd

    first = JobReturn(overrides=["optim.lr=0.1"])
    end = JobEnd("finished", [first, "its process ended with exit code -9 before its run did"])
    assert ray_cluster._member_end(end, 0) == JobEnd("finished", first)
    assert ray_cluster._member_end(end, 1) == JobEnd(
        "finished", error="its process ended with exit code -9 before its run did")
    failed = JobEnd("raised", error="RuntimeError: boom")
    assert ray_cluster._member_end(failed, 1) is failed  # the whole task failed: each of its runs with it


def test_auto_yields_to_the_users_own_form_of_a_request(cluster):
    fitted = slurm.fit({**BASE, "partition": "gpu", "mem_per_gpu": "40G", "cpus_per_gpu": 6}, cluster)
    assert (fitted.params["mem_gb"], fitted.params["cpus_per_task"], fitted.params["gpus_per_node"]) == (None, None, 1)
    extra = slurm.fit({**BASE, "partition": "gpu", "additional_parameters": {"mem-per-cpu": "4G", "gpus": 2}}, cluster)
    assert extra.params["mem_gb"] is None and extra.params["gpus_per_node"] is None
    listed = slurm.fit({**BASE, "partition": "cpu,gpu", "gpus_per_node": 2}, cluster)
    assert not listed.problems and listed.params["partition"] == "cpu,gpu"  # gpu can run it
    none = slurm.fit({**BASE, "partition": "cpu,old", "gpus_per_node": 1}, cluster)
    assert none.problems[0].startswith("no partition of cpu,old can run it: hydra.launcher.gpus_per_node=1, but")
