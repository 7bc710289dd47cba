"""The on-disk records (modula_cli/results/): run summaries, the manifest and the launch records, the knobs and
the table of a sweep folder, on their less travelled paths, exactly: a launch's counts read from disk, a job that
ended before its run started, a refused launch taken back, a run settled by the scheduler's word, and unreadable or
foreign files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from modula_cli.plumbing.locks import HOST, OWNER_FILE
from modula_cli.config.identity import RunIdentity
from modula_cli.results.knobs import swept_axes
from modula_cli.results.manifest import LaunchRecord, Manifest, add_to_launch, forget_launch, read_launch, record_launch
from modula_cli.results.status import FAILED, INTERRUPTED, PENDING, RUNNING, SKIPPED
from modula_cli.results.summary import (Outcome, is_finished, mark_abandoned, read_summary, record_failed_start,
                                        summary_record, write_summary)
from modula_cli.results.table import collect

KNOBS = {"arch": "gpt", "data": "shakespeare", "optimizer": "adam", "mode": "normed", "width": 32, "lr": 0.1,
         "seed": 0}


def _summary(run_dir: Path, status: str, launch: str | None = None, **fields) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_summary(run_dir, {**summary_record(status, run_dir, KNOBS, "fp", steps_done=5), "launch": launch, **fields})


def test_launch_counts_read_the_record_and_the_summaries_from_disk(tmp_path):
    record_launch(tmp_path, "early", {"done": {}})
    _summary(tmp_path / "done", "completed", launch="early")
    record_launch(tmp_path, "L", {"done": {}, "mine": {}, "lost": {}, "queued": {}, "other": {}},
                  finished_before=["done"])
    _summary(tmp_path / "mine", "diverged", launch="L")
    _summary(tmp_path / "lost", "failed", launch="early", written_at=0.0)  # left by an earlier launch
    _summary(tmp_path / "other", "completed", launch="X", written_at=time.time() + 5)  # another process, now
    record = read_launch(tmp_path, "L")
    counts = record.counts(record.summaries(tmp_path))
    assert counts[SKIPPED] == 2 and counts["diverged"] == 1 and counts[PENDING] == 2  # lost + queued
    assert counts["completed"] == counts[FAILED] == counts[RUNNING] == counts[INTERRUPTED] == 0
    assert sum(counts.values()) == 5


def test_a_job_that_ended_before_its_run_started_leaves_a_failed_summary(tmp_path):
    run_dir = tmp_path / "sweep" / "deep" / "lr=0.1"  # its parents do not exist yet
    record_failed_start(run_dir, {**KNOBS, "fingerprint": "abc123"}, "SLURM job 7_2: NODE_FAIL", "L")
    summary = read_summary(run_dir)
    assert (summary["status"], summary["fingerprint"], summary["error"], summary["launch"]) == \
        (FAILED, "abc123", "SLURM job 7_2: NODE_FAIL", "L")
    assert (summary["width"], summary["lr"], summary["run"]) == (32, 0.1, "lr=0.1")
    record_failed_start(run_dir, {"lr": 0.2}, "again", None)  # the folder exists now; no fingerprint known
    again = read_summary(run_dir)
    assert (again["fingerprint"], again["error"], again["lr"], again["launch"]) == ("", "again", 0.2, None)
    assert "width" not in again


def test_taking_back_a_refused_launch(tmp_path):
    sweep = tmp_path / "sweep"
    record_launch(sweep, "kept", {"a": {"lr": 1}})
    record_launch(sweep, "refused", {"a": {"lr": 1}, "b": {"lr": 2}, "c": {"lr": 3}})
    (sweep / "c").mkdir()  # a run folder: its plan stays even though no launch holds it now
    forget_launch(sweep, "unknown")  # nothing to take back: nothing changes
    forget_launch(sweep, "refused")
    manifest = json.loads((sweep / "sweep.json").read_text())
    assert list(manifest["launches"]) == ["kept"] and sorted(manifest["runs"]) == ["a", "c"]
    forget_launch(sweep, "kept")  # no launch left, but a run folder: the manifest keeps its plan
    manifest = json.loads((sweep / "sweep.json").read_text())
    assert manifest["launches"] == {} and list(manifest["runs"]) == ["c"]
    assert not (sweep / ".sweep.lock").exists()


def test_a_refused_first_launch_leaves_no_folder_with_or_without_hydras_record(tmp_path):
    for name, hydra_record in (("plain", False), ("with_yaml", True)):
        sweep = tmp_path / name
        record_launch(sweep, "refused", {"a": {"lr": 1}})
        if hydra_record:
            (sweep / "multirun.yaml").write_text("hydra: {}\n")
        forget_launch(sweep, "refused")
        assert not sweep.exists(), name


def _owned_running_run(run_dir: Path, job: str, host: str) -> None:
    _summary(run_dir, RUNNING, launch="L", written_at=100.0)
    (run_dir / OWNER_FILE).write_text(json.dumps({"pid": 1, "host": host, "since": 0, "job": job}))


def test_a_run_on_another_node_is_settled_only_by_its_own_jobs_end(tmp_path):
    run_dir = tmp_path / "lr=0.1"
    _owned_running_run(run_dir, "slurm:7_1", "node-17")  # no lock file here: the lock lives on that node
    assert mark_abandoned(run_dir, "SLURM job 7_2 ended", job="slurm:7_2") is None  # another job
    assert mark_abandoned(run_dir, "no job named") is None
    settled = mark_abandoned(run_dir, "SLURM job 7_1: FAILED", job="slurm:7_1")
    assert (settled["status"], settled["ended"], settled["steps_done"]) == (INTERRUPTED, "SLURM job 7_1: FAILED", 5)
    assert settled["written_at"] > 100.0 and read_summary(run_dir) == settled
    assert mark_abandoned(run_dir, "again", job="slurm:7_1") is None  # settled once


def test_a_job_on_this_host_is_left_to_its_lock(tmp_path):
    run_dir = tmp_path / "lr=0.1"
    _owned_running_run(run_dir, "slurm:7_1", HOST)  # this host's lock probe decides, not the scheduler
    assert mark_abandoned(run_dir, "SLURM job 7_1: FAILED", job="slurm:7_1") is None
    assert read_summary(run_dir)["status"] == RUNNING


def test_settling_a_run_with_an_unreadable_summary_says_nothing(tmp_path, caplog):
    run_dir = tmp_path / "lr=0.1"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text("{not json")
    caplog.set_level("DEBUG")
    assert mark_abandoned(run_dir, job="slurm:1") is None
    assert caplog.records == []  # the sweep's end reads every folder: a half-written file is not a warning


@pytest.fixture
def compose():
    from helpers import compose_config

    return compose_config


def test_the_knobs_of_a_composed_config(compose):
    cfg = compose("arch=resmlp", "data=cifar10", "optim=sgd", "optim.mode=dualized", "variant=modular",
                  "arch.width=48", "arch.depth=3", "train.steps=7", "train.batch_size=5", "optim.wd=0.01")
    knobs = RunIdentity.of(cfg, 0.5, 2).knobs
    assert {key: knobs[key] for key in ("arch", "data", "optimizer", "mode", "variant", "lr", "seed")} == \
        {"arch": "resmlp", "data": "cifar10", "optimizer": "sgd", "mode": "dualized", "variant": "modular",
         "lr": 0.5, "seed": 2}
    assert (knobs["width"], knobs["depth"], knobs["steps"], knobs["batch_size"], knobs["wd"]) == (48, 3, 7, 5, 0.01)
    assert "heads" not in knobs and "context" not in knobs  # a ResMLP on images has neither
    assert isinstance(knobs["lr"], float) and isinstance(knobs["seed"], int)
    assert knobs["settings"] and "lr" not in knobs["settings"]
    gpt = RunIdentity.of(compose("arch=gpt", "arch.heads=2", "data.context=32"), 1, 0).knobs
    assert (gpt["arch"], gpt["heads"], gpt["context"], gpt["variant"], gpt["lr"]) == ("gpt", 2, 32, "paper", 1.0)


def test_a_run_is_finished_only_as_this_configuration():
    assert is_finished({"status": "completed", "fingerprint": "f"}, "f")
    assert is_finished({"status": "diverged", "fingerprint": "f"}, "f")
    assert not is_finished({"status": "completed", "fingerprint": "g"}, "f")  # a changed config trains again
    assert not is_finished({"status": "failed", "fingerprint": "f"}, "f")
    assert not is_finished({"status": "interrupted", "fingerprint": "f"}, "f")
    assert not is_finished(None, "f") and not is_finished({}, "f")


def test_the_swept_axes_are_the_knobs_with_several_values():
    runs = {"a": {"width": 32, "lr": 0.1, "depth": 2}, "b": {"width": 64, "lr": 0.1, "depth": 2},
            "c": {"width": 64, "lr": 0.2, "depth": 2}}
    assert swept_axes(runs) == ["width"]  # the LR is not a scale; depth has one value
    assert swept_axes({"a": {"width": 32}}) == [] and swept_axes({}) == []
    assert swept_axes({"a": {"depth": 2, "context": 8}, "b": {"depth": 4, "context": 16}}) == ["depth", "context"]


def test_a_launch_record_read_from_disk_or_given(tmp_path):
    record_launch(tmp_path, "L", {"b": {"width": 32}, "a": {"width": 64}}, finished_before=["b"],
                  jobs=[(["x=1"], ["a", "b"])])
    manifest = json.loads((tmp_path / "sweep.json").read_text())
    launch = manifest["launches"]["L"]
    assert launch["runs"] == ["a", "b"] and launch["finished_before"] == ["b"] and launch["axes"] == ["width"]
    record = read_launch(tmp_path, "L")
    assert (record.runs, record.finished_before, record.started) == (("a", "b"), ("b",), launch["started"])
    assert [{"overrides": list(job.overrides), "runs": list(job.runs)} for job in record.jobs] == launch["jobs"]
    assert len(record.jobs) == 1 and record.runs_of(["x=1"]) == ("a", "b") and record.runs_of(["x=2"]) is None
    assert record.to_train == 1 and record.axes == ("width",)
    given = Manifest(launches={"L": {"runs": ["z"], "started": 5.0}}).launch("L")
    assert (given.runs, given.started, given.finished_before, given.jobs) == (("z",), 5.0, (), ())
    before = time.time()
    unknown = read_launch(tmp_path, "nope")
    assert unknown.runs == () and unknown.started >= before
    foreign = LaunchRecord.from_json("F", {"runs": ["a"], "started": "yesterday", "jobs": ["x", {"runs": ["a"]}]})
    assert foreign.started >= before and foreign.jobs[0].runs == ("a",) and len(foreign.jobs) == 1


def test_a_search_adds_its_batches_to_its_launch_record(tmp_path):
    record_launch(tmp_path, "S", {})
    add_to_launch(tmp_path, "S", {"a": {"width": 32}, "b": {"width": 32}}, [(["w=32", "lr=1,2"], ["a", "b"])])
    add_to_launch(tmp_path, "S", {"c": {"width": 64}}, [(["w=64", "lr=1"], ["c"])])
    record = read_launch(tmp_path, "S")
    assert record.runs == ("a", "b", "c") and record.search is True
    assert [job.runs for job in record.jobs] == [("a", "b"), ("c",)]
    manifest = json.loads((tmp_path / "sweep.json").read_text())
    assert set(manifest["runs"]) == {"a", "b", "c"} and manifest["launches"]["S"]["axes"] == ["width"]
    assert read_launch(tmp_path, "other").search is False


def test_an_outcome_of_packed_members_says_packed():
    members = [{"status": "completed"}, {"status": "diverged"}]
    packed = Outcome.of(members, packed=True)
    assert (packed.status, packed.packed, packed.members) == ("packed", True, tuple(members))
    single = Outcome.of(members[:1], packed=False)
    assert (single.status, single.packed, single.summary) == ("completed", False, members[0])


def test_an_unreadable_summary_is_named_in_one_warning_and_counts_as_not_finished(tmp_path, caplog):
    caplog.set_level("WARNING")
    cases = {"corrupt": b"{not json", "latin": b'{"status": "\xff"}', "list": b"[1, 2]",
             "bogus": b'{"status": "bogus"}', "empty": b""}
    for name, content in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_bytes(content)
        assert read_summary(tmp_path / name) is None, name
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 5
    assert messages[0].startswith(f"{tmp_path / 'corrupt' / 'summary.json'} is corrupt (JSONDecodeError: ")
    assert messages[0].endswith("); the run counts as not finished and is trained again")
    assert messages[1].startswith(f"{tmp_path / 'latin' / 'summary.json'} is corrupt (UnicodeDecodeError: ")
    assert messages[2] == (f"{tmp_path / 'list' / 'summary.json'} is not a modula-sweep run summary (a JSON list); "
                           f"the run counts as not finished and is trained again")
    assert messages[3] == (f"{tmp_path / 'bogus' / 'summary.json'} is not a modula-sweep run summary (a JSON dict "
                           f"with status 'bogus'); the run counts as not finished and is trained again")
    caplog.clear()
    assert all(read_summary(tmp_path / name, warn=False) is None for name in cases) and not caplog.records
    assert read_summary(tmp_path / "nothing") is None and not caplog.records  # no file: nothing to say


def test_a_summary_names_its_schema_status_run_and_time(tmp_path):
    before = time.time()
    summary = summary_record("completed", tmp_path / "lr=0.5", {"lr": 0.5}, "fp", train_loss=1.5)
    assert summary["schema"] >= 1 and (summary["status"], summary["run"], summary["lr"]) == ("completed", "lr=0.5", 0.5)
    assert summary["train_loss"] == 1.5 and summary["fingerprint"] == "fp" and summary["written_at"] >= before
    with pytest.raises(ValueError, match=r"^unknown run status 'done'; allowed: completed, "):
        summary_record("done", tmp_path, {}, "fp")
    (tmp_path / "r").mkdir()
    write_summary(tmp_path / "r", {**summary, "path": tmp_path})  # not JSON itself: written as text
    text = (tmp_path / "r" / "summary.json").read_text()
    assert json.loads(text)["path"] == str(tmp_path) and text.startswith('{\n  "schema"')  # indented for people


def test_a_corrupt_or_foreign_manifest_plans_nothing(tmp_path, caplog):
    for content in ("{oops", '["a"]', '{"runs": []}'):
        (tmp_path / "sweep.json").write_text(content)
        assert Manifest.read(tmp_path) == Manifest({}, {})
    (tmp_path / "sweep.json").write_text('{"runs": {"a": {}}, "launches": ["x"]}')
    assert Manifest.read(tmp_path) == Manifest({"a": {}}, {})
    assert "is corrupt" in caplog.text and "its planned runs are ignored (finished runs still count)" in caplog.text


def test_the_table_of_a_sweep_folder(tmp_path):
    record_launch(tmp_path, "L", {"done": {**KNOBS, "width": 64}, "queued": {**KNOBS, "width": 32}})
    _summary(tmp_path / "done", "completed", launch="L", train_loss=1.25)
    (tmp_path / "done" / "config.yaml").write_text("arch: {name: gpt}\n")
    (tmp_path / "stray").mkdir()  # a folder without a summary is no run
    frame = collect(tmp_path).set_index("run")
    assert sorted(frame.index) == ["done", "queued"]
    assert (frame.loc["done", "status"], frame.loc["done", "train_loss"]) == ("completed", 1.25)
    assert frame.loc["queued", "status"] == "pending" and frame.loc["queued", "width"] == 32
    assert set(frame["axes"]) == {"width"} and set(frame["variant"]) == {"modular"}  # runs from before variants


def test_a_launch_into_a_folder_of_another_experiment_is_told_how_to_keep_them_apart(tmp_path, monkeypatch):
    """The quick preset run again with train.steps changed lands in the same folder: one line says how the runs
    there differ, and which hydra.sweep.dir keeps this launch apart. Other modes are a comparison, not
    another experiment; runs planned but never started do not count."""
    from modula_cli.results.manifest import record_launch
    from modula_cli.sweep.plan import another_experiment_line

    def runs(steps: int, mode: str = "normed", widths=(32, 64)) -> dict:
        return {f"lr=0.5,steps={steps},width={w},mode={mode}": {
            "settings": {"arch.width": w, "train.steps": steps, "optim.mode": mode, "data.context": 64}}
            for w in widths}

    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "outputs" / "sweeps" / "quick" / "gpt"
    record_launch(sweep, "first", {**runs(400), **runs(200)})
    for name in runs(400):  # the steps=200 runs never started
        (sweep / name).mkdir(parents=True)
        (sweep / name / "summary.json").write_text("{}")
    assert another_experiment_line(sweep, runs(400)) is None  # the same experiment again
    assert another_experiment_line(sweep, runs(400, mode="mup")) is None  # another mode: a comparison
    record_launch(sweep, "second", runs(300, widths=(32,)))
    (sweep / next(iter(runs(300)))).mkdir()
    (sweep / next(iter(runs(300))) / "summary.json").write_text("{}")
    line = another_experiment_line(sweep, runs(150))
    assert line == (f"{sweep} already holds another experiment (3 runs: steps=300, 400 there, 150 here); the report "
                    "shows each as a series of its own and its plots gain panels; to keep this one apart, add "
                    "hydra.sweep.dir=outputs/sweeps/quick/gpt-steps150")
    # seeds added to the steps=400 experiment, whose runs are there too: it joins them, no other folder offered
    seeded = {name.replace("lr=0.5", "lr=0.5,seed=1"): knobs for name, knobs in runs(400).items()}
    assert another_experiment_line(sweep, seeded) == (
        f"{sweep} already holds another experiment (1 run: steps=300 there, 400 here); the report shows each as a "
        "series of its own and its plots gain panels; this launch joins its own experiment's 2 runs there")


# --- an LR search's search.json ------------------------------------------------------------------------------

def test_search_json_keeps_other_launches_rounds_and_other_series_scales(tmp_path):
    """A second launch into the folder replaces its own rounds only; a scale searched by another launch (another
    mode) keeps its entry; the totals add every kept round's time, to the millisecond."""
    from modula_cli.results.search_file import read_search, write_search

    assert read_search(tmp_path) is None  # no search here
    settings = {"grid": [0.5, 1.0], "substeps": 2}
    write_search(tmp_path, settings, {"adam | 32": {"state": "searching"}, "sgd | 32": {"state": "stopped"}},
                 [{"launch": "A", "planning_s": 0.25, "launched_s": 1.5}])
    write_search(tmp_path, {**settings, "substeps": 1}, {"adam | 32": {"state": "stopped"}},
                 [{"launch": "B", "planning_s": 0.1234, "launched_s": 2.0},
                  {"launch": "B", "planning_s": 0.0002, "launched_s": None}])
    body = read_search(tmp_path)
    assert body["settings"] == {"grid": [0.5, 1.0], "substeps": 1}  # the latest launch's settings
    assert body["scales"] == {"adam | 32": {"state": "stopped"}, "sgd | 32": {"state": "stopped"}}
    assert [r["launch"] for r in body["rounds"]] == ["A", "B", "B"]  # earlier launches' rounds first
    assert (body["planning_s"], body["launched_s"]) == (0.374, 3.5)
    write_search(tmp_path, settings, {}, [{"launch": "A", "planning_s": 1.0, "launched_s": 1.0}])
    again = read_search(tmp_path)
    assert [r["launch"] for r in again["rounds"]] == ["B", "B", "A"]  # A's rounds replaced, B's kept
    assert (again["planning_s"], again["launched_s"]) == (1.124, 3.0) and again["scales"] == body["scales"]
    (tmp_path / "search.json").write_text('{"scales": [], "rounds": "x"}')
    assert read_search(tmp_path) is None  # foreign: no search table rather than a wrong one
    (tmp_path / "search.json").write_text('{"scales": {}, "rounds": ["junk", {"launch": "C"}]}')
    write_search(tmp_path, settings, {}, [])
    assert read_search(tmp_path)["rounds"] == [{"launch": "C"}]  # what is not a round is dropped
    (tmp_path / "search.json").write_text("{cut sho")
    assert read_search(tmp_path) is None


