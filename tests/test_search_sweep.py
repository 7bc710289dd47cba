"""``sweep.search=true`` end to end: a real search through the launchers, the settings it refuses before
anything runs, a stop and a relaunch that never trains a run twice, and the report's search lines."""

import json
import re
import signal
import time
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import open_dict

from helpers import compose_config
from modula_cli.config.identity import run_name
from modula_cli.sweep.lr_search import SearchError
from modula_cli.sweep.search_space import search_space
from test_reliability import finish, start

pytestmark = pytest.mark.slow

GRID = "optim.lr=" + ",".join(repr(2.0 ** k) for k in range(-8, 1))  # 9 LRs, 2^-8 … 1
TINY = ["arch=gpt", "arch.width=8,16", "arch.depth=1", "arch.heads=2", "data.context=8", "train.batch_size=8",
        "train.eval_batches=1", "train.eval_every=1000", "train.log_every=1", "train.progress=false",
        "train.device=cpu", "train.checkpoint_every=5", GRID, "train.seed=0,1", "sweep.search=true"]


@pytest.fixture
def text_tmp(tiny_text_root):
    return tiny_text_root.parent


def search_args(tmp_path: Path, sweep_dir: Path, *extra: str) -> list[str]:
    return ["-m", *TINY, f"data.root={tmp_path / 'data'}", f"hydra.sweep.dir={sweep_dir}", *extra]


def finished_runs(sweep_dir: Path) -> dict[str, dict]:
    """Every run folder's summary (none before the sweep folder exists)."""
    if not sweep_dir.is_dir():
        return {}
    return {p.name: json.loads((p / "summary.json").read_text()) for p in sweep_dir.iterdir()
            if (p / "summary.json").exists()}


def test_a_search_trains_part_of_the_grid_reports_what_it_spent_and_a_relaunch_trains_nothing(text_tmp):
    sweep_dir = text_tmp / "search"
    code, out, err = finish(start(search_args(text_tmp, sweep_dir, "train.steps=12"), text_tmp))
    assert code == 0, err[-3000:]
    assert f"LR search into {sweep_dir}: the grid is 36 runs" in out + err
    record = json.loads((sweep_dir / "search.json").read_text())
    scales = {entry["scale"]: entry for entry in record["scales"].values()}
    assert set(scales) == {"8", "16"} and all(e["state"] == "stopped" for e in scales.values())
    runs = finished_runs(sweep_dir)
    assert sum(e["runs"] for e in scales.values()) == len(runs) < 36
    results = pd.read_csv(sweep_dir / "results.csv")
    for width, entry in ((8, scales["8"]), (16, scales["16"])):
        tried = results[results["width"] == width]
        assert sorted(tried["lr"].unique()) == sorted(entry["lrs"]) and len(entry["lrs"]) >= 3
        assert (tried.groupby("lr")["seed"].nunique() == 2).all()  # every LR got every seed
        assert sorted(entry["run_names"]) == sorted(tried["run"])
    # the regret needs width 8's best LR at width 16: the search trained it there
    best_small = results[results["width"] == 8].groupby("lr")["train_loss"].mean().idxmin()
    assert best_small in scales["16"]["lrs"]
    spend = pd.read_csv(sweep_dir / "search.csv")
    assert list(spend["runs"]) == [scales[str(w)]["runs"] for w in spend["scale"]]
    assert (spend["grid_runs"] == 18).all() and (spend["cpu_s"] > 0).all()
    assert re.search(rf"LR search of normed adam \(gpt, shakespeare, paper\) \(.*search.json\): {len(runs)} runs "
                     rf"of the full grid's 36 \(\d+%\); CPU time", out), out[-3000:]
    assert "Verdict (the shift in grid steps" in out
    transfer = pd.read_csv(sweep_dir / "transfer.csv")
    assert transfer["call"].iloc[0] in ("transfers", "drifts", "moves", "cannot tell")
    # the same command: every scale has stopped, nothing trains, nothing is rewritten
    before = {name: summary["written_at"] for name, summary in runs.items()}
    code, out, err = finish(start(search_args(text_tmp, sweep_dir, "train.steps=12"), text_tmp))
    assert code == 0 and "sweep finished: 0 completed" in out, err[-3000:]
    assert {name: s["written_at"] for name, s in finished_runs(sweep_dir).items()} == before


