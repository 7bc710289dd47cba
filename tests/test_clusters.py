"""Sweeps on real engines, as a cluster user meets them: a SLURM cluster with accounting (slurm-wlm, slurmdbd,
MariaDB, munge) of two nodes, node1 and node2, and a Ray cluster of two nodes (the head and raynode2), each
node with its own host name and address (network namespaces on this machine), all started by
``scripts/cluster/up.sh`` (``.ci/run`` always runs it). The faults are the real ones: ``scancel``,
``scontrol requeue``, SLURM's pre-emption signal, ``kill -9`` of a training process, SIGTERM to the launching
process, a node whose every process is frozen (``scripts/cluster/node.sh freeze``): it stops answering.

Without an engine these tests skip with one line; with ``MODULA_CLUSTER_TESTS=required`` (CI) they fail
instead. They share one xdist group: the engines have the machine's two cores, not one per test worker.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from modula_cli.schedulers.ray_internals import bootstrap_address

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("clusters")]

REQUIRED = os.environ.get("MODULA_CLUSTER_TESTS") == "required"
# a tiny GPT whose runs last a few seconds: long enough to act on a run that is training
GRID = ["arch=gpt", "arch.width=8,16", "arch.depth=1", "arch.heads=2", "data.context=8", "train.batch_size=4",
        "train.eval_batches=1", "train.eval_every=1000", "train.progress=false", "train.checkpoint_every=10",
        "train.log_every=1", "optim.lr=0.05,0.1"]
LONG = "train.steps=1000"


# --- the engines ------------------------------------------------------------------------------------------

def _unavailable(reason: str) -> None:
    (pytest.fail if REQUIRED else pytest.skip)(f"{reason} (scripts/cluster/up.sh starts one)")


def slurm_missing() -> str | None:
    if shutil.which("sbatch") is None:
        return "no SLURM here"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20).stdout
        if "UP" not in ping:  # (asked first: sinfo retries a controller that is down for 9 s)
            return "no SLURM controller here"
        nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"SLURM does not answer ({error})"
    if not re.search(r"idle|mix|alloc", nodes):
        return "no SLURM controller with a usable node here"
    return None


def ray_missing() -> str | None:
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed"
    try:
        host, _, port = bootstrap_address("auto").rpartition(":")
        socket.create_connection((host, int(port)), timeout=5).close()
    except (ConnectionError, OSError, ValueError) as error:
        return f"no Ray head here ({str(error).splitlines()[0].split('. ')[0].rstrip('.')})"
    return None


# session-scoped, as the reference below: a test asks for its engine first, so that without one it skips before
# the reference sweep is trained
@pytest.fixture(scope="session")
def slurm_cluster():
    if (reason := slurm_missing()) is not None:
        _unavailable(reason)


@pytest.fixture(scope="session")
def ray_head():
    if (reason := ray_missing()) is not None:
        _unavailable(reason)


NODE_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "cluster" / "node.sh"


def node(action: str, name: str) -> None:
    """scripts/cluster/node.sh: freeze a node (it stops answering), or start it again."""
    done = subprocess.run(["bash", str(NODE_SCRIPT), action, name], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def usable_nodes() -> int:
    states = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=20).stdout
    return len(re.findall(r"^(idle|mix|alloc)$", states, re.M))


def alive_ray_nodes() -> int:
    code = "import ray; ray.init(address='auto', logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return int(done.stdout.strip() or 0)


def read_job_logs(sweep_dir: Path) -> str:
    """What the jobs printed (submitit's .out and .err files, each run's log)."""
    return "".join(path.read_text(errors="replace") for path in sweep_dir.rglob("*")
                   if path.is_file() and path.suffix in (".out", ".err", ".log"))


# --- launching and watching -------------------------------------------------------------------------------

class Launch:
    """``modula-sweep -m`` in the background, its output in a file, in its own session (signals reach it
    alone, as a scheduler's or a terminal's would)."""

    def __init__(self, cwd: Path, *overrides: str, env: dict | None = None):
        self.log = cwd / f"launch-{time.monotonic_ns()}.log"
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "modula_cli.train", "-m", *overrides], cwd=cwd,
                                         env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def output(self) -> str:
        return self.log.read_text()

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the launch did not end within {timeout} s:\n{self.output[-3000:]}") from None
        return code, self.output

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)


def wait_for(condition, what: str, timeout: float = 180, launch: Launch | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if launch is not None and launch.proc.poll() is not None:
            raise AssertionError(f"the launch ended while waiting for {what}:\n{launch.output[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f":\n{launch.output[-3000:]}" if launch else ""))


def summary(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def job_runs(sweep_dir: Path) -> list[Path]:
    """Each job's run folder, in job (array task) order, from the launch's record in sweep.json."""
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    launch = max(manifest["launches"].values(), key=lambda record: record["started"])
    return [sweep_dir / job["runs"][0] for job in launch["jobs"]]


def checkpointed(run_dir: Path) -> bool:
    """Training, with a checkpoint behind it (its running summary records the step)."""
    record = summary(run_dir)
    return bool(record) and record["status"] == "running" and record.get("steps_done", 0) >= 20


def trainer_pid(run_dir: Path) -> int:
    return int(json.loads((run_dir / "run.owner").read_text())["pid"])


def losses(run_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(row["step"], row["train_loss"]) for row in rows if "train_loss" in row]


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """The same grid, uninterrupted, on the basic launcher: every run's logged losses."""
    root = tmp_path_factory.mktemp("reference")
    (root / "data" / "shakespeare").mkdir(parents=True)
    (root / "data" / "shakespeare" / "input.txt").write_text(CORPUS)
    code, out = Launch(root, *GRID, LONG, "data.root=data", f"hydra.sweep.dir={root / 'sweep'}",
                       env={"OMP_NUM_THREADS": "1"}).finish()
    assert code == 0, out[-3000:]
    return {folder.name: losses(folder) for folder in (root / "sweep").iterdir() if (folder / "summary.json").exists()}


