"""The maintainer tools under scripts/ and the studies under docs/results/ run end to end at toy sizes, each
as its user runs it: a subprocess (their numbers live in docs/, not in tests). Tests import nothing from
scripts/: they are not part of the package."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import prewarmed

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
STUDIES = ROOT / "docs" / "results"


def run(script: Path, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return prewarmed.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_bench_prints_mode_ratios_per_variant_and_packed_speed_up():
    result = prewarmed.run(
        [sys.executable, str(SCRIPTS / "bench.py"), "--tables", "modes,pack", "--skip-gpt768", "--steps", "1",
         "--batch-size", "2", "--context", "8", "--pack", "2", "--repeats", "2", "--gpt-widths", "32",
         "--gpt-depth", "1", "--pack-widths", "16"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # arch, width, depth, optim, variant, 5 modes' ms, 4 ratios as "median [low, high]"
    mode_rows = [line.split() for line in lines if line.startswith(("resmlp", "gpt")) and len(line.split()) == 22]
    assert [row[:5] for row in mode_rows] == [[arch, width, depth, "adam", variant]
                                             for arch, width, depth in (("resmlp", "64", "8"), ("gpt", "32", "1"))
                                             for variant in ("modular", "paper")]
    for row in mode_rows:
        assert all(float(value) > 0 for value in row[5:10])
        for median, low, high in (row[10 + 3 * i: 13 + 3 * i] for i in range(4)):
            assert float(low.strip("[,")) <= float(median) <= float(high.strip("]"))
    compared = [line for line in lines if "paper ÷ modular step time:" in line]
    assert len(compared) == 2 and all(f"{mode} " in line for line in compared
                                      for mode in ("unnormed", "normed", "dualized", "manifold", "muon"))
    packed_rows = [line.split() for line in lines if line.rstrip().endswith("x")]
    assert [row[:2] for row in packed_rows] == [["resmlp", "64"], ["gpt", "16"]]
    # each variant's launches per update, with the limits its ratios are held to
    limits = [line for line in lines if "launches per update" in line]
    assert len(limits) == 4 and all("(no host sync)" in line and re.search(r"dualized/un limit \d+\.\d{3}", line)
                                    for line in limits)
    counts = [re.findall(r"(unnormed|normed|dualized|manifold|muon) (\d+)", line.split(";")[0]) for line in limits]
    assert all([mode for mode, _ in found] == ["unnormed", "normed", "dualized", "manifold", "muon"]
               and all(int(n) > 0 for _, n in found) for found in counts)


@pytest.mark.slow
def test_the_torch_loop_bench_times_the_tool_beside_a_bare_loop(tiny_text_root):
    result = prewarmed.run(
        [sys.executable, str(SCRIPTS / "bench_torch_loop.py"), "--width", "16", "--depth", "1", "--batch-size", "2",
         "--context", "8", "--steps", "6", "--warmup", "2", "--rounds", "2", "--data-root", str(tiny_text_root)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert [row[0] for row in rows] == ["0", "1"]
    for _, tool, bare, ratio in rows:
        assert float(tool) > 0 and float(bare) > 0  # the ratio of the rounded times, to its printed digits
        assert float(ratio) == pytest.approx(float(tool) / float(bare), rel=0.02, abs=1e-3)
    assert result.stdout.splitlines()[-1].startswith("tool ÷ bare: ")


@pytest.mark.slow
def test_the_loop_study_times_loop_and_step_per_variant(tiny_text_root):
    result = prewarmed.run(
        [sys.executable, str(STUDIES / "loop_overhead" / "bench_loop.py"), "--width", "16", "--depth", "1",
         "--batch-size", "2", "--context", "8", "--steps", "7", "--warmup", "2", "--repeats", "1",
         "--variants", "modular,paper", "--modes", "unnormed,normed"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "MODULA_DATA": str(tiny_text_root)})
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith(("loop", "step"))]
    assert [row[:2] for row in rows] == [[kind, variant] for kind in ("loop", "step")
                                         for variant in ("modular", "paper", "pap/mod")]
    for row in rows:
        values = [float(value) for value in row[2:]]
        assert len(values) == (2 if row[1] == "pap/mod" else 3) and all(value > 0 for value in values)
    bad = run(STUDIES / "loop_overhead" / "bench_loop.py", "--modes", "normed,unnormd")
    assert bad.returncode == 2 and "--modes: unknown ['unnormd']; allowed: unnormed, normed" in bad.stderr


def test_the_gpu_plan_refuses_an_unknown_stage_or_table_before_anything(tmp_path):
    script = SCRIPTS / "gpu_session.sh"
    for env, stage, message in (({"PLAN_TABLES": "modes bogus"}, "plan",
                                  "unknown PLAN_TABLES entry bogus; allowed: modes, mfu, pack, compile"),
                                 ({"PLAN_TABLES": "*"}, "plan", "unknown PLAN_TABLES entry *;"),
                                 ({}, "benchmark", "unknown stage benchmark; allowed: plan, tests, bench")):
        out = tmp_path / "out"
        result = subprocess.run(["bash", str(script), stage], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "OUT": str(out), **env})
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert not out.exists()  # refused before the install and before any file


def test_bench_rejects_an_unknown_table_or_variant():
    result = prewarmed.run([sys.executable, str(SCRIPTS / "bench.py"), "--tables", "modes,speed"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "unknown ['speed']" in result.stderr
    result = prewarmed.run([sys.executable, str(SCRIPTS / "bench.py"), "--variants", "paper,papr"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--variants: unknown ['papr']; allowed: modular, paper" in result.stderr


def _coord_folder(folder: Path, own_slope: float) -> Path:
    """The two files coord_summary.py reads, for two layers (an embedding and a matrix) and two modes."""
    import pandas as pd

    folder.mkdir()
    pd.DataFrame({"layer": ["e", "m"], "role": ["e", "m"], "kind": ["Embed", "Linear"]}).to_csv(
        folder / "coord.csv", index=False)
    rows = [("normed", "e", "delta_rms", 0.0), ("normed", "m", "delta_rms", -0.1),
            ("normed", "e", "own_delta_rms", 0.0), ("normed", "m", "own_delta_rms", 0.2),
            ("unnormed", "e", "delta_rms", -0.1), ("unnormed", "m", "delta_rms", 0.7),
            ("unnormed", "e", "own_delta_rms", 0.0), ("unnormed", "m", "own_delta_rms", own_slope)]
    pd.DataFrame(rows, columns=["mode", "layer", "quantity", "slope"]).to_csv(folder / "coord_slopes.csv", index=False)
    return folder


def test_coord_summary_over_seeds(tmp_path):
    folders = [_coord_folder(tmp_path / f"seed{i}", slope) for i, slope in enumerate((0.8, 1.0, 1.2))]
    result = prewarmed.run([sys.executable, str(SCRIPTS / "coord_summary.py"), *map(str, folders)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in result.stdout.splitlines() if line.startswith("| ") and "mode" not in line}
    assert rows["normed"] == ["3 of 3", "+0.10 [+0.10, +0.10]", "-0.10 [-0.10, -0.10]", "+0.20 [+0.20, +0.20]",
                              "+0.20 [+0.20, +0.20]"]
    assert rows["unnormed"][0] == "0 of 3" and rows["unnormed"][3] == "+1.00 [+0.80, +1.20]"
    missing = prewarmed.run([sys.executable, str(SCRIPTS / "coord_summary.py"), str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "no coord_slopes.csv" in missing.stderr


def test_bench_gpu_preset_runs_its_ortho_table_into_a_file(tmp_path):
    """Width-16 GPT, 3 blocks, 65 symbols: per block q, k, v, o (16×16), mlp in (64×16) and out (16×64), one
    65×16 output head; a polynomial step on an m×n matrix (m ≤ n) costs 2m²n + 2m³ + 2m²n FLOPs, 8 steps."""
    out = tmp_path / "bench.txt"
    result = run(SCRIPTS / "bench.py", "--gpu", "--tables", "ortho", "--gpt-widths", "16", "--context", "8",
                 "--tokens-per-step", "32", "--matmul-size", "256", "--device", "cpu", "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in out.read_text().splitlines() if line.startswith("    16")]
    assert [row[1] for row in rows] == ["16x16", "16x64", "64x16", "65x16", "all"]
    assert [int(row[2]) for row in rows[:-1]] == [12, 3, 3, 1]  # matrices of each shape
    by_hand = [12 * 8 * 6 * 16**3, 3 * 8 * (4 * 16 * 16 * 64 + 2 * 16**3), 3 * 8 * (4 * 16 * 16 * 64 + 2 * 16**3),
               8 * (4 * 16 * 16 * 65 + 2 * 16**3)]
    gflop = [float(row[3]) for row in rows[:-1]]
    assert gflop == pytest.approx([flops / 1e9 for flops in by_hand], rel=1e-2)
    assert sum(gflop) == pytest.approx(float(rows[-1][2]), rel=1e-2) == pytest.approx(6.496256e-3, rel=1e-2)
    assert all(float(row[-4]) > 0 and float(row[-2]) > 0 for row in rows)  # measured bf16-or-fp32 and fp32 ms
    bad = run(SCRIPTS / "bench.py", "--tokens-per-step", "100", "--context", "64")
    assert bad.returncode == 2 and "--tokens-per-step 100 is not a multiple of --context 64" in bad.stderr


def test_bench_retraction_table_times_each_tall_shape_and_the_pair(tmp_path):
    """Width-16 GPT, 3 blocks: its matrices by tall shape, 16×16 (q, k, v, o: 12), 64×16 (mlp in and out: 6),
    65×16 (the head); each row's ratios are its own times' (retract ÷ msign, and the pair's
    (msign + retract) ÷ 2 msign), and the "all" row sums the rows."""
    out = tmp_path / "bench.txt"
    result = run(SCRIPTS / "bench.py", "--tables", "retraction", "--gpt-widths", "16", "--context", "8",
                 "--device", "cpu", "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in out.read_text().splitlines() if line.startswith("    16")]
    assert [row[1] for row in rows] == ["16x16", "64x16", "65x16", "all"]
    assert [int(row[2]) for row in rows[:-1]] == [12, 6, 1]
    for row in rows:
        msign_ms, retract_ms, ratio, before, after, pair = map(float, row[-6:])
        assert ratio == pytest.approx(retract_ms / msign_ms, rel=0.05, abs=0.01)
        assert before == pytest.approx(2 * msign_ms, rel=0.05, abs=0.01)
        assert after == pytest.approx(msign_ms + retract_ms, rel=0.05, abs=0.01)
        assert pair == pytest.approx(after / before, rel=0.05, abs=0.01)
    assert float(rows[-1][-6]) == pytest.approx(sum(float(row[-6]) for row in rows[:-1]), abs=0.02)


def test_ortho_precision_emulates_bfloat16_like_the_cpu_kernel(tmp_path):
    import pandas as pd

    out = tmp_path / "precision.csv"
    result = run(STUDIES / "ortho_precision" / "ortho_precision.py", "--widths", "32", "--device", "cpu",
                 "--check-emulation", "32", "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(out).set_index("kind")
    assert list(table.index) == ["gaussian_square", "gaussian_1x4", "power_law"]
    assert (table.fp32_sigma_error.loc[["gaussian_1x4", "power_law"]] < 1e-4).all()
    assert table.bf16_sigma_error.between(1e-3, 2e-2).all()
    assert ((table.bf16_distance / table.cpu_bf16_distance).between(0.5, 2.0)).all()


def test_offline_wheels_cover_the_dependencies_but_not_the_cuda_stack(tmp_path):
    from importlib.metadata import version

    def listed(*args: str) -> dict[str, str]:
        result = run(SCRIPTS / "offline_wheels.py", "--list", *args)
        assert result.returncode == 0, result.stderr
        return dict(line.split("==") for line in result.stdout.splitlines())

    # the node's `pip freeze`: wandb as new as here (left out), hydra-core older (fetched anyway), pluggy by name
    present = tmp_path / "present.txt"
    present.write_text(f"wandb=={version('wandb')}\nhydra-core==0.1\n# a comment\npluggy\n")
    found = listed("--skip-present", str(present))
    assert {"hydra-core", "omegaconf", "antlr4-python3-runtime", "datasets", "pytest", "pytest-xdist"} <= set(found)
    assert not {"torch", "torchvision", "triton", "wandb", "pluggy"} & set(found)
    assert not any(name.startswith("nvidia-") for name in found)
    assert found["hydra-core"] == version("hydra-core")
    assert "pytest" not in listed("--extras")  # only the extras asked for
    wrong = run(SCRIPTS / "offline_wheels.py", "--list", "--extras", "gpu")
    assert wrong.returncode == 1 and "allowed: dev, hf, ray" in wrong.stderr


def _results(losses: dict[float, list[float]], diverged_lr: float | None = None, mode: str = "normed"):
    """A report's results.csv rows, width 32: ``losses[lr][seed]``; the seed-0 run at ``diverged_lr`` diverged."""
    import pandas as pd

    rows = [{"mode": mode, "width": 32, "lr": lr, "seed": seed, "train_loss": loss,
             "status": "diverged" if lr == diverged_lr and seed == 0 else "completed"}
            for lr, values in losses.items() for seed, loss in enumerate(values)]
    return pd.DataFrame(rows)


