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
    mode_rows = [line.split() for line in lines if line.startswith(("resmlp", "gpt")) and len(line.split()) == 9]
    assert [row[:2] for row in mode_rows] == [["resmlp", "64"], ["gpt", "128"]]
    assert all(float(value) > 0 for row in mode_rows for value in row[4:])
    packed_rows = [line.split() for line in lines if line.rstrip().endswith("x")]
    assert [row[:2] for row in packed_rows] == [["resmlp", "64"], ["gpt", "32"]]


def test_bench_rejects_an_unknown_table():
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench.py"), "--tables", "modes,speed"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "unknown ['speed']" in result.stderr