CORPUS = "".join(f"To be, or not to be: line {i}.\n" for i in range(400))


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "data" / "shakespeare").mkdir(parents=True)
    (tmp_path / "data" / "shakespeare" / "input.txt").write_text(CORPUS)
    return tmp_path


def assert_resumed_exactly(sweep_dir: Path, reference: dict) -> None:
    """Every run's logged losses equal the uninterrupted sweep's, each step logged once."""
    for name, expected in reference.items():
        got = losses(sweep_dir / name)
        assert got == expected, f"{name}: {len(got)} logged losses differ from the uninterrupted run's"


def no_task_left(array: str) -> bool:
    listed = subprocess.run(["squeue", "-h", "-r", "-j", array], capture_output=True, text=True).stdout
    return not listed.strip()


def slurm_args(sweep_dir: Path, *extra: str) -> list[str]:
    return [*GRID, "data.root=data", "hydra/launcher=slurm", "hydra.launcher.poll_s=0.5",
            f"hydra.sweep.dir={sweep_dir}", *extra]


def array_of(launch: Launch) -> str:
    found = wait_for(lambda: re.search(r"submitted \d+ jobs? as SLURM job (\d+)", launch.output), "the submission",
                     launch=launch)
    return found[1]


# three LRs per scale (the bracket): two rounds, width 8's and then width 16's, each one SLURM array or Ray batch
SEARCH = ["optim.lr=" + ",".join(repr(2.0 ** k) for k in range(-8, 1)), "train.steps=20", "train.seed=0",
          "sweep.pack=true", "sweep.search=true", "sweep.search_budget=3"]


def assert_searched(sweep_dir: Path, out: str) -> None:
    """Every scale stopped, and every run the search planned (3 LRs at each of 2 widths) finished."""
    record = json.loads((sweep_dir / "search.json").read_text())
    assert {e["scale"] for e in record["scales"].values()} == {"8", "16"}, out[-3000:]
    assert all(e["state"] == "stopped" for e in record["scales"].values()), record["scales"]
    runs = [folder for folder in sweep_dir.iterdir() if (folder / "summary.json").exists()]
    assert len(runs) == sum(e["runs"] for e in record["scales"].values()) == 6
    assert all(summary(folder)["status"] == "completed" for folder in runs)
    assert len(record["rounds"]) == 2 and "LR search, round 2: 3 runs in 1 job (width 16)" in out, out[-3000:]



# --- SLURM ------------------------------------------------------------------------------------------------

def test_slurm_packed_sweep_reports_progress_here_and_threads_are_the_tasks_cpus(slurm_cluster, workdir):
    sweep_dir = workdir / "packed"
    args = slurm_args(sweep_dir, "train.steps=100", "train.seed=0,1", "sweep.pack=true",
                      "hydra.launcher.cpus_per_task=2")
    code, out = Launch(workdir, *args).finish()
    assert code == 0, out[-3000:]
    assert re.search(r"submitted 2 jobs as SLURM job \d+ \(partition \w+, 2 CPU per task", out), out
    # progress in the launching terminal, from the run folders: one line per packed job, counting its runs
    assert re.findall(r"\[(\d) of 8\]", out) == ["4", "8"], out
    assert "sweep finished: 8 completed, 0 skipped, 0 diverged, 0 failed" in out
    runs = [folder for folder in sweep_dir.iterdir() if (folder / "summary.json").exists()]
    assert len(runs) == 8
    for folder in runs:  # the task's 2 CPUs (SLURM_CPUS_PER_TASK), on a machine whose other core is busy
        record = summary(folder)
        assert (record["threads"], record["packed_with"], record["steps_done"]) == (2, 4, 101), record
    # one task per node (2 CPUs each): each run records the node and the task that trained it
    trained_by = {(summary(folder)["host"], summary(folder)["job"]) for folder in runs}
    assert {host for host, _ in trained_by} == {"node1", "node2"} and len(trained_by) == 2, trained_by
    again_code, again = Launch(workdir, *args).finish()
    assert again_code == 0, again[-3000:]
    assert "sweep finished: 0 completed, 8 skipped" in again and "submitted" not in again  # nothing sent


