"""CPU threads per process: all free cores for one run, shared when a local launcher runs several."""

import os

import pytest
import torch

from modula_cli.plumbing import threads
from modula_cli.plumbing.threads import auto_threads, configure_threads, threads_problem


def test_auto_takes_the_free_cores_and_shares_them_between_parallel_jobs():
    assert auto_threads(1, cores=8, busy=0.0, span=8) == 8
    assert auto_threads(4, cores=8, busy=5.0, span=8) == 2  # parallel jobs: the load is each other's
    assert auto_threads(1, cores=2, busy=1.2, span=2) == 1  # a busy 2-core box: one thread, not two fighting
    assert auto_threads(1, cores=2, busy=6.0, span=2) == 1 and auto_threads(3, cores=2, busy=0.0, span=2) == 1
    assert auto_threads(1, cores=16, busy=3.6, span=16) == 12
    assert auto_threads(1, cores=4, busy=30.0, span=64) == 4  # a 4-core quota on a half-busy 64-core node


def test_explicit_count_and_user_environment_win(monkeypatch):
    """Counts auto never picks (it is capped at the usable cores), so only the setting can have chosen them;
    and neither path measures the load."""
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "busy_cores", lambda *a, **k: pytest.fail("auto's load measurement ran"))
    for name in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    explicit, environment = threads.usable_cores() + 1, threads.usable_cores() + 2
    try:
        assert configure_threads(explicit) == explicit and torch.get_num_threads() == explicit
        monkeypatch.setenv("OMP_NUM_THREADS", str(environment))
        assert configure_threads("auto") == environment and torch.get_num_threads() == environment
    finally:
        torch.set_num_threads(before)


def test_bad_values_are_named():
    assert threads_problem("auto") is None and threads_problem(3) is None
    assert threads_problem(0) == "train.threads=0; allowed: auto, or an integer >= 1"
    assert "allowed" in threads_problem("many")


def test_busy_cores_sees_a_process_spinning_on_our_cores():
    import subprocess
    import sys
    import time

    cpus = sorted(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spinner.pid, {cpus[0]})
        time.sleep(0.3)  # the interpreter is up and spinning
        busy = threads.busy_cores(window_s=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert 0.7 <= busy <= len(cpus) + 0.05  # at least the spinner's core, never more than ours
