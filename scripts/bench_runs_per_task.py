"""One sweep on a SLURM cluster with hydra.launcher.runs_per_task = 1, 2 and 4, side by side: the wall time of the
whole sweep (submission to closing line), the scheduler submissions (sbatch calls) and allocations (jobs SLURM
schedules), each sweep repeated and the repeats interleaved, so that a load on the machine falls on every N alike.

    . .venv/bin/activate; SLURM_NODE_CPUS=4 bash scripts/cluster/up.sh   # nodes that hold 4 one-CPU runs
    python scripts/bench_runs_per_task.py [--repeats 3] [--steps 300]

Each run is a tiny GPT on a generated corpus, one CPU per run (``cpus_per_task=1``); the grid is 8 runs (width
8, 16 × four LRs). On scripts/cluster's clusters every node shares this machine's cores, so the times measure
what packing saves in scheduling and start-up, not in training. An N that no node can hold is printed as the
launcher's one-line refusal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = ["arch=gpt", "arch.width=8,16", "arch.depth=1", "arch.heads=2", "data.context=8", "train.batch_size=4",
        "train.eval_batches=1", "train.eval_every=1000", "train.progress=false", "optim.lr=0.025,0.05,0.1,0.2",
        "data.root=data", "hydra/launcher=slurm", "hydra.launcher.poll_s=1", "hydra.launcher.cpus_per_task=1"]
CORPUS = "".join(f"To be, or not to be: line {i}.\n" for i in range(400))


def sweep(workdir: Path, name: str, runs_per_task: int, steps: int) -> dict:
    """One sweep: its wall time, exit code and, from sweep.json, its submissions and allocations."""
    sweep_dir = workdir / name
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "modula_cli.train", "-m", *GRID, f"train.steps={steps}",
                           f"hydra.launcher.runs_per_task={runs_per_task}", f"hydra.sweep.dir={sweep_dir}"],
                          cwd=workdir, capture_output=True, text=True, timeout=3600)
    seconds = time.monotonic() - started
    out = done.stdout + done.stderr
    if done.returncode != 0:
        refused = next((line for line in out.splitlines() if "sweep not launched" in line), out[-500:])
        return {"refused": refused.strip()}
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    ids = {job["job_id"] for record in manifest["launches"].values() for job in record["jobs"] if job.get("job_id")}
    return {"seconds": seconds, "allocations": len(ids), "submissions": len({i.split("_")[0] for i in ids})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--runs-per-task", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %c %t"], capture_output=True, text=True).stdout
    print(f"SLURM nodes (name, CPUs, state):\n{nodes}")
    results: dict[int, list[dict]] = {n: [] for n in args.runs_per_task}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "data" / "shakespeare").mkdir(parents=True)
        (workdir / "data" / "shakespeare" / "input.txt").write_text(CORPUS)
        for repeat in range(args.repeats):
            for n in args.runs_per_task:
                results[n].append(sweep(workdir, f"n{n}-r{repeat}", n, args.steps))
                print(f"repeat {repeat + 1}, runs_per_task={n}: {results[n][-1]}", flush=True)
    base = [r["seconds"] for r in results[args.runs_per_task[0]] if "seconds" in r]
    print(f"\n8 runs of {args.steps} steps, {args.repeats} repeats each (mean ± sd of the sweep's wall time):")
    print(f"{'runs_per_task':>13} {'sbatch calls':>12} {'allocations':>11} {'wall time (s)':>15} {'÷ N=1':>7}")
    for n, rows in results.items():
        timed = [r for r in rows if "seconds" in r]
        if not timed:
            print(f"{n:>13}  refused: {rows[0]['refused']}")
            continue
        seconds = [r["seconds"] for r in timed]
        spread = statistics.stdev(seconds) if len(seconds) > 1 else 0.0
        ratio = statistics.mean(seconds) / statistics.mean(base) if base else float("nan")
        print(f"{n:>13} {timed[0]['submissions']:>12} {timed[0]['allocations']:>11} "
              f"{statistics.mean(seconds):>8.1f} ± {spread:<4.1f} {ratio:>7.2f}")


if __name__ == "__main__":
    main()