def test_slurm_faults_end_honestly_and_the_same_command_resumes_exactly(slurm_cluster, workdir, reference):
    """Four runs, two at a time: kill -9 of one trainer, `scontrol requeue` of another, a pre-emption (USR2)
    of the third and `scancel` of the fourth. The requeued and the pre-empted runs resume within the launch;
    the killed and the cancelled ones are named with their state and checkpoint step; exit 1, no traceback."""
    sweep_dir = workdir / "faults"
    launch = Launch(workdir, *slurm_args(sweep_dir, LONG, "hydra.launcher.cpus_per_task=1"))
    array = array_of(launch)
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    wait_for(lambda: checkpointed(runs[0]) and checkpointed(runs[1]), "tasks 0 and 1 to train", launch=launch)
    os.kill(trainer_pid(runs[0]), signal.SIGKILL)
    subprocess.run(["scontrol", "requeue", f"{array}_1"], check=True)
    wait_for(lambda: checkpointed(runs[2]), "task 2 to train", launch=launch)
    subprocess.run(["scancel", "--signal=USR2", f"{array}_2"], check=True)  # what SLURM sends before a time limit
    wait_for(lambda: checkpointed(runs[3]), "task 3 to train", launch=launch)
    subprocess.run(["scancel", f"{array}_3"], check=True)
    code, out = launch.finish()
    assert code == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "sweep incomplete: 2 completed, 0 skipped, 0 diverged, 0 failed, 2 interrupted, 0 not started" in out
    killed, cancelled = summary(runs[0]), summary(runs[3])
    assert killed["status"] == cancelled["status"] == "interrupted"
    assert killed["ended"].startswith(f"SLURM job {array}_0: FAILED"), killed  # sacct's word for it
    assert f"{runs[0].name}: interrupted at step {killed['steps_done']} (SLURM job {array}_0: FAILED" in out
    assert f"{runs[3].name}: interrupted at step {cancelled['steps_done']}" in out
    assert killed["steps_done"] >= 20 and killed["steps_done"] % 10 == 0  # its last checkpoint
    assert [summary(runs[i])["status"] for i in (1, 2)] == ["completed", "completed"]  # requeued, resumed
    results = pd.read_csv(sweep_dir / "results.csv")
    assert sorted(results["status"]) == ["completed", "completed", "interrupted", "interrupted"]
    assert re.search(r"\[4 of 4\]", out), out
    again_code, again = Launch(workdir, *slurm_args(sweep_dir, LONG, "hydra.launcher.cpus_per_task=1")).finish()
    assert again_code == 0, again[-3000:]
    assert "sweep finished: 2 completed, 2 skipped" in again and "submitted 2 jobs" in again
    assert f"completed, train loss {summary(runs[0])['train_loss']:.4f} (resumed from step {killed['steps_done']})" \
        in again  # the killed run went on from its last checkpoint, and the launching terminal says so
    assert_resumed_exactly(sweep_dir, reference)


def test_slurm_without_accounting_a_killed_task_and_a_stopped_launch_still_end(slurm_cluster, workdir):
    """sacct hidden from the launching process (a cluster without accounting): the launch follows its tasks
    with squeue alone. One task at a time (2 CPUs each): the first trainer is killed, SIGTERM reaches the
    launching process while the second trains and two are pending: every task ends, the launch ends 143 with
    a report and names each unfinished run. (The relaunch's exact resume is the test above's.)"""
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n")
    (bin_dir / "sacct").chmod(0o755)
    sweep_dir = workdir / "stopped"
    launch = Launch(workdir, *slurm_args(sweep_dir, LONG, "hydra.launcher.cpus_per_task=2"),
                    env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    array = array_of(launch)
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    wait_for(lambda: checkpointed(runs[0]), "task 0 to train", launch=launch)
    os.kill(trainer_pid(runs[0]), signal.SIGKILL)
    wait_for(lambda: checkpointed(runs[1]), "task 1 to train", launch=launch)
    launch.signal(signal.SIGTERM)
    code, out = launch.finish()
    assert code == 143, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "sweep stopped by signal 15: 0 completed, 0 skipped, 0 diverged, 0 failed, 2 interrupted, 2 not started" \
        in out, out[-3000:]
    killed = summary(runs[0])
    assert killed["ended"].startswith(f"SLURM job {array}_0: FAILED"), killed  # squeue's word, without sacct
    assert f"{runs[0].name}: interrupted at step {killed['steps_done']} (SLURM job {array}_0: FAILED" in out
    assert f"{runs[1].name}: interrupted at step {summary(runs[1])['steps_done']}" in out
    assert f"{runs[2].name}: not started" in out and f"{runs[3].name}: not started" in out
    assert no_task_left(array)  # pending tasks cancelled, not left to start later
    assert summary(runs[1])["status"] == "interrupted" and (sweep_dir / "transfer.png").exists()


def test_slurm_a_node_that_stops_answering_loses_no_run(slurm_cluster, workdir, reference):
    """Two runs, one on each node (2 CPUs each). One node stops answering mid-run: every process on it is
    frozen (slurmd, the task, the trainer, which keeps its run's lock). SLURM marks the node down and requeues
    the task; the launch names the lost node and the run that moved; the run resumes on the other node from
    its last checkpoint, taking over the lock its frozen trainer still holds, and every logged loss equals the
    uninterrupted run's, each step once."""
    sweep_dir = workdir / "node_lost"
    launch = Launch(workdir, *slurm_args(sweep_dir, LONG, "optim.lr=0.05", "hydra.launcher.cpus_per_task=2"))
    array = array_of(launch)
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    wait_for(lambda: all(checkpointed(run) for run in runs), "both tasks to train", launch=launch)
    hosts = [summary(run)["host"] for run in runs]
    assert sorted(hosts) == ["node1", "node2"], hosts  # one task per node: 2 CPUs each, 2 per node
    lost, survivor = hosts
    try:
        node("freeze", lost)
        code, out = launch.finish(timeout=480)
    finally:
        node("start", lost)  # its frozen processes killed, as by a reboot; slurmd back
        wait_for(lambda: slurm_missing() is None and usable_nodes() == 2, f"{lost} back in service")
    assert code == 0 and "sweep finished: 2 completed, 0 skipped, 0 diverged, 0 failed" in out, out[-3000:]
    assert "Traceback" not in out
    assert re.search(rf"node {lost} is lost \(SLURM: DOWN\S*, Not responding\): SLURM requeued job {array}_0, which "
                     rf"ran there", out), out[-3000:]
    moved = summary(runs[0])
    assert f"SLURM job {array}_0 moved from {lost} to {survivor}, resuming from step {moved['resumed_from']}: " \
           f"{runs[0].name}" in out, out[-3000:]
    assert f"{lost} is lost, and this run takes over from its last checkpoint" in read_job_logs(sweep_dir)
    assert (moved["host"], moved["job"]) == (survivor, f"slurm:{array}_0") and moved["resumed_from"] >= 20
    for run in runs:
        assert losses(run) == reference[run.name]


def sweep_status(sweep_dir: Path, *flags: str) -> tuple[int, str]:
    code = "import sys; from modula_cli.sweep.sweep_status import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, str(sweep_dir), *flags], capture_output=True, text=True,
                          timeout=300)
    return done.returncode, done.stdout + done.stderr