# --- the best LR of a packed job ---------------------------------------------------------------------------------

def test_the_best_lr_is_the_lowest_mean_over_seeds_of_finite_losses():
    from modula_cli.results.summary import best_lr

    pairs = [(0.25, 2.31), (0.25, 2.01), (0.5, 2.062), (0.5, 2.051), (1, float("nan")), (2, float("inf")),
             (4, None), (0.125, 2.2)]
    lr, mean, seeds = best_lr(pairs)
    assert (lr, seeds) == (0.5, 2) and mean == pytest.approx(2.0565) and isinstance(lr, float)
    assert best_lr([(1, 3.0)]) == (1.0, 3.0, 1)
    assert best_lr([(1, 3), (2, 3)]) == (1.0, 3.0, 1)  # a tie: the first LR given; integers count as losses
    assert best_lr([(0.5, 2.0), (0.25, 2.0), (0.25, 1.0)]) == (0.25, 1.5, 2)
    assert best_lr([(1, float("nan")), (2, None)]) is None and best_lr([]) is None


# --- exact values on the paths a mutation pass found open ----------------------------------------------------------

def test_the_experiments_a_folder_holds_by_hand(tmp_path):
    """Runs on disk besides the planned ones: the launch's own experiment (only swept settings differ, a dict
    setting's key order aside) or another one, each differing setting with its values there (numbers first, in
    order) and its value here. Planned runs, runs never started and foreign entries are not counted."""
    from modula_cli.results.manifest import FolderExperiments, other_experiments

    planned = {"p1": {"settings": {"optim.lr": 0.5, "train.steps": 100, "opts": {"b": 1, "a": 2}}},
               "p2": {"settings": {"optim.lr": 1.0, "train.steps": 100, "opts": {"a": 2, "b": 1}}}}
    there = {"same": {"optim.lr": 2.0, "train.steps": 100, "opts": {"a": 2, "b": 1}},
             "longer": {"optim.lr": 0.5, "train.steps": 150, "opts": {"a": 2, "b": 1}},
             "named": {"optim.lr": 0.5, "train.steps": "x", "opts": {"a": 2, "b": 1}},
             "shorter": {"optim.lr": 0.5, "train.steps": 50, "opts": {"a": 2, "b": 1}, "train.extra": 3}}
    record_launch(tmp_path, "old", {**{name: {"settings": s} for name, s in there.items()},
                                    "p1": planned["p1"], "never": {"settings": {"train.steps": 999}},
                                    "foreign": {"settings": "junk"}})
    for name in [*there, "p1", "foreign"]:
        _summary(tmp_path / name, "completed")
    found = other_experiments(tmp_path, planned)
    assert found == FolderExperiments(1, 3, {"train.steps": ([50, 150, "x"], 100), "train.extra": ([3], None)})
    alone = other_experiments(tmp_path, {"p1": planned["p1"]})  # one planned run: its LR is not swept
    assert alone == FolderExperiments(0, 4, {"optim.lr": ([2.0], 0.5), "train.steps": ([50, 150, "x"], 100),
                                             "train.extra": ([3], None)})
    assert other_experiments(tmp_path, {"p": {"width": 32}}) == FolderExperiments(0, 0, {})  # nothing to compare


