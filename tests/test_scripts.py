"""The benchmark scripts run end to end at toy sizes (their numbers live in docs/, not in tests)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.mark.slow
def test_bench_prints_mode_ratios_and_packed_speed_up():
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench.py"), "--tables", "modes,pack", "--skip-gpt768", "--steps", "1",
         "--batch-size", "2", "--context", "8", "--pack", "2"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    mode_rows = [line.split() for line in lines if line.startswith(("resmlp", "gpt")) and len(line.split()) == 11]
    assert [row[:2] for row in mode_rows] == [["resmlp", "64"], ["gpt", "128"]]  # 4 modes' ms and 3 ratios
    assert all(float(value) > 0 for row in mode_rows for value in row[4:])
    packed_rows = [line.split() for line in lines if line.rstrip().endswith("x")]
    assert [row[:2] for row in packed_rows] == [["resmlp", "64"], ["gpt", "32"]]


def test_bench_rejects_an_unknown_table():
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench.py"), "--tables", "modes,speed"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "unknown ['speed']" in result.stderr


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
    result = subprocess.run([sys.executable, str(SCRIPTS / "coord_summary.py"), *map(str, folders)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in result.stdout.splitlines() if line.startswith("| ") and "mode" not in line}
    assert rows["normed"] == ["3 of 3", "+0.10 [+0.10, +0.10]", "-0.10 [-0.10, -0.10]", "+0.20 [+0.20, +0.20]",
                              "+0.20 [+0.20, +0.20]"]
    assert rows["unnormed"][0] == "0 of 3" and rows["unnormed"][3] == "+1.00 [+0.80, +1.20]"
    missing = subprocess.run([sys.executable, str(SCRIPTS / "coord_summary.py"), str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "no coord_slopes.csv" in missing.stderr


def _script(name: str):
    """A script under scripts/ imported as a module (they are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_orthogonalisation_flops_of_a_gpt_by_hand():
    """Width-16 GPT, 3 blocks, 65 symbols: per block q, k, v, o (16×16), mlp in (64×16) and out (16×64), one
    65×16 output head; a polynomial step on an m×n matrix (m ≤ n) costs 2m²n + 2m³ + 2m²n FLOPs."""
    from omegaconf import OmegaConf

    from modula_cli.models import build_model

    bench = _script("bench")
    net = build_model(OmegaConf.create(bench.load_arch("gpt", width=16, heads=2)), bench.fake_data("gpt", 8))
    groups = bench.ortho_groups(net, net.initialize(0))
    assert groups == {(16, 16): 12, (64, 16): 3, (16, 64): 3, (65, 16): 1}
    per_step = 12 * 6 * 16**3 + 6 * (4 * 16 * 16 * 64 + 2 * 16**3) + (4 * 16 * 16 * 65 + 2 * 16**3)
    assert sum(bench.ortho_flops(s, c) for s, c in groups.items()) == 8 * per_step
    # a square d × d matrix alone: the dualize overhead is steps · d / tokens
    assert bench.ortho_flops((16, 16), 1) / (6 * 16 * 16 * 512) == pytest.approx(8 * 16 / 512)


def test_bench_gpu_preset_runs_its_ortho_table_into_a_file(tmp_path):
    out = tmp_path / "bench.txt"
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench.py"), "--gpu", "--tables", "ortho", "--gpt-widths", "16",
         "--context", "8", "--tokens-per-step", "32", "--matmul-size", "256", "--device", "cpu", "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in out.read_text().splitlines() if line.startswith("    16")]
    assert [row[1] for row in rows] == ["16x16", "16x64", "64x16", "65x16", "all"]
    gflop = [float(row[3]) for row in rows[:-1]]
    assert sum(gflop) == pytest.approx(float(rows[-1][2]), rel=1e-2) == pytest.approx(6.496256e-3, rel=1e-2)
    assert all(float(row[-4]) > 0 and float(row[-2]) > 0 for row in rows)  # measured bf16-or-fp32 and fp32 ms
    bad = subprocess.run([sys.executable, str(SCRIPTS / "bench.py"), "--tokens-per-step", "100", "--context", "64"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--tokens-per-step 100 is not a multiple of --context 64" in bad.stderr


def test_ortho_precision_emulates_bfloat16_like_the_cpu_kernel(tmp_path):
    import pandas as pd

    out = tmp_path / "precision.csv"
    result = subprocess.run([sys.executable, str(SCRIPTS / "ortho_precision.py"), "--widths", "32", "--device", "cpu",
                             "--check-emulation", "32", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(out).set_index("kind")
    assert list(table.index) == ["gaussian_square", "gaussian_1x4", "power_law"]
    assert (table.fp32_sigma_error.loc[["gaussian_1x4", "power_law"]] < 1e-4).all()
    assert table.bf16_sigma_error.between(1e-3, 2e-2).all()
    assert ((table.bf16_distance / table.cpu_bf16_distance).between(0.5, 2.0)).all()


def test_offline_wheels_cover_the_dependencies_but_not_the_cuda_stack():
    wheels = _script("offline_wheels")
    found = wheels.closure({"dev"}, skip={"wandb"})
    assert {"hydra-core", "omegaconf", "antlr4-python3-runtime", "datasets", "pytest", "pytest-xdist"} <= set(found)
    assert not {"torch", "torchvision", "triton", "wandb"} & set(found)
    assert not any(name.startswith("nvidia-") for name in found)
    assert found["hydra-core"] == __import__("importlib.metadata").metadata.version("hydra-core")
    assert "pytest" not in wheels.closure(set(), skip=set())  # only the extras asked for
    with pytest.raises(SystemExit, match="allowed: dev, ray"):
        wheels.closure({"gpu"}, skip=set())


def test_compare_variants_pairs_each_seed_at_each_variants_best_lr():
    import pandas as pd

    sys.path.insert(0, str(SCRIPTS))
    from compare_variants import compare

    def results(losses: dict[float, list[float]], diverged_lr: float | None = None) -> pd.DataFrame:
        rows = [{"mode": "normed", "width": 32, "lr": lr, "seed": seed, "train_loss": loss,
                 "status": "diverged" if lr == diverged_lr and seed == 0 else "completed"}
                for lr, values in losses.items() for seed, loss in enumerate(values)]
        return pd.DataFrame(rows)

    modular = results({0.25: [2.0, 2.2, 2.1], 0.5: [2.3, 2.3, 2.3]})
    # 1.0 has the lowest mean but diverged in one seed: not a candidate
    paper = results({0.5: [1.9, 2.0, 2.1], 1.0: [1.0, 1.0, 1.0]}, diverged_lr=1.0)
    row = compare(modular, paper).iloc[0]
    assert (row.lr_modular, row.lr_paper) == (0.25, 0.5)
    assert row.difference == pytest.approx(-0.1)  # (−0.1, −0.2, 0.0) paired by seed
    half = 4.30 * 0.1 / 3**0.5  # t(2) · sd / √3
    assert (row.low, row.high) == (pytest.approx(-0.1 - half), pytest.approx(-0.1 + half))


def test_manifold_candidates_pairs_manifold_with_dualized_by_seed(tmp_path):
    import pandas as pd

    sys.path.insert(0, str(SCRIPTS))
    from manifold_candidates import rows

    folder = tmp_path / "manifold_candidates_example" / "gpt_shakespeare_paper"
    folder.mkdir(parents=True)
    runs = [{"mode": "manifold", "width": width, "lr": lr, "seed": seed, "status": "completed",
             "train_loss": loss + 0.01 * seed}
            for width, best in ((32, 0.5), (64, 0.25)) for lr in (0.25, 0.5) for seed in range(3)
            for loss in [2.0 if lr == best else 2.5]]
    pd.DataFrame(runs).to_csv(folder / "results.csv", index=False)
    pd.DataFrame([{"mode": "manifold", "shift_log2": -1.0, "shift_log2_low": -1.5, "shift_log2_high": None,
                   "edges": "width 64 at the low edge"}]).to_csv(folder / "transfer.csv", index=False)
    dualized = pd.DataFrame([{"width": w, "seed": s, "train_loss": 1.9 + 0.02 * s} for w in (32, 64) for s in range(3)])
    lines = rows(folder, dualized)
    # gaps by seed: 0.10, 0.09, 0.08 → mean 0.09, sd 0.01, half-width t(2)·0.01/√3 = 0.025
    assert lines[0] == "| example | 32 | 2^-1 | 2.010 ± 0.010 | 1.920 | +0.090 [+0.065, +0.115] |  |"
    assert lines[1].startswith("| example | 64 | 2^-2 |")
    assert lines[1].endswith("| -1.00 [-1.50, ?] (width 64 at the low edge) |")