def test_slurm_a_detached_launch_exits_at_once_and_the_same_command_follows_it(slurm_cluster, workdir, reference):
    """sweep.detach=true: the launching process submits, prints how to follow, and exits 0 while the jobs
    train. modula-sweep-status shows them with SLURM's word. The same command again (not detached) follows the
    first launch's jobs instead of submitting its runs twice, and ends with the report; every logged loss
    equals the uninterrupted sweep's."""
    sweep_dir = workdir / "detached"
    args = slurm_args(sweep_dir, LONG, "hydra.launcher.cpus_per_task=1")
    started = time.monotonic()
    code, out = Launch(workdir, *args, "sweep.detach=true").finish(timeout=120)
    assert code == 0 and "sweep submitted: 4 runs in 4 SLURM jobs (array " in out, out[-3000:]
    assert time.monotonic() - started < 60 and f"modula-sweep-status {sweep_dir}" in out
    array = re.search(r"\(array (\d+)\)", out)[1]
    assert not no_task_left(array) and not (sweep_dir / "results.csv").exists()  # training on, without it
    runs = job_runs(sweep_dir)
    wait_for(lambda: any(checkpointed(run) for run in runs), "a run to train")
    status_code, status = sweep_status(sweep_dir)
    assert status_code == 0 and "detached, SLURM job " + array in status, status
    assert re.search(rf"running at step \d+ — SLURM job {array}_\d: RUNNING on node[12]", status), status
    assert "not ended yet: look again later, or follow it with --follow" in status
    # A fast machine ends these runs within seconds: suspended, the job is surely the scheduler's while the
    # second launch looks, and resumed once it follows.
    subprocess.run(["scontrol", "suspend", array], capture_output=True)  # a task still pending stays so: live too
    try:
        assert not no_task_left(array), "every task ended before the second launch: nothing left to follow"
        again_launch = Launch(workdir, *args)
        wait_for(lambda: re.search(rf"SLURM job {array} still holds \d runs?: following it instead of submitting "
                                   rf"them again", again_launch.output), "the second launch to follow the first's job",
                 launch=again_launch)
    finally:
        subprocess.run(["scontrol", "resume", array], capture_output=True)
    again_code, again = again_launch.finish(timeout=480)
    assert again_code == 0, again[-3000:]
    assert "submitted" not in again and "sweep finished: 0 completed, 4 skipped" in again, again[-3000:]
    assert (sweep_dir / "results.csv").exists()
    assert_resumed_exactly(sweep_dir, reference)
    final_code, final = sweep_status(sweep_dir)
    assert final_code == 0 and "report: written already" in final and "sweep finished:" in final, final