def test_a_search_batch_keeps_its_launchs_start_and_notes(tmp_path):
    from modula_cli.results.manifest import add_note

    record_launch(tmp_path, "S", {})
    started = read_launch(tmp_path, "S").started
    add_note(tmp_path, "S", "cancelled: the partition is down")
    add_to_launch(tmp_path, "S", {"a": {"width": 32}}, [(["w=32"], ["a"])])
    record = read_launch(tmp_path, "S")
    assert (record.started, record.notes, record.runs) == (started, ("cancelled: the partition is down",), ("a",))


def test_a_stop_marker_is_per_launch():
    from modula_cli.results.files import stop_marker

    assert stop_marker(Path("/s"), "L1") == Path("/s/.stop.L1")
    assert stop_marker(Path("/s"), None) == Path("/s/.stop.none")


def test_search_json_totals_to_the_millisecond_and_reads_as_one_line_per_key(tmp_path):
    from modula_cli.results.search_file import write_search

    write_search(tmp_path, {}, {}, [{"launch": "A", "planning_s": 0.00049, "launched_s": 0.0006},
                                    {"launch": "A", "planning_s": None}])
    text = (tmp_path / "search.json").read_text()
    body = json.loads(text)
    assert (body["planning_s"], body["launched_s"]) == (0.0, 0.001)  # a missing time counts 0
    assert text.startswith('{\n "settings": {},\n "scales": {},\n')  # indented by one: readable, diffable


