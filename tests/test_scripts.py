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