def test_slurm_runs_per_task_trains_a_job_of_several_runs_and_a_requeue_resumes_them_all(slurm_cluster, workdir,
                                                                                        reference):
    """runs_per_task=2: the 4 runs go in 2 jobs of 2 SLURM tasks (1 CPU each); `scontrol requeue` of the first
    job while both its runs train resumes both from their checkpoints; every logged loss equals the
    uninterrupted sweep's."""
    sweep_dir = workdir / "runs_per_task"
    launch = Launch(workdir, *slurm_args(sweep_dir, LONG, "hydra.launcher.cpus_per_task=1",
                                         "hydra.launcher.runs_per_task=2"))
    array = array_of(launch)
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    wait_for(lambda: checkpointed(runs[0]) and checkpointed(runs[1]), "the first job's runs to train", launch=launch)
    subprocess.run(["scontrol", "requeue", f"{array}_0"], check=True)
    code, out = launch.finish(timeout=480)
    assert code == 0 and "sweep finished: 4 completed, 0 skipped, 0 diverged, 0 failed" in out, out[-3000:]
    assert re.search(rf"submitted 2 jobs as SLURM job {array} \(partition \w+, 2 runs per job \(a task each\), 1 CPU "
                     rf"per task", out), out[-3000:]
    records = [summary(run) for run in runs]
    assert [r["job"] for r in records] == [f"slurm:{array}_{k}" for k in (0, 0, 1, 1)]
    assert records[0]["host"] == records[1]["host"] and {r["threads"] for r in records} == {1}
    assert records[0]["resumed_from"] >= 20 and records[1]["resumed_from"] >= 20  # both resumed after the requeue
    assert_resumed_exactly(sweep_dir, reference)


def test_slurm_a_job_of_several_runs_preempted_after_its_first_ended_requeues_them_all(slurm_cluster, workdir,
                                                                                       reference):
    """runs_per_task=2 with a short first run (task 0) and a long second: SLURM's pre-emption signal after the
    first has completed still requeues the job (submitit requeues from task 0 alone, which stays while its
    sibling trains), and the second resumes from its checkpoint within the launch: no second command."""
    sweep_dir = workdir / "preempted_after_first"
    args = [a for a in slurm_args(sweep_dir, "hydra.launcher.cpus_per_task=1", "hydra.launcher.runs_per_task=2")
            if not a.startswith(("optim.lr=", "arch.width="))]
    launch = Launch(workdir, *args, "arch.width=8", "optim.lr=0.05", "train.steps=30,1000")
    array = array_of(launch)
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    short, long = sorted(runs, key=lambda run: "steps=1000" in run.name)
    wait_for(lambda: (summary(short) or {}).get("status") == "completed" and checkpointed(long),
             "the first run to end while the second trains", launch=launch)
    job = summary(short)["job"].partition(":")[2]  # the job's id: its array's first task, or a lone job's own
    assert job.partition("_")[0] == array
    subprocess.run(["scancel", "--signal=USR2", job], check=True)  # what SLURM sends on a pre-emption
    code, out = launch.finish(timeout=480)
    assert code == 0 and "sweep finished: 2 completed, 0 skipped, 0 diverged, 0 failed" in out, out[-3000:]
    record = summary(long)
    assert record["job"] == f"slurm:{job}" and record["resumed_from"] >= 20, record


def test_slurm_runs_per_task_composes_with_packed_runs(slurm_cluster, workdir):
    """sweep.pack=true with runs_per_task=2: the two packed grid points (each 2 LRs × 2 seeds) go in one job
    of two tasks."""
    sweep_dir = workdir / "packed_per_task"
    args = slurm_args(sweep_dir, "train.steps=50", "train.seed=0,1", "sweep.pack=true",
                      "hydra.launcher.cpus_per_task=1", "hydra.launcher.runs_per_task=2")
    code, out = Launch(workdir, *args).finish(timeout=300)
    assert code == 0 and "sweep finished: 8 completed, 0 skipped, 0 diverged, 0 failed" in out, out[-3000:]
    assert re.search(r"submitted 1 job as SLURM job \d+ \(partition \w+, 2 runs per job", out), out[-3000:]
    records = [summary(folder) for folder in sweep_dir.iterdir() if (folder / "summary.json").exists()]
    assert len(records) == 8 and {r["packed_with"] for r in records} == {4} and len({r["job"] for r in records}) == 1


def test_slurm_a_run_that_diverges_leaves_its_sibling_in_the_job_training(slurm_cluster, workdir):
    sweep_dir = workdir / "siblings"
    args = [a for a in slurm_args(sweep_dir, "train.steps=100", "hydra.launcher.cpus_per_task=1",
                                  "hydra.launcher.runs_per_task=2") if not a.startswith(("optim.lr=", "arch.width="))]
    code, out = Launch(workdir, *args, "arch.width=8", "optim.lr=0.05,100000").finish(timeout=300)
    assert code == 0 and "sweep finished: 1 completed, 0 skipped, 1 diverged, 0 failed" in out, out[-3000:]
    records = sorted((summary(run) for run in job_runs(sweep_dir)), key=lambda r: r["lr"])
    assert [(r["status"], r["job"] == records[0]["job"]) for r in records] == [("completed", True), ("diverged", True)]
    assert records[0]["steps_done"] == 101 and records[1]["steps_done"] < 101