def test_compare_variants_pairs_each_seed_at_each_variants_best_lr(tmp_path):
    for name in ("modular", "paper"):
        (tmp_path / name).mkdir()
    _results({0.25: [2.0, 2.2, 2.1], 0.5: [2.3, 2.3, 2.3]}).to_csv(tmp_path / "modular" / "results.csv", index=False)
    # 1.0 has the lowest mean but diverged in one seed: not a candidate
    _results({0.5: [1.9, 2.0, 2.1], 1.0: [1.0, 1.0, 1.0]}, diverged_lr=1.0).to_csv(
        tmp_path / "paper" / "results.csv", index=False)
    result = run(STUDIES / "variants" / "compare_variants.py", str(tmp_path / "modular"), str(tmp_path / "paper"))
    assert result.returncode == 0, result.stderr
    # paired by seed: (−0.1, −0.2, 0.0), mean −0.1, half-width t(2) · sd / √3 = 4.30 · 0.1 / √3 = 0.248
    row = "| normed adam | 32 | 2^-2 → 2^-1 | 2.100 | 2.000 | -0.100 [-0.348, +0.148] |"
    assert result.stdout.splitlines()[2:] == [row]


def test_manifold_candidates_pairs_manifold_with_dualized_by_seed(tmp_path):
    import pandas as pd

    folder = tmp_path / "manifold_candidates_example" / "gpt_shakespeare_paper"
    folder.mkdir(parents=True)
    runs = [{"mode": "manifold", "width": width, "lr": lr, "seed": seed, "status": "completed",
             "train_loss": loss + 0.01 * seed}
            for width, best in ((32, 0.5), (64, 0.25)) for lr in (0.25, 0.5) for seed in range(3)
            for loss in [2.0 if lr == best else 2.5]]
    pd.DataFrame(runs).to_csv(folder / "results.csv", index=False)
    pd.DataFrame([{"mode": "manifold", "shift_log2": -1.0, "shift_log2_low": -1.5, "shift_log2_high": None,
                   "edges": "width 64 at the low edge"}]).to_csv(folder / "transfer.csv", index=False)
    dualized = tmp_path / "dualized"
    dualized.mkdir()
    pd.DataFrame([{"mode": "dualized", "width": w, "lr": 0.25, "seed": s, "status": "completed",
                   "train_loss": 1.9 + 0.02 * s} for w in (32, 64) for s in range(3)]).to_csv(
        dualized / "results.csv", index=False)
    result = run(STUDIES / "manifold" / "manifold_candidates.py", str(folder), "--dualized", str(dualized))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()[2:]
    # gaps by seed: 0.10, 0.09, 0.08 → mean 0.09, sd 0.01, half-width t(2)·0.01/√3 = 0.025
    assert lines[0] == "| example | 32 | 2^-1 | 2.010 ± 0.010 | 1.920 | +0.090 [+0.065, +0.115] |  |"
    assert lines[1].startswith("| example | 64 | 2^-2 |")
    assert lines[1].endswith("| -1.00 [-1.50, ?] (width 64 at the low edge) |")