def test_how_a_launch_sees_each_run(tmp_path):
    """Run by run: this launch's own, finished before it, finished or failed by another process since it started
    (the same instant counts as since), or left earlier (pending until this launch gets to it)."""
    record = LaunchRecord("L", started=1000.0, runs=("mine", "before", "now", "same", "failed", "old", "none"),
                          finished_before=("before",))
    seen = {"mine": {"status": "diverged", "launch": "L"},
            "before": {"status": "completed", "launch": "E", "written_at": 10.0},
            "now": {"status": "completed", "launch": "X", "written_at": 1001.0},
            "same": {"status": "completed", "launch": "X", "written_at": 1000.0},
            "failed": {"status": FAILED, "launch": "X", "written_at": 1002.0},
            "old": {"status": "completed", "launch": "E", "written_at": 999.0}, "none": None}
    assert {name: record.status(name, summary) for name, summary in seen.items()} == {
        "mine": "diverged", "before": SKIPPED, "now": SKIPPED, "same": SKIPPED, "failed": FAILED, "old": PENDING,
        "none": PENDING}


def test_a_launchs_summaries_are_read_quietly_and_only_those_asked_for(tmp_path, caplog):
    record_launch(tmp_path, "L", {"a": {}, "b": {}, "c": {}})
    _summary(tmp_path / "a", "completed", launch="L")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "summary.json").write_text("{cut")
    caplog.set_level("WARNING")
    record = read_launch(tmp_path, "L")
    assert list(record.summaries(tmp_path, ["a", "b"])) == ["a", "b"]
    assert record.summaries(tmp_path, ["b"]) == {"b": None} and caplog.records == []  # the trainer warns, once