@pytest.mark.parametrize("override, message", [
    ("hydra.launcher.cpus_per_task=64", r"cpus_per_task=64 needs 64 CPUs on one node, but the nodes of partition "
                                        r"\w+ have at most \d+; set hydra.launcher.cpus_per_task=\d+ or less"),
    ("hydra.launcher.mem_gb=100000", r"mem_gb=100000 is more than a node of partition \w+ has"),
    ("hydra.launcher.gpus_per_node=1", r"gpus_per_node=1, but no node of partition \w+ has a GPU; set "
                                       r"hydra.launcher.gpus_per_node=0 \(or auto\)"),
    ("hydra.launcher.partition=nope", r"partition=nope is not a partition of this cluster \(partitions: "),
    ("hydra.launcher.constraint=nofeature", r"sbatch refused it: Batch job submission failed: Invalid feature"),
])
def test_slurm_request_the_cluster_cannot_run_is_refused_in_one_line(slurm_cluster, workdir, override, message):
    sweep_dir = workdir / "refused"
    code, out = Launch(workdir, *slurm_args(sweep_dir, "train.steps=5", override)).finish(timeout=120)
    assert code == 1, out[-3000:]
    assert re.search("modula-sweep: sweep not launched, .*" + message, out), out[-3000:]
    assert "Traceback" not in out and not sweep_dir.exists(), out[-3000:]  # nothing written, nothing left


def test_eight_launches_from_both_nodes_into_one_folder_train_each_run_once(slurm_cluster, workdir):
    """Eight `modula-sweep -m` launches at once into one shared folder, four on each node (its own host name and
    network), on the basic launcher: every launch exits 0, each run is trained by exactly one of them (the
    completed counts add up to the runs, each step logged once), and the report lists every run."""
    sweep_dir = workdir / "crowd"
    grid = [a for a in GRID if not a.startswith("optim.lr=")] + [
        "optim.lr=0.025,0.05,0.1,0.2", "train.steps=200", "data.root=data", f"hydra.sweep.dir={sweep_dir}"]
    launches = []
    for k in range(8):
        host = f"node{1 + k % 2}"
        log = workdir / f"crowd-{k}.log"
        with open(log, "w") as out:
            launches.append((log, subprocess.Popen(
                ["nsenter", f"--net=/run/netns/modula-{host}", "unshare", "--uts", "sh", "-c",
                 f'hostname {host} && exec "$0" "$@"', sys.executable, "-m", "modula_cli.train", "-m", *grid],
                cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})))
    completed = 0
    for log, process in launches:
        assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
        found = re.search(r"sweep finished: (\d+) completed, (\d+) skipped, 0 diverged, 0 failed", log.read_text())
        assert found, log.read_text()[-3000:]
        completed += int(found[1])
    runs = [folder for folder in sweep_dir.iterdir() if (folder / "summary.json").exists()]
    assert len(runs) == 8 and completed == 8  # each run trained by one launch
    for run in runs:
        steps = [step for step, _ in losses(run)]
        assert steps == sorted(set(steps)) and summary(run)["status"] == "completed", run.name
    assert {summary(run)["host"] for run in runs} <= {"node1", "node2"}
    results = pd.read_csv(sweep_dir / "results.csv")
    assert len(results) == 8 and set(results["status"]) == {"completed"}


# --- Ray --------------------------------------------------------------------------------------------------

def test_ray_a_node_that_stops_answering_loses_no_run(ray_head, workdir, reference):
    """Two runs, one on the head and one on raynode2 (2 CPUs each). raynode2 stops answering mid-run (its
    raylet, workers and trainer frozen): Ray declares it dead and runs its task again on the head, where the
    run resumes from its last checkpoint, taking over the frozen trainer's lock; every logged loss equals the
    uninterrupted run's."""
    sweep_dir = workdir / "ray_node_lost"
    launch = Launch(workdir, *ray_args(str(sweep_dir), LONG, "optim.lr=0.05", "hydra.launcher.ray.remote.num_cpus=2",
                                       "hydra.launcher.ray.remote.max_retries=1"))
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    wait_for(lambda: all(checkpointed(run) for run in runs), "both tasks to train", launch=launch)
    hosts = [summary(run)["host"] for run in runs]
    assert sorted(hosts) == sorted([socket.gethostname(), "raynode2"]), hosts
    victim = hosts.index("raynode2")
    try:
        node("freeze", "raynode2")
        code, out = launch.finish(timeout=480)
    finally:
        node("start", "raynode2")
        wait_for(lambda: alive_ray_nodes() == 2, "raynode2 back in the Ray cluster", timeout=120)
    assert code == 0 and "sweep finished: 2 completed, 0 skipped, 0 diverged, 0 failed" in out, out[-3000:]
    assert "Traceback" not in out
    assert "Ray node raynode2 (10.78.2.2) is lost" in out, out[-3000:]
    moved = summary(runs[victim])
    assert f"Ray task {victim} moved from raynode2 to {socket.gethostname()}, resuming from step " \
           f"{moved['resumed_from']}: {runs[victim].name}" in out, out[-3000:]
    assert moved["host"] == socket.gethostname() and moved["resumed_from"] >= 20
    for run in runs:
        assert losses(run) == reference[run.name]