def test_a_stopped_search_resumes_and_never_trains_a_run_twice(text_tmp):
    sweep_dir = text_tmp / "stopped"
    args = search_args(text_tmp, sweep_dir, "train.steps=60", "train.seed=0")
    process = start(args, text_tmp)
    deadline = time.time() + 120
    def training_the_third() -> bool:  # two runs finished, a third a few steps in
        done = {name for name, s in finished_runs(sweep_dir).items() if s.get("status") == "completed"}
        return len(done) >= 2 and any(len(m.read_text().splitlines()) >= 5 for m in sweep_dir.glob("*/metrics.jsonl")
                                      if m.parent.name not in done)
    while time.time() < deadline and not training_the_third():
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    code, out, err = finish(process)
    assert code == 143 and "sweep stopped by signal 15" in out, err[-3000:]
    first = {name: s for name, s in finished_runs(sweep_dir).items() if s["status"] == "completed"}
    assert len(first) >= 2 and any(s["status"] == "interrupted" for s in finished_runs(sweep_dir).values())
    code, out, err = finish(start(args, text_tmp))
    assert code == 0, err[-3000:]
    final = finished_runs(sweep_dir)
    for name, summary in first.items():  # finished before the stop: read, never trained again
        assert final[name]["launch"] == summary["launch"] and final[name]["written_at"] == summary["written_at"]
    resumed = [s for s in final.values() if s.get("resumed_from")]
    assert resumed, "the run the stop interrupted resumes from its checkpoint"
    record = json.loads((sweep_dir / "search.json").read_text())
    assert all(e["state"] == "stopped" for e in record["scales"].values())
    assert sum(e["runs"] for e in record["scales"].values()) == len(final)
    assert len({r["launch"] for r in record["rounds"]}) == 2  # both launches' rounds are kept


def test_each_batch_goes_through_the_configured_launcher_and_more_seeds_later_train_only_the_new_ones(text_tmp):
    sweep_dir = text_tmp / "parallel"
    # one width: a scale's rounds are what go through the launcher (a later value of a key wins, as in Hydra); one
    # job at a time, which joblib runs in the launching process (its worker processes are test_sweep.py's)
    first = search_args(text_tmp, sweep_dir, "arch.width=8", "train.steps=12", "sweep.pack=true",
                        "hydra/launcher=local_parallel", "hydra.launcher.n_jobs=1", "train.seed=0")
    code, out, err = finish(start(first, text_tmp))
    assert code == 0, err[-3000:]
    runs = finished_runs(sweep_dir)
    assert runs and all(s["status"] == "completed" for s in runs.values()) and {s["seed"] for s in runs.values()} == {0}
    assert {s["packed_with"] for s in runs.values()} <= {1, 2, 3}  # a scale's LRs of a round per packed job
    # a second seed later, packed: seed 0's runs are read, not trained again; seed 1 trains at every LR tried
    before = {name: s["written_at"] for name, s in runs.items()}
    code, out, err = finish(start([*first[:-1], "train.seed=0,1"], text_tmp))
    assert code == 0, err[-3000:]
    after = finished_runs(sweep_dir)
    assert {name: after[name]["written_at"] for name in before} == before
    seeds = pd.DataFrame([{"lr": s["lr"], "width": s["width"], "seed": s["seed"]} for s in after.values()])
    assert (seeds.groupby(["width", "lr"])["seed"].nunique() == 2).all()
    record = json.loads((sweep_dir / "search.json").read_text())
    assert sum(e["runs"] for e in record["scales"].values()) == len(after)


def test_a_search_without_an_lr_axis_is_refused_before_anything_runs(text_tmp):
    sweep_dir = text_tmp / "refused"
    args = [a for a in search_args(text_tmp, sweep_dir) if not a.startswith("optim.lr=")] + ["optim.lr=0.1"]
    code, out, err = finish(start(args, text_tmp))
    assert code != 0 and "sweep not launched, sweep.search=true needs an LR axis to search" in err
    assert not sweep_dir.exists()


def space(*overrides: str):
    """The search space of a command line: its swept axes as a preset's sweeper params, the rest composed."""
    swept = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "," in o}
    cfg = compose_config(*(o for o in overrides if "," not in o), with_hydra=True)
    with open_dict(cfg.hydra.sweeper):
        cfg.hydra.sweeper.params = swept
    return search_space(cfg)


