"""The time-left estimate of a sweep uses the runs' sizes, checked on run times measured on this project's
2-core CPU: the quick sweep (one run per LR) and a packed three-seed width sweep (one job per width)."""

import pytest

from modula_cli.sweep.eta import coefficients, time_left, time_left_range
from modula_cli.results.manifest import LaunchRecord
from modula_cli.sweep.progress import launch_time_left, packed_outcome

GRID = 9  # LRs per width, as in the quick sweep
QUICK = {32: 13.0, 64: 20.0, 128: 55.0}  # seconds per run, `modula-sweep sweep=quick`, widths 4× apart, 1 thread
QUICK_2_THREADS = {32: 11.3, 64: 14.1, 128: 38.2}  # the same with 2 threads on the idle machine
PACKED = {32: 57.0, 64: 91.0, 128: 308.0, 256: 1142.0}  # experiment=small/gpt_width (docs/results)


def runs(width, count=GRID, steps=400, context=64):
    return [{"width": width, "depth": 3, "context": context, "batch_size": 32, "steps": steps}] * count


def truth(measured, widths):
    return sum(GRID * measured[w] for w in widths)


def by_hand(measured, trained, left):
    """The model's prediction of the runs left, worked by hand. Every run here differs only in width w, so a
    run's time a·S + b·F is α + β·w². From one width w₀ (time t₀): the prior split, 80 % overhead, so
    t(w) = t₀ (0.8 + 0.2 (w/w₀)²). From two: the line through both points, its β kept at least a tenth of
    t₀/w₀² (then α = 0.9 t₀). The launch went as its runs took (elapsed = their sum): pace 1."""
    w0, t0 = trained[0], measured[trained[0]]
    if len(trained) == 1:
        alpha, beta = 0.8 * t0, 0.2 * t0 / w0**2
    else:
        w1, t1 = trained[1], measured[trained[1]]
        beta = (t1 - t0) / (w1**2 - w0**2)
        alpha = t0 - beta * w0**2
        if beta < 0.1 * t0 / w0**2:
            beta, alpha = 0.1 * t0 / w0**2, 0.9 * t0
    return GRID * sum(alpha + beta * w**2 for w in left)


# The estimate over the measured truth: the accuracy modula_cli/sweep/eta.py quotes for these sweeps.
@pytest.mark.parametrize("measured, accuracy, spread", [(QUICK, 0.971, (0.596, 1.283)), (PACKED, 0.710, (0.351, 1.010)),
                                                       (QUICK_2_THREADS, 1.210, (0.743, 1.599))])
def test_the_rest_of_a_width_sweep_from_its_smallest_width(measured, accuracy, spread):
    widths = sorted(measured)
    trained = [(knobs, measured[widths[0]]) for knobs in runs(widths[0])]
    remaining = [k for w in widths[1:] for k in runs(w)]
    left = time_left(trained, remaining, elapsed=GRID * measured[widths[0]])
    assert left == pytest.approx(by_hand(measured, widths[:1], widths[1:]), rel=1e-9)
    # 3 % low with 1 thread, 29 % low packed; 2 threads: 1.2× too high (a run of width 32 keeps both busy less)
    assert left / truth(measured, widths[1:]) == pytest.approx(accuracy, abs=1e-3)
    # the range said with it (one width timed): it holds the truth in all three
    estimate, low, high = time_left_range(trained, remaining, elapsed=GRID * measured[widths[0]])
    assert estimate == left and (low / truth(measured, widths[1:]), high / truth(measured, widths[1:])) == \
        pytest.approx(spread, abs=1e-3)
    assert low < truth(measured, widths[1:]) < high
    flat = GRID * measured[widths[0]] * (len(widths) - 1)  # the old estimate: mean time so far × runs left
    assert truth(measured, widths[1:]) / flat > 2.3  # which was 2.3–4× too low


@pytest.mark.parametrize("measured, accuracy", [(QUICK, 0.873), (PACKED, 0.688), (QUICK_2_THREADS, 0.740)])
def test_fitted_once_two_widths_have_run(measured, accuracy):
    widths = sorted(measured)
    trained = [(knobs, measured[w]) for w in widths[:2] for knobs in runs(w)]
    left = time_left(trained, [k for w in widths[2:] for k in runs(w)], elapsed=truth(measured, widths[:2]))
    assert left == pytest.approx(by_hand(measured, widths[:2], widths[2:]), rel=1e-9)
    # 13 %, 31 % and 26 % low; with 2 threads the fitted FLOP part is below its floor, which then holds
    assert left / truth(measured, widths[2:]) == pytest.approx(accuracy, abs=1e-3)


def test_one_noisy_run_at_the_second_width_keeps_the_flop_part():
    """The first width-64 run barely slower than width 32 (noise): the fit keeps a tenth of width 32's time as
    FLOPs, so width 128 is still predicted 2.5× a width-32 run, not 1.2×."""
    trained = [(k, 12.0) for k in runs(32)] + [(runs(64, 1)[0], 12.5)]
    left = time_left(trained, runs(128, 1), elapsed=sum(s for _, s in trained))
    assert left == pytest.approx(0.9 * 12.0 + 0.1 * 12.0 * 16, rel=0.05)


def test_exact_when_times_follow_the_model():
    a, b = 0.02, 3e-9
    seconds = {w: a * 400 * 3 + b * 400 * 3 * 32 * 64 * w**2 for w in (32, 64, 128, 512)}
    trained = [(k, seconds[w]) for w in (32, 128) for k in runs(w, 2)]
    assert coefficients(trained) == pytest.approx((a, b))
    assert time_left(trained, runs(512, 3), elapsed=sum(s for _, s in trained)) == pytest.approx(3 * seconds[512])