def test_ray_status_settles_the_runs_of_a_lost_node_after_the_launch_died_and_the_same_command_resumes(
        ray_head, workdir, reference):
    """Two runs, one on the head and one on raynode2. The launching process is killed (SIGKILL: nothing of it
    settles anything) and raynode2 loses power: its trainer stops renewing its lock. modula-sweep-status
    --follow settles the head's run by its lock at once and raynode2's once its lock has been silent for
    --lost-after, both interrupted at their checkpoints, and ends; the same command resumes both."""
    sweep_dir = workdir / "ray_status_lost_node"
    args = ray_args(str(sweep_dir), LONG, "optim.lr=0.05", "hydra.launcher.ray.remote.num_cpus=2")
    launch = Launch(workdir, *args)
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    wait_for(lambda: all(checkpointed(run) for run in runs), "both tasks to train", launch=launch)
    hosts = [summary(run)["host"] for run in runs]
    assert sorted(hosts) == sorted([socket.gethostname(), "raynode2"]), hosts
    lost = runs[hosts.index("raynode2")]
    try:
        node("kill", "raynode2")
        os.killpg(launch.proc.pid, signal.SIGKILL)
        launch.proc.wait(timeout=60)
        code, out = sweep_status(sweep_dir, "--follow", "--poll", "1", "--lost-after", "25")
    finally:
        node("start", "raynode2")
        wait_for(lambda: alive_ray_nodes() == 2, "raynode2 back in the Ray cluster", timeout=120)
    assert code == 1 and "sweep incomplete: 0 completed, 0 skipped, 0 diverged, 0 failed, 2 interrupted" in out, out
    record = summary(lost)
    assert record["status"] == "interrupted" and record["steps_done"] >= 20
    assert re.search(r"its trainer \(pid \d+ on raynode2\) has not renewed its lock for [\dhms]+, so raynode2 is taken "
                     r"for lost", record["ended"]), record["ended"]
    assert f"{lost.name}: {record['ended']}" in out, out
    again_code, again = Launch(workdir, *args).finish(timeout=480)
    assert again_code == 0 and "sweep finished: 2 completed, 0 skipped" in again, again[-3000:]
    assert all(summary(run)["resumed_from"] >= 20 for run in runs)
    for run in runs:
        assert losses(run) == reference[run.name]


def test_ray_runs_per_task_a_run_whose_process_dies_ends_alone_and_the_relaunch_resumes_it(ray_head, workdir,
                                                                                           reference):
    """runs_per_task=2, 1 CPU per run: the 4 runs go in 2 Ray tasks of 2 processes. One trainer killed with
    SIGKILL ends its run alone (interrupted at its checkpoint) while its sibling in the same task completes;
    the same command resumes it; every logged loss equals the uninterrupted sweep's."""
    sweep_dir = workdir / "ray_per_task"
    args = ray_args(str(sweep_dir), LONG, "hydra.launcher.ray.remote.num_cpus=1", "hydra.launcher.runs_per_task=2",
                    "hydra.launcher.ray.remote.max_retries=0")
    launch = Launch(workdir, *args)
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    wait_for(lambda: checkpointed(runs[0]) and checkpointed(runs[1]), "the first task's runs to train", launch=launch)
    os.kill(trainer_pid(runs[0]), signal.SIGKILL)
    code, out = launch.finish(timeout=480)
    assert code == 1 and "Traceback" not in out, out[-3000:]
    assert "submitted 2 tasks to the Ray cluster (2 runs per task, 1 CPU per run, no GPU" in out, out[-3000:]
    assert "sweep incomplete: 3 completed, 0 skipped, 0 diverged, 0 failed, 1 interrupted" in out, out[-3000:]
    killed = summary(runs[0])
    assert killed["status"] == "interrupted" and "exit code -9" in killed["ended"], killed
    records = [summary(run) for run in runs]
    assert records[0]["job"] == records[1]["job"] != records[2]["job"] == records[3]["job"]
    assert {r["threads"] for r in records} == {1}
    again_code, again = Launch(workdir, *args).finish(timeout=480)
    assert again_code == 0 and "sweep finished: 1 completed, 3 skipped" in again, again[-3000:]
    assert_resumed_exactly(sweep_dir, reference)


def ray_args(sweep_dir: str, *extra: str) -> list[str]:
    return [*GRID, "data.root=data", "hydra/launcher=ray_cluster", "hydra.launcher.poll_s=0.5",
            f"hydra.sweep.dir={sweep_dir}", *extra]


def test_ray_runs_land_where_the_launch_looks_and_count_right(ray_head, workdir):
    """Launched from a folder the Ray head never saw, with a relative sweep folder and data root: the runs land
    in the launch's folder, the closing counts are this launch's, each run's threads are its task's CPUs."""
    code, out = Launch(workdir, *ray_args("sweeps/ray", "train.steps=100", "hydra.launcher.ray.remote.num_cpus=2")
                       ).finish()
    assert code == 0, out[-3000:]
    sweep_dir = workdir / "sweeps" / "ray"
    assert f"sweep of 4 runs into {sweep_dir}" in out  # made absolute before any task starts
    assert "sweep finished: 4 completed, 0 skipped, 0 diverged, 0 failed" in out
    assert sorted(re.findall(r"\[(\d) of 4\]", out)) == list("1234"), out
    records = [summary(folder) for folder in sweep_dir.iterdir() if (folder / "summary.json").exists()]
    assert len(records) == 4 and {r["threads"] for r in records} == {2}
    assert {r["steps_done"] for r in records} == {101}  # the paper variant's extra iteration
    again_code, again = Launch(workdir, *ray_args("sweeps/ray", "train.steps=100",
                                                  "hydra.launcher.ray.remote.num_cpus=2")).finish()
    assert again_code == 0 and "sweep finished: 0 completed, 4 skipped" in again and "submitted" not in again