@pytest.mark.parametrize("overrides, message", [
    (["sweep.search_budget=2"], "sweep.search_budget=2: a bracket needs at least 3 LRs per scale"),
    (["sweep.search_low=0.5", "sweep.search_high=0.6"], "the bounds must leave room for a bracket"),
    (["sweep.search_high=0.01"], "the starting LR 0.0625 lies outside the bounds [0, 0.0078125]"),
    (["sweep.search_substeps=3"], "sweep.search_substeps=3; allowed: 1, 2, 4, 8"),
    (["sweep.search_start=-1"], "sweep.search_start=-1; must be a finite number > 0 or null"),
    (["sweep.search_low=0"], "sweep.search_low=0; must be a finite number > 0 or null"),
    (["sweep.search_high=inf"], "sweep.search_high=inf; must be a finite number > 0 or null"),
    (["sweep.search_resolution=0"], "sweep.search_resolution=0; must be a finite number > 0"),
    (["sweep.search_resolution=inf"], "sweep.search_resolution=inf; must be a finite number > 0"),
    (["optim.lr=0.1,0.2,0.8"], "evenly spaced in log2"),
])
def test_settings_a_search_cannot_run_with_are_named_in_one_line(overrides, message):
    grid = [] if any(o.startswith("optim.lr=") for o in overrides) else [GRID]
    with pytest.raises(SearchError) as error:
        space(*grid, "arch.width=8,16", *overrides)
    assert any(message in problem for problem in error.value.problems), error.value.problems


def test_the_search_space_splits_the_axes_and_starts_in_the_grid_middle():
    found = space(GRID, "arch.width=16,8,32", "train.seed=0,1,2", "optim.mode=normed,dualized", "train.steps=7")
    assert found.scale_key == "arch.width" and [s.scales for s in found.series] == [("8", "16", "32")] * 2
    assert sorted(s.overrides for s in found.series) == [("optim.mode=dualized",), ("optim.mode=normed",)]
    assert found.seeds == ("0", "1", "2") and found.start == 4.0 and found.lattice.grid[4] == 2.0 ** -4
    assert found.positions() == [3.0, 4.0, 5.0] and "train.steps=7" in found.fixed
    assert found.settings.budget == 9 and found.settings.resolution == 0.75
    jobs = found.job_arguments(found.series[0], "16", [3, 4])
    assert len(jobs) == 6 and all("arch.width=16" in job for job in jobs)  # 2 LRs × 3 seeds, unpacked


def test_two_searches_launched_into_one_folder_share_the_work_and_train_each_run_once(text_tmp):
    sweep_dir = text_tmp / "shared"
    args = search_args(text_tmp, sweep_dir, "train.steps=30", "train.seed=0")
    first, second = start(args, text_tmp), start(args, text_tmp)
    (code_1, out_1, err_1), (code_2, out_2, err_2) = finish(first), finish(second)
    assert code_1 == 0 and code_2 == 0, (err_1[-2000:], err_2[-2000:])
    trained = [int(re.search(r"sweep finished: (\d+) completed", out)[1]) for out in (out_1, out_2)]
    runs = finished_runs(sweep_dir)
    assert sum(trained) == len(runs) and all(s["status"] == "completed" for s in runs.values())
    record = json.loads((sweep_dir / "search.json").read_text())
    assert all(e["state"] == "stopped" for e in record["scales"].values())
    assert sum(e["runs"] for e in record["scales"].values()) == len(runs)


def test_a_run_that_fails_is_not_sent_again_in_the_same_launch_and_its_scale_says_why(text_tmp):
    sweep_dir = text_tmp / "failing"
    args = search_args(text_tmp, sweep_dir, "train.steps=12")
    # the first bracket is 2^-5, 2^-4, 2^-3 around the grid's middle; 2^-4's seed-0 run fails at its start
    # (its metrics file is a folder): width 8 cannot be bracketed in this launch, so width 16 never starts
    fixed = [a for a in args[1:] if not a.startswith(("optim.lr=", "train.seed=", "arch.width="))]
    broken = sweep_dir / run_name([*fixed, "arch.width=8", "optim.lr=0.0625", "train.seed=0"])
    (broken / "metrics.jsonl").mkdir(parents=True)
    code, out, err = finish(start(args, text_tmp))
    assert code == 1 and re.search(r"sweep finished: 5 completed, 0 skipped, 0 diverged, 1 failed", out), out[-3000:]
    record = json.loads((sweep_dir / "search.json").read_text())
    scales = {entry["scale"]: entry for entry in record["scales"].values()}
    assert scales["8"]["reason"] == "unfinished" and "the same command retries them" in scales["8"]["stop"]
    assert scales["16"]["state"] == "waiting" and len(record["rounds"]) == 1
    assert "stopped: runs did not finish in this launch" in out


def test_a_search_asked_of_a_single_run_is_refused_in_one_line(text_tmp):
    args = [a for a in search_args(text_tmp, text_tmp / "none") if a != "-m" and "," not in a]
    code, out, err = finish(start(args, text_tmp))
    assert code != 0 and "sweep.search=true searches the LRs of a sweep: add -m and an LR axis" in err
    assert not (text_tmp / "outputs").exists() and not (text_tmp / "none").exists()