@pytest.mark.parametrize("study", sorted(STUDIES.glob("*/*.py")), ids=lambda path: path.name)
def test_every_study_prints_its_usage(study):
    result = run(study, "--help")
    assert result.returncode == 0 and result.stdout.startswith(f"usage: {study.name}"), result.stderr


# Import machinery whose argument, if it names scripts/, would make a test depend on a maintainer tool
IMPORTERS = {"insert", "append", "extend", "run_path", "run_module", "spec_from_file_location", "import_module",
             "__import__", "SourceFileLoader"}
SCRIPTS_PATH = re.compile(r"(^|[/\\.])scripts($|[/\\.])", re.IGNORECASE)


def scripts_imports(source: str) -> list[str]:
    """The lines of a test module that import from scripts/: an import statement of ``scripts``, or an import
    machinery call (sys.path, runpy, importlib) whose arguments name scripts/, directly or through a name."""
    tree = ast.parse(source)
    strings = lambda node: [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    names = lambda node: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    # names bound, anywhere in the module, to a value that names scripts/ (or to such a name), to a fixed point
    tainted: set[str] = set()
    assignments = [(node.targets, node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)]
    while True:
        more = {target.id for targets, value in assignments for target in targets if isinstance(target, ast.Name)
                and (any(SCRIPTS_PATH.search(s) for s in strings(value)) or names(value) & tainted)} - tainted
        if not more:
            break
        tainted |= more
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hit = any(alias.name.split(".")[0] == "scripts" for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            hit = (node.module or "").split(".")[0] == "scripts"
        elif isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            arguments = [*node.args, *(k.value for k in node.keywords)]
            hit = called in IMPORTERS and any(any(SCRIPTS_PATH.search(s) for s in strings(a)) or names(a) & tainted
                                              for a in arguments)
        else:
            continue
        if hit:
            found.append(ast.get_source_segment(source, node))
    return found


def test_the_import_check_finds_each_way_of_importing_from_scripts():
    assert scripts_imports("from scripts.bench import load_arch") == ["from scripts.bench import load_arch"]
    assert scripts_imports("import scripts.bench as bench")
    assert scripts_imports("import sys\nsys.path.insert(0, 'scripts')")
    assert scripts_imports("HERE = Path(__file__).parent\nTOOLS = HERE.parent / 'scripts'\nsys.path.append(str(TOOLS))")
    assert scripts_imports("import runpy\nrunpy.run_path('scripts/bench.py')")
    assert scripts_imports("spec = importlib.util.spec_from_file_location('b', ROOT / 'scripts' / 'bench.py')")
    assert scripts_imports("importlib.import_module('scripts.bench')")
    # running a tool as its user does, or naming the folder in a message, is no import
    assert not scripts_imports("subprocess.run([sys.executable, str(ROOT / 'scripts' / 'bench.py')])")
    assert not scripts_imports("pytest.skip('scripts/cluster/up.sh starts one')\nsys.path.insert(0, str(ROOT))")


def test_no_test_imports_from_scripts():
    found = {path.name: hits for path in sorted(Path(__file__).parent.rglob("*.py"))
             if (hits := scripts_imports(path.read_text()))}
    assert not found, f"tests must not import from scripts/ (run the tool as a subprocess): {found}"


def test_search_replay_trains_the_bracket_of_a_grid_and_gives_the_grids_answer(tmp_path):
    # two widths, LRs 2^-4 … 2^0, three seeds; each width's valley is lowest at 2^-2 (the grid's middle)
    rows = [{"run": f"lr={2.0 ** k},seed={seed},width={width}", "arch": "gpt", "data": "shakespeare",
             "optimizer": "adam", "mode": "normed", "width": width, "lr": 2.0 ** k, "seed": seed,
             "status": "completed", "train_loss": 2.0 + 0.1 * (k + 2) ** 2 + 0.01 * seed + 0.001 * (k % 2),
             "wall_time_s": 10.0 * width / 32, "packed_with": 1}
            for width in (32, 64) for k in range(-4, 1) for seed in range(3)]
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)
    result = run(SCRIPTS / "search_replay.py", str(tmp_path / "results.csv"), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    # the bracket 2^-3, 2^-2, 2^-1 at each width: 9 of 15 runs each, and CPU 18·(10 + 20)/2 of 30·(10 + 20)/2
    assert "search 18 of 30 runs (60%), CPU 60% of the grid's" in result.stdout
    replay = pd.read_csv(tmp_path / "out" / "replay.csv")
    grid, search = replay.iloc[0], replay.iloc[1]
    assert grid["best_lr_per_scale"] == search["best_lr_per_scale"] == "0.25 0.25"
    assert grid["verdict"] == search["verdict"] and search["verdict"].startswith("transfers")
    per_scale = pd.read_csv(tmp_path / "out" / "per_scale.csv")
    assert list(per_scale["lrs"]) == ["0.125 0.25 0.5"] * 2


def test_mup_geometry_ratio_per_unit_lr_and_its_slope_by_hand(tmp_path):
    # μP's update at width w: c · w^s_role · its LR; dualized's: exactly its LR (× a share), three seeds with
    # a small per-seed factor. Per unit LR the ratio is c · w^s (slope s); at the tuned LRs it also carries
    # the LRs' ratio.
    lrs = {32: 2.0**-5, 64: 2.0**-4}
    exponent = {"hidden": 0.0, "output": 0.5}
    rows = [{"mode": mode, "width": width, "seed": seed, "step": step, "role": role,
             "update": (3.0 * width**exponent[role] * lrs[width] * (1 + 0.01 * seed) if mode == "mup"
                        else 0.5 * 0.25)}
            for mode in ("mup", "dualized") for width in lrs for seed in range(3) for step in (0, 20)
            for role in exponent]
    pd.DataFrame(rows).to_csv(tmp_path / "updates.csv", index=False)
    result = run(SCRIPTS / "mup_geometry.py", "--mup-lrs", "32=0.03125,64=0.0625", "--dualized-lr", "0.5",
                 "--summarise", str(tmp_path / "updates.csv"), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(tmp_path / "out" / "geometry.csv").set_index(["role", "width"])
    seeds = 1.01  # the mean of 1, 1.01, 1.02
    for role, s in exponent.items():
        for width, lr in lrs.items():
            assert table.loc[(role, width), "ratio"] == pytest.approx(3 * width**s * lr * seeds / 0.125, rel=1e-6)
            assert table.loc[(role, width), "ratio_per_lr"] == pytest.approx(3 * width**s * seeds / 0.25, rel=1e-6)
        assert table.loc[(role, 32), "slope_per_lr"] == pytest.approx(s, abs=1e-9)
    assert "| output |" in result.stdout and "+0.50 [+0.50, +0.50]" in result.stdout


@pytest.mark.slow
def test_default_lrs_trains_each_default_and_its_neighbours_on_photo_patches(tmp_path):
    """At toy size: the photo-patch data in CIFAR-10's layout, one packed run per combination, a row per LR with
    its seeds, divergences and loss, the default marked; the LR is the mode's own default for the ResMLP under
    variant=modular (2^-7 for plain SGD) times 2^k."""
    from PIL import Image

    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (80, 96, 3), dtype=np.uint8)).save(photos / f"p{i}.png")
    result = run(SCRIPTS / "default_lrs.py", "--archs", "resmlp", "--optimizers", "sgd", "--modes", "unnormed",
                 "--variants", "modular", "--offsets", "-1", "0", "--seeds", "2", "--steps", "3", "--threads", "1",
                 "--photos", str(photos), "--out", str(tmp_path / "out"), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "image networks on photo patches (2 photographs of" in result.stdout
    rows = pd.read_json(tmp_path / "out" / "default_lrs.jsonl", lines=True)
    assert list(rows["lr"]) == [2.0**-8, 2.0**-7] and list(rows["default"]) == [False, True]
    assert (rows["seeds"] == 2).all() and (rows["steps"] == 3).all() and rows["loss_mean"].notna().all()
    assert "resmlp        sgd  unnormed  modular 2^-7* diverged 0/2" in result.stdout


def test_depth_study_gives_the_branch_and_update_exponents_of_each_depth_rule(tmp_path):
    """The modular GPT's branch is 1/(2L) and its dualized block updates do not change with depth; CompleteP's
    branch is 2/L (base depth 2) with updates of one size; Depth-μP's (2/L)^½ with updates ∝ L^-½."""
    result = run(SCRIPTS / "depth_study.py", "--out", str(tmp_path), "--depths", "2", "4", "--width", "16")
    assert result.returncode == 0, result.stderr
    frame = pd.read_csv(tmp_path / "study.csv")
    means = frame.groupby(["series", "depth"])[["branch", "update_spectral"]].mean()
    expected = {"modular GPT, dualized": (1 / 4, 1 / 8, 1.0), "standard GPT, μP + CompleteP": (1, 1 / 2, 1.0),
                "standard GPT, μP + Depth-μP": (1, 2**-0.5, 2**-0.5)}
    for series, (branch2, branch4, update_ratio) in expected.items():
        assert means.loc[(series, 2), "branch"] == pytest.approx(branch2)
        assert means.loc[(series, 4), "branch"] == pytest.approx(branch4)
        ratio = means.loc[(series, 4), "update_spectral"] / means.loc[(series, 2), "update_spectral"]
        assert ratio == pytest.approx(update_ratio, rel=0.02), series
    assert "| modular GPT, dualized | -1.000 | " in (tmp_path / "study.md").read_text()
    refused = run(SCRIPTS / "depth_study.py", "--out", str(tmp_path), "--depths", "1", "4")
    assert refused.returncode == 2 and "--depths 1 4: at least two different depths, each 2 or more" in refused.stderr