def test_ray_killed_worker_and_stopped_launch_end_honestly_and_resume_exactly(ray_head, workdir, reference):
    """max_retries=0: a trainer killed with SIGKILL is its task's end (Ray's retries exhausted), recorded as
    interrupted at its checkpoint; Ctrl-C to the launching process then stops the other tasks (they
    checkpoint); the same command resumes every run to the uninterrupted losses."""
    sweep_dir = workdir / "ray_faults"
    args = ray_args(str(sweep_dir), LONG, "hydra.launcher.ray.remote.num_cpus=1",
                    "hydra.launcher.ray.remote.max_retries=0")
    launch = Launch(workdir, *args)
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    first = wait_for(lambda: next((r for r in runs if checkpointed(r)), None), "a task to train", launch=launch)
    os.kill(trainer_pid(first), signal.SIGKILL)
    wait_for(lambda: summary(first)["status"] == "interrupted", "the killed run to be settled", launch=launch)
    wait_for(lambda: any(checkpointed(r) for r in runs if r != first), "another task to train", launch=launch)
    launch.signal(signal.SIGINT)  # Ctrl-C
    code, out = launch.finish()
    assert code == 130 and "Traceback" not in out, out[-3000:]
    killed = summary(first)
    assert killed["ended"] == f"Ray task {runs.index(first)}: its worker process died (retries exhausted)", killed
    assert f"{first.name}: interrupted at step {killed['steps_done']} (Ray task" in out
    assert re.search(r"sweep stopped by signal 2: \d completed, 0 skipped, 0 diverged, 0 failed, \d interrupted", out)
    assert not any(summary(r) and summary(r)["status"] == "running" for r in runs)
    again_code, again = Launch(workdir, *args).finish()
    assert again_code == 0, again[-3000:]
    assert "sweep finished:" in again and " 0 failed" in again
    assert_resumed_exactly(sweep_dir, reference)


def test_ray_killed_worker_with_retries_left_resumes_within_the_launch(ray_head, workdir, reference):
    sweep_dir = workdir / "ray_retry"
    args = ray_args(str(sweep_dir), LONG, "optim.lr=0.05", "arch.width=8", "hydra.launcher.ray.remote.num_cpus=1",
                    "hydra.launcher.ray.remote.max_retries=1")
    launch = Launch(workdir, *args)
    runs = wait_for(lambda: (sweep_dir / "sweep.json").exists() and job_runs(sweep_dir), "the plan", launch=launch)
    wait_for(lambda: checkpointed(runs[0]), "the task to train", launch=launch)
    os.kill(trainer_pid(runs[0]), signal.SIGKILL)
    code, out = launch.finish()
    assert code == 0 and "sweep finished: 1 completed, 0 skipped" in out, out[-3000:]
    assert losses(runs[0]) == reference[runs[0].name]


@pytest.mark.parametrize("override, message", [
    ("hydra.launcher.ray.remote.num_gpus=1", r"num_gpus=1, but no node of this Ray cluster has a GPU; set "
                                             r"hydra.launcher.ray.remote.num_gpus=0 \(or auto\)"),
    ("hydra.launcher.ray.remote.num_cpus=64", r"num_cpus=64, but the nodes of this Ray cluster have at most \d+ CPU"),
    ("hydra.launcher.ray.init.address=127.0.0.1:9", r"no Ray cluster answers at address=127.0.0.1:9"),
])
def test_ray_request_the_cluster_cannot_run_is_refused_in_one_line(ray_head, workdir, override, message):
    started = time.monotonic()
    code, out = Launch(workdir, *ray_args("refused", "train.steps=5", override)).finish(timeout=120)
    assert code == 1 and re.search("modula-sweep: sweep not launched, .*" + message, out), out[-3000:]
    assert "Traceback" not in out and not (workdir / "refused").exists()
    assert time.monotonic() - started < 60  # never a wait on a resource no node has


def test_slurm_runs_an_lr_search_round_by_round_and_a_relaunch_submits_nothing(slurm_cluster, workdir):
    sweep_dir = workdir / "search"
    args = [a for a in slurm_args(sweep_dir) if not a.startswith("optim.lr=")] + SEARCH
    code, out = Launch(workdir, *args).finish()
    assert code == 0, out[-3000:]
    assert_searched(sweep_dir, out)
    assert len(re.findall(r"as SLURM job \d+", out)) == 2  # one array per round
    again_code, again = Launch(workdir, *args).finish()
    assert again_code == 0 and "submitted" not in again, again[-3000:]


def test_ray_runs_an_lr_search_round_by_round(ray_head, workdir):
    sweep_dir = workdir / "search"
    args = [a for a in ray_args(str(sweep_dir)) if not a.startswith("optim.lr=")] + SEARCH
    code, out = Launch(workdir, *args).finish()
    assert code == 0, out[-3000:]
    assert_searched(sweep_dir, out)
