"""Jobs on a scheduler followed to their end: SLURM's task states and the follower on a scripted scheduler (an
honest end for every job, a stop, jobs that can never start), detached launches, a relaunch that adopts live
jobs, and ``modula-sweep-status``."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from modula_cli.plumbing import threads
from modula_cli.plumbing.signals import StopSignal
from modula_cli.results.manifest import read_launch, record_launch
from modula_cli.results.status import INTERRUPTED, RUNNING
from modula_cli.results.summary import as_seen, read_summary, summary_record, write_summary
from modula_cli.schedulers import slurm, slurm_tasks
from modula_cli.sweep.progress import closing
from test_launchers import KNOBS


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
    from modula_cli.schedulers.jobs import JobEnd

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
    from modula_cli.schedulers import slurm_tasks
    from modula_cli.sweep import sweep_status

    sweep, overrides = three_jobs
    record_submission(sweep, "L", "slurm", {tuple(o): f"31_{i}" for i, o in enumerate(overrides)}, detached=True)
    _summary_of_launch(sweep / "a", "completed", 101)
    _summary_of_launch(sweep / "b", "running", 40, owner_host="node-17", job="slurm:31_1")
    words = {"31_0": sweep_status.JobWord(False, "COMPLETED"),
             "31_1": sweep_status.JobWord(True, "SLURM did not answer (timed out)"),
             "31_2": sweep_status.JobWord(True, "PENDING (Resources), requeued 2×")}
    monkeypatch.setattr(slurm_tasks, "slurm_words", lambda ids: dict(words))
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
    for name in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")
    before = threads.torch.get_num_threads()
    try:
        assert threads.configure_threads("auto", parallel_jobs=4) == 2
    finally:
        threads.torch.set_num_threads(before)


def test_task_0_of_a_job_of_several_runs_stays_while_a_sibling_trains(tmp_path, monkeypatch):
    """The task that requeues a pre-empted job (0) outlives its siblings' runs: it waits while a sibling says it
    lives, stops once the sibling has ended, and does not wait for one that stopped saying so (killed), nor for
    the files of the job's earlier incarnation (a requeue)."""
    import threading
    import time

    from modula_cli.schedulers import sibling_tasks
    from modula_cli.schedulers.sibling_tasks import SiblingTasks

    monkeypatch.setattr(sibling_tasks, "ALIVE_EVERY_S", 0.05)
    monkeypatch.setattr(sibling_tasks, "LOST_AFTER_S", 0.5)
    tasks = SiblingTasks(tmp_path, "12_0", "0", size=2)
    release = threading.Event()

    def sibling() -> None:
        with tasks.present(1):
            release.wait(5)

    thread = threading.Thread(target=sibling)
    thread.start()
    time.sleep(0.2)
    waiter = threading.Thread(target=tasks.wait_for_siblings, kwargs={"poll_s": 0.02})
    waiter.start()
    time.sleep(1.0)  # twice LOST_AFTER_S: the sibling still beats, so task 0 still waits
    assert waiter.is_alive()
    release.set()
    waiter.join(2)
    assert not waiter.is_alive() and (tmp_path / "12_0.restart0.task1.ended").exists()
    thread.join()

    requeued = SiblingTasks(tmp_path, "12_0", "1", size=2)  # the earlier incarnation's "ended" is not this one's
    (tmp_path / "12_0.restart1.task1.alive").touch()
    assert requeued.training(1, since=time.time())
    stale = time.time() - 5
    os.utime(tmp_path / "12_0.restart1.task1.alive", (stale, stale))  # killed: it stopped beating
    assert not requeued.training(1, since=time.time())
    assert requeued.training(2, since=time.time()) and not requeued.training(2, since=stale)  # not started yet


