"""A signal while a dataset is being prepared stops the command within seconds, as a cluster user or Ctrl-C
sends it (to the whole process group): exit 128 + signal, nothing trained, no half-built cache kept, and the
next launch prepares the data from the start."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import prewarmed

pytestmark = pytest.mark.xdist_group("heavy_data")  # a 24 MB corpus: one such test at a time

STARTED = b"tokenizing train"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A local TinyStories-like corpus whose tokenising takes seconds."""
    folder = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    words = "the cat sat on a mat and then it ran far away into the woods where nobody".split()
    for split, count in (("train", 150_000), ("validation", 1_000)):
        with open(folder / f"{split}.jsonl", "w") as out:
            out.writelines(json.dumps({"text": " ".join(rng.choices(words, k=30))}) + "\n" for _ in range(count))
    return folder


def _stopped(tmp_path, corpus, signum: int, *args: str) -> tuple[int, str, float]:
    """Start modula-sweep on the corpus, send ``signum`` to its process group once tokenising has begun; its exit
    status, everything it printed and the seconds from the signal to its exit."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-c", "import sys; sys.argv[0] = 'modula-sweep'; from modula_cli.cli import sweep; "
               "sweep()", "data=tinystories", f"data.source={corpus}", "data.tokenizer=byte",
               f"data.root={tmp_path / 'data'}", "train.steps=3", "train.progress=false", "data.num_proc=1", *args]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    seen, deadline = b"", time.monotonic() + 300
    while STARTED not in seen and time.monotonic() < deadline and process.poll() is None:
        seen += os.read(process.stdout.fileno(), 4096)
    assert STARTED in seen, seen.decode(errors="replace")[-2000:]
    os.killpg(process.pid, signum)
    sent = time.monotonic()
    rest, _ = process.communicate(timeout=120)
    return process.returncode, (seen + rest).decode(errors="replace"), time.monotonic() - sent


def _cache_left(tmp_path) -> list[str]:
    folder = tmp_path / "data" / "tinystories"
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []


def test_ctrl_c_while_tokenising_a_single_run_stops_it_at_once(tmp_path, corpus):
    status, out, seconds = _stopped(tmp_path, corpus, signal.SIGINT)
    assert status == 130 and seconds < 10, out[-2000:]
    assert "received SIGINT while preparing the data: stopping now" in out
    assert "stopped by SIGINT before the first step: nothing was trained" in out
    assert "Traceback" not in out and "completed" not in out
    assert _cache_left(tmp_path) == [] and not (tmp_path / "outputs").exists()


def test_sigterm_while_a_sweep_prepares_its_data_launches_nothing_and_a_relaunch_starts_over(tmp_path, corpus):
    sweep = ["-m", "optim.lr=0.1,0.2", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    status, out, seconds = _stopped(tmp_path, corpus, signal.SIGTERM, *sweep)
    assert status == 143 and seconds < 10, out[-2000:]
    assert "modula-sweep: sweep not launched, stopped by SIGTERM while preparing the data; nothing was trained" in out
    assert _cache_left(tmp_path) == [] and not (tmp_path / "sweep").exists()
    # the next launch builds the same cache from the start, and trains on it
    status, out = _launch(tmp_path, corpus, *sweep)
    assert status == 0 and "sweep finished: 2 completed" in out, out[-2000:]
    [cache] = _cache_left(tmp_path)
    meta = json.loads((tmp_path / "data" / "tinystories" / cache / "meta.json").read_text())
    assert meta["documents"]["train"] == 150_000


def _launch(tmp_path, corpus, *args: str) -> tuple[int, str]:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    result = prewarmed.run([sys.executable, "-m", "modula_cli.train", "data=tinystories", f"data.source={corpus}",
                             "data.tokenizer=byte", f"data.root={tmp_path / 'data'}", "train.steps=3",
                             "train.progress=false", "train.batch_size=4", "train.eval_batches=1", "arch.width=8",
                             "arch.depth=1", "arch.heads=2", "data.context=8", *args],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout + result.stderr