def test_pace_folds_in_overheads_and_parallel_jobs():
    trained = [(knobs, 10.0) for knobs in runs(32, 4)]
    alone = time_left(trained, runs(32, 4), elapsed=40.0)
    two_jobs = time_left(trained, runs(32, 4), elapsed=20.0)
    assert alone == pytest.approx(40.0) and two_jobs == pytest.approx(20.0)
    assert time_left([], runs(32), 5.0) is None and time_left(trained, [], 40.0) == 0.0


RECORD = LaunchRecord("L", started=100.0, finished_before=("w128_0",))


def test_progress_line_counts_packed_members_and_ignores_earlier_launches(monkeypatch):
    monkeypatch.setattr("modula_cli.sweep.progress.time.time", lambda: 130.0)  # 30 s into the launch
    planned = {f"w{w}_{i}": runs(w, 1)[0] for w in (32, 128) for i in range(3)}
    summaries = {name: None for name in planned}
    for i in range(3):  # this launch trained width 32 as one packed run of 3 members: 30 s in all
        summaries[f"w32_{i}"] = {**planned[f"w32_{i}"], "status": "completed", "launch": "L", "wall_time_s": 30.0,
                                 "packed_with": 3, "steps_done": 400}
    summaries["w128_0"] = {**planned["w128_0"], "status": "completed", "launch": "earlier", "wall_time_s": 1.0}
    # two width-128 runs left; each: the 80 % overhead as at width 32, the 20 % FLOP part 16× larger; one width
    # timed so far: the range from overhead shares 0.92 and 0.70
    assert launch_time_left(planned, summaries, RECORD) == pytest.approx(
        [2 * 10.0 * (p + (1 - p) * 16) for p in (0.8, 0.92, 0.70)])


def test_a_diverged_run_counts_by_the_steps_it_trained_and_stale_runs_are_still_to_do(monkeypatch):
    monkeypatch.setattr("modula_cli.sweep.progress.time.time", lambda: 130.0)
    planned = {name: runs(32, 1)[0] for name in ("a", "b", "stale")}
    summaries = {"a": {**planned["a"], "status": "completed", "launch": "L", "wall_time_s": 20.0, "steps_done": 400},
                 "b": {**planned["b"], "status": "diverged", "launch": "L", "wall_time_s": 1.0, "steps_done": 20},
                 # finished by an earlier launch, and not before this one: sweep.rerun=true retrains it
                 "stale": {**planned["stale"], "status": "completed", "launch": "old", "written_at": 50.0}}
    record = LaunchRecord("L", started=100.0)
    left = launch_time_left(planned, summaries, record)
    # a: 20 s for 400 steps, b: 1 s for 20 steps — both 0.05 s a step; the stale run is 400 more steps (one size:
    # the range is a point)
    assert left == pytest.approx([30.0 / 21.0 * 20.0] * 3)


def test_a_packed_jobs_line_says_what_its_members_came_to_and_its_best_lr_as_the_report_picks_it():
    """The best LR by its mean over seeds, as the report's table picks it: not the single best member (lr 0.25,
    seed 1 has the lowest loss of any member, but 0.5 is better on average)."""
    members = [{"status": "completed", "lr": 0.25, "seed": 0, "train_loss": 2.31},
               {"status": "completed", "lr": 0.25, "seed": 1, "train_loss": 2.01},
               {"status": "completed", "lr": 0.5, "seed": 0, "train_loss": 2.0620},
               {"status": "completed", "lr": 0.5, "seed": 1, "train_loss": 2.0510},
               {"status": "diverged", "lr": 1.0, "seed": 0, "train_loss": 1.5}]  # a diverged loss never counts
    assert packed_outcome(members) == "4 completed, 1 diverged; best lr 0.5: train loss 2.0565 (mean of 2 seeds)"
    one_seed = [m for m in members if m["seed"] == 0 and m["status"] == "completed"]
    assert packed_outcome(one_seed) == "2 completed; best lr 0.5: train loss 2.0620"
    assert packed_outcome([{"status": "diverged", "lr": 1.0, "seed": 0}]) == "1 diverged"


def test_the_launchs_own_start_up_is_left_out_of_its_pace(monkeypatch):
    """The quick sweep's first estimate was 34-48 % too long: the launch's start-up (2.6 s before its first
    run of 6.8 s) counted as if every run would pay it again. The pace runs from the first run's start."""
    monkeypatch.setattr("modula_cli.sweep.progress.time.time", lambda: 130.0)
    planned = {name: runs(32, 1)[0] for name in ("a", "b")}
    summaries = {"a": {**planned["a"], "status": "completed", "launch": "L", "wall_time_s": 20.0, "steps_done": 400,
                       "written_at": 128.0},  # started at 108, 8 s after the launch
                 "b": None}
    left = launch_time_left(planned, summaries, LaunchRecord("L", started=100.0))
    assert left == pytest.approx([22.0 / 20.0 * 20.0] * 3)  # 22 s since it began, not 30 since the launch
    early = {**summaries, "a": {**summaries["a"], "written_at": 110.0}}  # a run begun before this launch (resumed)
    assert launch_time_left(planned, early, LaunchRecord("L", started=100.0)) == pytest.approx([30.0] * 3)