def test_status_settles_a_ray_or_local_run_whose_trainer_elsewhere_has_gone_silent(three_jobs, capsys):
    """A launch without scheduler ids (Ray, local) whose launching process has left: a run whose trainer on
    another host renews its lock is left running; one silent for --lost-after is settled interrupted, saying
    which host is taken for lost, and the report follows once every run has ended. --lost-after must leave a
    live trainer room to renew."""
    from modula_cli.plumbing.locks import RENEW_S
    from modula_cli.sweep import sweep_status

    sweep, _ = three_jobs
    _summary_of_launch(sweep / "a", "completed", 101)
    _summary_of_launch(sweep / "b", "running", 40, owner_host="raynode2")
    _summary_of_launch(sweep / "c", "completed", 101)
    assert sweep_status.main([str(sweep), "--lost-after", "60"]) == 0  # renewed just now: still training
    assert "  b: running at step 40" in capsys.readouterr().out
    stale = time.time() - 90
    os.utime(sweep / "b" / "run.owner", (stale, stale))
    assert sweep_status.main([str(sweep), "--lost-after", "60"]) == 1
    out = capsys.readouterr().out
    b = read_summary(sweep / "b")
    assert b["status"] == INTERRUPTED and b["steps_done"] == 40
    assert b["ended"] == "its trainer (pid 1 on raynode2) has not renewed its lock for 1m30s, so raynode2 is taken " \
                         "for lost"
    assert "sweep incomplete: 2 completed, 0 skipped, 0 diverged, 0 failed, 1 interrupted" in out
    with pytest.raises(SystemExit):
        sweep_status.main([str(sweep), "--lost-after", str(RENEW_S)])
    assert f"--lost-after {RENEW_S:g}; allowed: more than {2 * RENEW_S:g} seconds" in capsys.readouterr().err


def test_a_held_run_renews_its_owner_file_until_released(tmp_path, monkeypatch):
    from modula_cli.plumbing import locks

    monkeypatch.setattr(locks, "RENEW_S", 0.05)
    held = locks.RunLocks([tmp_path / "run"])
    assert held.try_acquire()
    stale = time.time() - 600
    os.utime(tmp_path / "run" / "run.owner", (stale, stale))
    time.sleep(0.3)
    assert locks.silent_for(tmp_path / "run") < 0.3  # renewed
    held.release()
    os.utime(tmp_path / "run" / "run.owner", (stale, stale))
    time.sleep(0.3)
    assert locks.silent_for(tmp_path / "run") > 500  # no longer


def test_status_asks_each_launch_of_the_scheduler_its_launcher_submitted_to(three_jobs, monkeypatch, capsys):
    """sweep.json records whose ids a launch's jobs are and the Jobs class that can be asked about them;
    modula-sweep-status asks that class and no other. A scheduler it cannot ask (a class that has no ``ask``, one
    outside a launcher's module) is shown by its ids, and nothing of it is settled on a guess. A user's launcher
    whose jobs can be asked (the toy's: threads of its launch, ended with it) is asked, and its runs settled."""
    from modula_cli.results.manifest import record_submission
    from modula_cli.schedulers import slurm_tasks
    from modula_cli.sweep import sweep_status

    sweep, overrides = three_jobs
    ids = {tuple(o): f"t{i}" for i, o in enumerate(overrides)}
    _summary_of_launch(sweep / "a", "running", 40, owner_host="node-17", job="toy:t0")
    asked = []
    monkeypatch.setattr(slurm_tasks, "slurm_words", lambda ids: asked.append(ids) or {})
    for asker in (None, "os:getcwd", "hydra_plugins.modula_toy.toy_launcher:ToyLauncher"):
        record_submission(sweep, "L", "toy", ids, detached=True, asked_by=asker)
        assert sweep_status.main([str(sweep)]) == 0
        out = capsys.readouterr().out
        assert asked == [] and "detached, toy job t0, t1, t2): 3 runs" in out, out
        assert "  a: running at step 40 — toy job t0: toy cannot be asked from here" in out
        assert read_summary(sweep / "a")["status"] == RUNNING
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "toy_plugin"))
    record_submission(sweep, "L", "toy", ids, detached=True,
                      asked_by="hydra_plugins.modula_toy.toy_launcher:ThreadJobs")
    assert sweep_status.main([str(sweep)]) == 1  # every job ended: settled, reported
    out = capsys.readouterr().out
    assert asked == [] and "detached, toy job t0, t1, t2): 3 runs" in out, out
    a = read_summary(sweep / "a")
    assert (a["status"], a["ended"]) == (INTERRUPTED, "toy job t0: ended with its launch")