def test_an_abandoned_run_keeps_the_word_it_ended_with(tmp_path):
    from modula_cli.results.summary import ABANDONED, as_seen

    run = tmp_path / "run"
    run.mkdir()
    running = {"status": RUNNING, "steps_done": 3}
    assert as_seen(run, running) == {"status": INTERRUPTED, "steps_done": 3, "ended": ABANDONED}
    told = {**running, "ended": "SLURM job 4 ended: NODE_FAIL"}
    assert as_seen(run, told)["ended"] == "SLURM job 4 ended: NODE_FAIL"


def test_the_manifest_keeps_a_newer_writers_fields_and_a_relaunch_starts_its_record_afresh(tmp_path):
    from modula_cli.results.manifest import add_note

    manifest = Manifest(launches={"L": {"runs": ["x"], "from_a_newer_version": 1}})
    manifest.put(LaunchRecord("L", 5.0, runs=("y",)))
    assert manifest.launches["L"]["from_a_newer_version"] == 1 and manifest.launches["L"]["runs"] == ["y"]
    manifest.write(tmp_path)
    assert (tmp_path / "sweep.json").read_text().startswith('{\n "runs": {},\n "launches": {\n  "L": {')
    record_launch(tmp_path, "L", {"z": {}})
    add_note(tmp_path, "L", "cancelled")
    record_launch(tmp_path, "L", {"z": {}})  # the same launch id again: its old notes do not carry over
    launch = json.loads((tmp_path / "sweep.json").read_text())["launches"]["L"]
    assert "notes" not in launch and "from_a_newer_version" not in launch and launch["runs"] == ["z"]


def test_the_table_reads_an_old_runs_settings_from_its_config_and_joins_the_swept_axes(tmp_path):
    from omegaconf import OmegaConf

    from helpers import compose_config
    from modula_cli.config.identity import experiment_settings

    record_launch(tmp_path, "W", {"old": {**KNOBS, "width": 64}, "w": {**KNOBS, "width": 32}})
    record_launch(tmp_path, "D", {"d1": {**KNOBS, "depth": 2}, "d2": {**KNOBS, "depth": 4}})
    _summary(tmp_path / "old", "completed", launch="W")  # written before summaries held their settings
    cfg = compose_config("train.steps=7")
    (tmp_path / "old" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    frame = collect(tmp_path).set_index("run")
    settings = frame.loc["old", "settings"]
    assert settings == experiment_settings(cfg) and settings["train.steps"] == 7
    assert set(frame["axes"]) == {"depth,width"}
