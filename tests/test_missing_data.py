"""Missing data, offline: every dataset, the coordinate check and a user's architecture stop with one line (no
traceback) and leave no run folder behind; a sweep records such runs as failed, one line each; prepared data
is used without the network. ``modula-prepare-data``, the command those lines name, gets the data ahead of time."""

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import tiktoken
from omegaconf import OmegaConf

from helpers import REPO, TINY_TRAIN, compose_config, tiny_gpt
from modula_cli.data import DataUnavailable, build_dataset, prepare_dataset
from modula_cli.models import ModelError, build_model
from modula_cli.run.trainer import train
from modula_cli.config.validate import config_problems
import prewarmed

BIN = Path(sys.executable).parent  # the console scripts a user runs, installed beside this Python
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "my_mlp"
REFUSING_PROXY = "http://127.0.0.1:9"  # nothing listens on the discard port: every download is refused at once


def offline_env(tmp_path: Path) -> dict[str, str]:
    """A user's environment without network, on any machine: downloads go through a proxy that refuses them,
    the Hugging Face and tiktoken caches are empty. No HF_*_OFFLINE switch: the code must find out itself."""
    dropped = {"no_proxy", "hf_hub_offline", "hf_datasets_offline", "transformers_offline", "modula_data"}
    env = {k: v for k, v in os.environ.items() if k.lower() not in dropped}
    env.update({key: REFUSING_PROXY for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")})
    env.update(HF_HOME=str(tmp_path / "hf-home"), TIKTOKEN_CACHE_DIR=str(tmp_path / "tiktoken-cache"))
    return env


def run_tool(tool: str, cwd: Path, *args: str) -> tuple[int, list[str]]:
    """Exit code and the non-blank lines of stdout and stderr together (besides the error, at most an
    informational line such as how many CPU threads the run would use)."""
    cwd.mkdir(parents=True, exist_ok=True)
    result = prewarmed.run([str(BIN / tool), *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                            env=offline_env(cwd.parent))
    return result.returncode, [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


@pytest.mark.parametrize("overrides, missing", [
    (["data=shakespeare"], "{root}/shakespeare/input.txt is missing and could not be downloaded"),
    (["data=tinystories"], "no prepared tokens in {root}/tinystories/gpt2-"),  # the tokenizer fails first
    (["data=tinystories", "data.tokenizer=byte"], "the hub dataset 'roneneldan/TinyStories' could not be loaded"),
    (["data=openwebtext"], "no prepared tokens in {root}/openwebtext/gpt2-"),
    (["data=cifar10", "arch=resmlp"], "{root}/cifar10/cifar-10-python.tar.gz (or its extracted"),
], ids=["shakespeare", "tinystories", "tinystories-hub", "openwebtext", "cifar10"])
def test_a_run_without_its_data_says_so_in_one_line_and_leaves_nothing(tmp_path, overrides, missing):
    root = tmp_path / "empty-data"
    root.mkdir()
    code, lines = run_tool("modula-sweep", tmp_path / "work", *overrides, f"data.root={root}", "train.steps=5",
                           "train.device=cpu")
    said = [line for line in lines if "data=" in line]
    assert code != 0 and len(lines) <= 2 and len(said) == 1 and not any("Traceback" in line for line in lines), lines
    assert said[0].startswith("modula-sweep: data=") and missing.format(root=root) in said[0]
    assert f"`modula-prepare-data {overrides[0].removeprefix('data=')}`" in said[0]  # how to fix
    assert not (tmp_path / "work" / "outputs").exists()  # no run folder, and no empty parents of one


def test_coordinate_check_without_its_data_says_so_in_one_line_and_leaves_nothing(tmp_path):
    """The user's report: from examples/my_mlp, modula-coord-check on CIFAR-10 that is not there."""
    folder = tmp_path / "my_mlp"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    code, lines = run_tool("modula-coord-check", folder, "--config-dir", "configs", "arch=my_mlp", "data=cifar10",
                           f"data.root={tmp_path / 'empty-data'}", "train.device=cpu")
    said = [line for line in lines if "data=" in line]
    assert code != 0 and len(lines) <= 2 and len(said) == 1 and not any("Traceback" in line for line in lines), lines
    assert said[0].startswith("modula-coord-check: data=cifar10: ") and "cifar-10-python.tar.gz" in said[0]
    outputs = folder / "outputs"
    assert not files_under(outputs)
    assert not [p for p in outputs.rglob("*") if len(p.relative_to(outputs).parts) > 2]  # no run folder


ALLOWED = "shakespeare, tinystories, openwebtext, cifar10, tokens, text_files, hf_dataset, image_folder"


def test_prepare_data_lists_the_datasets_and_rejects_a_mistyped_one_in_one_line(tmp_path):
    code, lines = run_tool("modula-prepare-data", tmp_path, "--help")
    assert code == 0 and lines[0] == "usage: modula-prepare-data [-h] DATASET [data.KEY=VALUE ...]", lines
    assert " ".join(lines).endswith(f"datasets: {ALLOWED}")  # the epilog, wrapped as the terminal is wide
    code, lines = run_tool("modula-prepare-data", tmp_path, "imagenet")
    assert (code, lines) == (2, [f"modula-prepare-data: unknown dataset 'imagenet'; allowed: {ALLOWED}"])
    code, lines = run_tool("modula-prepare-data", tmp_path, "shakespeare", "data.rooot=/somewhere")
    assert (code, lines) == (2, ["modula-prepare-data: unknown option data.rooot for shakespeare; allowed: "
                                 "data.root, data.source, data.context, data.max_context"])


def test_prepare_data_offline_says_what_is_missing_in_one_line(tmp_path):
    root = tmp_path / "empty-data"
    code, lines = run_tool("modula-prepare-data", tmp_path / "work", "shakespeare", f"data.root={root}")
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"modula-prepare-data: data=shakespeare: {root}/shakespeare/input.txt is missing")


def test_prepared_data_is_what_a_run_then_uses(tmp_path, tiny_text_root):
    code, lines = run_tool("modula-prepare-data", tmp_path / "login", "shakespeare", f"data.root={tiny_text_root}",
                           "data.context=16")
    assert code == 0 and lines[0].startswith("shakespeare: vocab ") and "context 16" in lines[0], lines
    tokens = tiny_text_root / "shakespeare" / "prepared-char" / "train.bin"
    written = tokens.stat().st_mtime_ns
    dataset = build_dataset("shakespeare", root=str(tiny_text_root), context=16)  # as a run reads it
    assert tokens.stat().st_mtime_ns == written and f"metadata: {dataset.meta}" == lines[1]  # found, not rebuilt


def test_the_example_mlp_trains_on_language_data_and_passes_the_coordinate_check(tmp_path, tiny_text_root):
    """my_mlp takes both kinds of data: on text, a token embedding and next-token logits per position."""
    folder = tmp_path / "my_mlp"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    data = ["data=shakespeare", f"data.root={tiny_text_root}", "data.context=16", "arch.width=16"]
    code, lines = run_tool("modula-sweep", folder, "--config-dir", "configs", "arch=my_mlp", *data,
                           "train.steps=5", "hydra.run.dir=run", *TINY_TRAIN)
    assert code == 0, lines
    summary = json.loads((folder / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps_done"] == 6  # and the paper variant's extra one
    code, lines = run_tool("modula-coord-check", folder, "--config-dir", "configs", "arch=my_mlp", *data,
                           "coord.widths=[16,32]", "coord.modes=[normed]", "coord.steps=2", "train.device=cpu",
                           "hydra.run.dir=coord")
    assert code == 0, lines
    assert not any("Traceback" in line or "AttributeError" in line for line in lines)
    assert (folder / "coord" / "coord.csv").is_file()


def test_a_sweep_without_its_data_is_not_launched_and_says_so_in_one_line(tmp_path):
    root = tmp_path / "empty-data"
    root.mkdir()
    sweep = tmp_path / "work" / "sweep"
    code, lines = run_tool("modula-sweep", tmp_path / "work", "-m", f"data.root={root}", "optim.lr=0.125,0.25",
                           "train.steps=5", "train.device=cpu", f"hydra.sweep.dir={sweep}")
    assert code != 0 and not any("Traceback" in line for line in lines), lines
    said = [line for line in lines if "shakespeare/input.txt is missing" in line]
    assert len(said) == 1 and said[0].startswith("modula-sweep: sweep not launched"), lines  # once, before launch
    assert not sweep.exists() or not [p for p in sweep.iterdir() if p.is_dir()]  # no job started


# --- in-process: what each dataset does without its data, and with it prepared ------------------------------

def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for split in ("train", "validation"):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": f"{split} story {i}."}) + "\n"
                                                       for i in range(20)))
    return folder


def test_prepared_text_needs_neither_the_tokenizer_nor_the_source(tmp_path, monkeypatch):
    """A compute node with the prepared tokens but no network, no tiktoken cache and no source folder."""
    corpus = write_corpus(tmp_path / "corpus")
    options = dict(source=str(corpus), tokenizer="byte", root=str(tmp_path / "root"), num_proc=1, context=8)
    prepare_dataset("tinystories", name="tinystories", max_context=8192, **options)  # config-only keys are ignored
    shutil.rmtree(corpus)
    corpus.mkdir()
    monkeypatch.setattr("modula_cli.data.text.get_tokenizer", lambda name: pytest.fail("tokenizer loaded"))
    prepare_dataset("tinystories", **options)
    assert len(build_dataset("tinystories", **options).val) == sum(len(f"validation story {i}.") + 1
                                                                    for i in range(20))


def test_prepare_dataset_does_not_load_images(cifar_root, monkeypatch):
    # the package re-exports a function of the module's name, so reach the module itself
    monkeypatch.setattr(sys.modules["modula_cli.data.cifar10"], "_read_batches", lambda *a: pytest.fail("loaded"))
    prepare_dataset("cifar10", root=str(cifar_root))


def test_local_source_without_a_split_is_one_line(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    (corpus / "validation.jsonl").unlink()
    with pytest.raises(DataUnavailable) as error:
        build_dataset("tinystories", source=str(corpus), tokenizer="byte", root=str(tmp_path / "root"))
    assert str(error.value).startswith(f"data=tinystories: {corpus} has no validation file; put train.* ")


def test_unreachable_hub_is_one_line_and_restores_the_offline_switches(tmp_path, monkeypatch):
    import datasets
    from huggingface_hub import constants

    before = (constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE)
    monkeypatch.setattr("modula_cli.data.text.reachable", lambda url: False)
    with pytest.raises(DataUnavailable) as error:
        build_dataset("openwebtext", source="nobody-here/no-such-dataset", tokenizer="byte", root=str(tmp_path))
    assert str(error.value).startswith(f"data=openwebtext: no prepared tokens in {tmp_path}/openwebtext/byte-")
    assert ("the hub dataset 'nobody-here/no-such-dataset' could not be loaded (huggingface.co cannot be reached "
            "and it is not in the Hugging Face cache); run `modula-prepare-data openwebtext`") \
        in str(error.value)
    assert (constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE) == before
    assert not list((tmp_path / "openwebtext").glob("byte-*/"))  # no half-built cache


@pytest.mark.parametrize("switch", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_an_offline_switch_the_user_set_is_named_and_the_hub_is_not_tried(tmp_path, monkeypatch, switch):
    """As an air-gapped cluster user sets it: the libraries read the switch at import, so it is set where they
    keep it; the line names the switch that was set, and no connection is tried."""
    import datasets
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", switch == "HF_HUB_OFFLINE")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", switch == "HF_HUB_OFFLINE")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", switch == "HF_DATASETS_OFFLINE")
    monkeypatch.setattr("modula_cli.data.text.reachable", lambda url: pytest.fail("tried the hub"))
    with pytest.raises(DataUnavailable) as error:
        build_dataset("openwebtext", source="nobody-here/no-such-dataset", tokenizer="byte", root=str(tmp_path))
    assert f"could not be loaded ({switch} is set and it is not in the Hugging Face cache)" in str(error.value)


def test_the_callers_environment_does_not_reach_the_tests(tmp_path):
    """What a user's shell leaves set (an air-gapped cluster's offline switches, a W&B mode, a SLURM job's or a
    Ray driver's variables, a thread count) changes no test's outcome: tests that read each of them pass with
    all of them set (conftest.py clears them for the suite)."""
    caller = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "RAY_ADDRESS": "127.0.0.1:1",
              "SLURM_JOB_ID": "77", "SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "3", "SLURM_CPUS_PER_TASK": "5",
              "OMP_NUM_THREADS": "3", "HYDRA_FULL_ERROR": "1"}
    selected = ["tests/test_missing_data.py::test_unreachable_hub_is_one_line_and_restores_the_offline_switches",
                "tests/test_train.py::test_wandb_offline_and_wandb_failure_never_stop_training",
                "tests/test_threads.py"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *selected],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, **caller}, timeout=300)
    assert done.returncode == 0 and " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-3000:]


def test_missing_tokenizer_files_are_one_line(tmp_path, monkeypatch):
    def offline(name):
        try:
            raise OSError("[Errno -2] Name or service not known")
        except OSError as cause:
            raise requests.ConnectionError("Max retries exceeded with url: /gpt-2/encodings/main/vocab.bpe") \
                from cause

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(DataUnavailable) as error:
        build_dataset("tinystories", source=str(write_corpus(tmp_path / "corpus")), root=str(tmp_path / "root"))
    message = str(error.value)
    assert "\n" not in message and "the gpt2 tokenizer files are neither in tiktoken's cache" in message
    assert "(OSError: [Errno -2] Name or service not known)" in message  # the root cause, not the wrappers
    assert message.endswith("(data.tokenizer=byte downloads nothing)")


def test_corrupt_cifar_archive_is_one_line(tmp_path):
    (tmp_path / "cifar10").mkdir()
    (tmp_path / "cifar10" / "cifar-10-python.tar.gz").write_bytes(b"not an archive")
    with pytest.raises(DataUnavailable, match=r"^data=cifar10: .*cifar-10-python.tar.gz does not have the md5"):
        prepare_dataset("cifar10", root=str(tmp_path))


# --- runs: nothing written before the data is there; the skip message names the right knob ------------------

def test_a_sweep_run_without_data_is_recorded_as_failed_and_a_single_run_writes_nothing(tmp_path):
    cfg = compose_config(*tiny_gpt(tmp_path / "empty-data", "train.steps=3"))
    with pytest.raises(DataUnavailable):
        train(cfg, tmp_path / "single")
    assert not (tmp_path / "single").exists()
    with pytest.raises(DataUnavailable):
        train(cfg, tmp_path / "sweep" / "lr=0.25", sweep_dir=tmp_path / "sweep")
    summary = json.loads((tmp_path / "sweep" / "lr=0.25" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("DataUnavailable: data=shakespeare: ")


def test_skip_message_names_the_rerun_knob_of_its_context(tmp_path, tiny_text_root, caplog):
    """A single run says it skipped; in a sweep, which counts its finished runs at its start and at its end, the
    line is only there for debugging (docs/usage.md: finished runs are skipped quietly)."""
    cfg = compose_config(*tiny_gpt(tiny_text_root, "train.steps=2"))
    train(cfg, tmp_path / "run")
    with caplog.at_level(logging.DEBUG, logger="modula_cli.run.claim"):
        assert train(cfg, tmp_path / "run").skipped
        assert train(cfg, tmp_path / "run", sweep_dir=tmp_path).skipped
    skips = [(r.levelno, r.getMessage()) for r in caplog.records if "already finished" in r.getMessage()]
    assert skips == [(logging.INFO, "run already finished; skipping (train.rerun=true retrains)"),
                     (logging.DEBUG, "run already finished; skipping (sweep.rerun=true retrains)")]


# --- a user's architecture and the kind of data it reads -----------------------------------------------------

USER_MODELS = '''
import math
from modula_cli.nn import Flatten, Linear

def image_only(arch, data):
    assert "data_kind" not in arch, "data_kind reached the builder"
    return Linear(data.num_classes, arch.width) @ Linear(arch.width, math.prod(data.input_shape)) @ Flatten()
'''


@pytest.fixture
def user_models(tmp_path, monkeypatch):
    (tmp_path / "user_models.py").write_text(USER_MODELS)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("user_models", None)


def test_a_declared_data_kind_is_checked_before_launch_and_not_passed_on(user_models, cifar_root):
    declared = ["arch.name=user_models:image_only", "arch.width=8", "+arch.data_kind=image", "train.device=cpu"]
    cfg = compose_config(*declared, "data=shakespeare")
    assert [p for p in config_problems(cfg) if p.startswith("arch")] == [
        "arch=user_models:image_only needs an image dataset (cifar10, image_folder), got data=shakespeare"]
    cfg = compose_config(*declared, "data=cifar10", f"data.root={cifar_root}")
    assert not config_problems(cfg)
    assert build_model(cfg.arch, build_dataset("cifar10", root=str(cifar_root), augment="none"))
    wrong = compose_config(*declared[:2], "+arch.data_kind=images")
    assert "arch.data_kind='images'; allowed: language, image (or leave it out: the architecture takes both)" \
        in config_problems(wrong)
    for arch in ("gpt", "standard_gpt", "resmlp", "resnet"):  # fingerprints of built-in runs stay as they were
        assert "data_kind" not in compose_config(f"arch={arch}").arch


def test_an_undeclared_builder_failing_on_the_other_kind_is_one_line(user_models, tiny_text_root):
    arch = OmegaConf.create({"name": "user_models:image_only", "width": 8})
    with pytest.raises(ModelError) as error:
        build_model(arch, build_dataset("shakespeare", root=str(tiny_text_root), context=8))
    assert str(error.value) == (
        "arch.name='user_models:image_only' failed to build for data=shakespeare (language data): AttributeError: "
        "'TokenDataset' object has no attribute 'num_classes'; if it reads only image data, declare data_kind: "
        "image in its YAML")


def test_a_finished_sweep_relaunched_without_its_data_still_reports(tmp_path, tiny_text_root):
    sweep = tmp_path / "sweep"
    args = ["arch.width=8", "arch.depth=1", "arch.heads=2", "data.context=8", "train.steps=3",
            "train.batch_size=4", "train.eval_batches=1", "optim.lr=0.125,0.25", "train.device=cpu",
            f"hydra.sweep.dir={sweep}"]
    code, lines = run_tool("modula-sweep", tmp_path / "work", "-m", f"data.root={tiny_text_root}", *args)
    assert code == 0, lines
    (tiny_text_root / "shakespeare" / "input.txt").unlink()  # the data is gone (a node without it)
    code, lines = run_tool("modula-sweep", tmp_path / "work", "-m", f"data.root={tiny_text_root}", *args)
    assert code == 0 and any("0 completed, 2 skipped" in line for line in lines), lines
