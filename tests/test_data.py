"""Datasets on generated data in the real on-disk formats, plus the real Shakespeare text when present."""

import json
import multiprocessing
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from modula_cli.data import DATASETS, DataUnavailable, build_dataset
from modula_cli.data.storage import REPO_DATA, data_root, prepare_once
from modula_cli.plumbing import environment
from modula_cli.data.tokenizers import byte_encoding

def test_real_shakespeare_facts(tmp_path, real_shakespeare):
    (tmp_path / "shakespeare").mkdir()
    shutil.copy(real_shakespeare, tmp_path / "shakespeare" / "input.txt")
    data = build_dataset("shakespeare", root=str(tmp_path), context=128)
    assert data.vocab_size == 65
    assert (len(data.train), len(data.val)) == (1_003_854, 111_540)
    vocab = json.loads((tmp_path / "shakespeare" / "prepared-char" / "vocab.json").read_text())
    text = real_shakespeare.read_text()
    assert "".join(vocab[i] for i in data.train[:40]) == text[:40]
    assert "".join(vocab[i] for i in data.val[-20:]) == text[-20:]


def test_the_real_text_is_looked_for_where_a_run_reads_it_and_nowhere_else(tmp_path, monkeypatch):
    """$MODULA_DATA, else the repository's data/ (data.root's default, README "Data"); never a folder beside the
    clone, which a newcomer does not have. The skip names the place, and is a failure where the text is required
    (CI's second pass)."""
    import helpers

    monkeypatch.setenv("MODULA_DATA", str(tmp_path / "data"))
    assert helpers.shakespeare_candidates() == [tmp_path / "data" / "shakespeare" / "input.txt"]
    monkeypatch.delenv("MODULA_DATA")
    assert helpers.shakespeare_candidates() == [REPO_DATA / "shakespeare" / "input.txt"]
    beside = tmp_path / "shared" / "data" / "shakespeare"  # a sibling "shared" folder with the text is not looked at
    beside.mkdir(parents=True)
    (beside / "input.txt").write_text("First Citizen:\n")
    monkeypatch.setattr(helpers, "REPO", tmp_path / "repo")
    monkeypatch.setenv("MODULA_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("MODULA_DATA_TESTS", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        helpers.require_shakespeare()
    assert str(skipped.value.msg) == f"needs Shakespeare's input.txt; looked in {tmp_path}/data/shakespeare/input.txt"
    monkeypatch.setenv("MODULA_DATA_TESTS", "required")  # CI: the same line fails the test instead
    with pytest.raises(pytest.fail.Exception) as failed:
        helpers.require_shakespeare()
    assert str(failed.value.msg) == str(skipped.value.msg)


def test_a_test_that_reads_the_real_text_is_marked_for_the_pass_that_has_it():
    """The ``real_shakespeare`` fixture marks its tests ``real_text``: CI's second pass selects them by the mark."""
    import conftest

    class Item:
        def __init__(self, fixturenames: list[str]):
            self.fixturenames, self.marks = fixturenames, []

        def add_marker(self, mark) -> None:
            self.marks.append(mark.name)

        def get_closest_marker(self, name: str):
            return name if name in self.marks else None

    reads, other = Item(["tmp_path", "real_shakespeare"]), Item(["tmp_path"])
    conftest.pytest_collection_modifyitems([reads, other])
    assert (reads.marks, other.marks) == (["real_text"], [])


def test_the_data_folder_is_the_setting_then_the_environment_then_the_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(environment.DATA, raising=False)
    assert data_root() == REPO_DATA
    monkeypatch.setenv(environment.DATA, "~/corpora")  # as a shell leaves it when quoted, or in a .env file
    assert data_root() == tmp_path / "corpora"
    assert data_root("~/mine") == tmp_path / "mine" and data_root("/abs") == Path("/abs")


def test_language_batches_are_windows_and_reproducible(tiny_text_root):
    data = build_dataset("shakespeare", root=str(tiny_text_root), context=16)
    x, y = data.train_batch(step=3, batch_size=5, seed=7)
    assert x.shape == y.shape == (5, 16) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(x, data.train_batch(step=3, batch_size=5, seed=7)[0])
    assert not torch.equal(x, data.train_batch(step=4, batch_size=5, seed=7)[0])
    assert not torch.equal(x, data.train_batch(step=3, batch_size=5, seed=8)[0])
    # the evaluation set is fixed: the same whatever the run (seed, width, LR)
    first, second = data.eval_batches(3, 4), data.eval_batches(3, 4)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, second))


def test_context_longer_than_a_split_is_refused(tiny_text_root):
    with pytest.raises(DataUnavailable, match="context=5000.*validation split"):
        build_dataset("shakespeare", root=str(tiny_text_root), context=5000)


def test_unknown_dataset_lists_registered():
    with pytest.raises(ValueError, match="registered: shakespeare, tinystories, openwebtext, cifar10, tokens, "
                                         "text_files, hf_dataset, image_folder, or an import path"):
        build_dataset("imagenet")
    assert set(DATASETS) == {"shakespeare", "tinystories", "openwebtext", "cifar10", "tokens", "text_files",
                             "hf_dataset", "image_folder"}


def test_missing_file_offline_names_file_and_command(tmp_path, monkeypatch):
    # the package re-exports a function of the same name, so reach the module itself
    monkeypatch.setattr(sys.modules["modula_cli.data.shakespeare"], "URL", "http://127.0.0.1:9/input.txt")
    with pytest.raises(DataUnavailable, match=r"shakespeare/input.txt.*modula-prepare-data shakespeare") as error:
        build_dataset("shakespeare", root=str(tmp_path))
    # the cause as the network says it: refused (loopback up), unreachable (a namespace without loopback)
    assert "\n" not in str(error.value) and ("Connection refused" in str(error.value)
                                            or "Network is unreachable" in str(error.value))


def test_prepare_cifar10_checks_the_files_without_reading_them(cifar_root, monkeypatch):
    """prepare_dataset (what a sweep runs once before its jobs) looks for the six batch files and reads none:
    with every batch file's contents garbage it still succeeds and leaves them as they are; with one file
    gone (and no network) it says which archive it could not fetch."""
    from modula_cli.data import prepare_dataset

    folder = cifar_root / "cifar10" / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        (folder / name).write_bytes(b"not a pickle")  # reading any of them would fail
    assert prepare_dataset("cifar10", root=str(cifar_root)) is None
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)
    assert all((folder / name).read_bytes() == b"not a pickle" for name in names)
    with pytest.raises(DataUnavailable, match="data_batch_1 is refused"):  # reading fails: prepare_dataset did not
        build_dataset("cifar10", root=str(cifar_root))
    (folder / "test_batch").unlink()
    monkeypatch.setattr(sys.modules["modula_cli.data.cifar10"], "URL", "http://127.0.0.1:9/cifar-10-python.tar.gz")
    with pytest.raises(DataUnavailable, match=r"cifar-10-python.tar.gz .*is missing and could not be downloaded"):
        prepare_dataset("cifar10", root=str(cifar_root))


DOCS = ["Once upon a time there was a cat.", "The dog ran home.", "Ünïcode stays intact ✓", "Short."]


def write_corpus(folder, fmt):
    folder.mkdir(parents=True)
    splits = {"train": DOCS * 5, "validation": DOCS[:2]}
    for split, docs in splits.items():
        if fmt == "jsonl":
            (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
        elif fmt == "parquet":
            pd.DataFrame({"text": docs}).to_parquet(folder / f"{split}.parquet")
        else:
            (folder / f"{split}.txt").write_text("\n\n".join(docs) + "\n")
    return splits


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "txt"])
def test_tinystories_from_local_folder(tmp_path, fmt):
    splits = write_corpus(tmp_path / "corpus", fmt)
    data = build_dataset("tinystories", source=str(tmp_path / "corpus"), tokenizer="byte",
                         root=str(tmp_path / "root"), num_proc=1, context=8)
    enc = byte_encoding()
    expected = {s: sum(len(d.encode()) + 1 for d in docs) for s, docs in splits.items()}
    assert (len(data.train), len(data.val)) == (expected["train"], expected["validation"])
    assert data.vocab_size == 257
    assert enc.decode(list(data.val)) == "".join(d + "<|endoftext|>" for d in splits["validation"])
    assert data.meta["tokenizer"] == "byte" and data.meta["tokens"]["train"] == expected["train"]


def test_openwebtext_holdout_and_max_docs(tmp_path):
    folder = tmp_path / "owt"
    folder.mkdir()
    docs = [f"document number {i} " * 3 for i in range(200)]
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    kwargs = dict(source=str(folder), tokenizer="byte", root=str(tmp_path / "root"), num_proc=1, context=8)
    data = build_dataset("openwebtext", holdout=0.05, **kwargs)
    assert data.meta["documents"] == {"train": 190, "val": 10}
    again = build_dataset("openwebtext", holdout=0.05, **kwargs)
    assert np.array_equal(data.val, again.val)  # fixed-seed holdout
    capped = build_dataset("openwebtext", holdout=0.05, max_docs=50, **kwargs)
    assert capped.meta["documents"]["train"] == 50


def test_gpt2_and_byte_caches_never_mix(tmp_path, monkeypatch):
    write_corpus(tmp_path / "corpus", "jsonl")
    kwargs = dict(source=str(tmp_path / "corpus"), root=str(tmp_path / "root"), num_proc=1, context=4)
    byte = build_dataset("tinystories", tokenizer="byte", **kwargs)

    class FakeGPT2:  # a stand-in encoding with other token ids, to show the cache is not reused
        n_vocab, eot_token = 300, 299

        def encode_ordinary(self, text):
            return [(b + 7) % 299 for b in text.encode()]

    monkeypatch.setattr("modula_cli.data.text.get_tokenizer", lambda name: FakeGPT2() if name == "gpt2"
                        else byte_encoding())
    other = build_dataset("tinystories", tokenizer="gpt2", **kwargs)
    assert other.meta["tokenizer"] == "gpt2" and other.vocab_size == 300
    assert not np.array_equal(np.asarray(byte.train[:20]), np.asarray(other.train[:20]))


def test_partial_or_corrupt_cache_is_rebuilt(tiny_text_root):
    data = build_dataset("shakespeare", root=str(tiny_text_root), context=8)
    prepared = tiny_text_root / "shakespeare" / "prepared-char"
    good = np.array(data.train)
    # corrupt: flip bytes in place (same size)
    raw = bytearray((prepared / "train.bin").read_bytes())
    raw[:10] = bytes(10)
    (prepared / "train.bin").write_bytes(bytes(raw))
    assert np.array_equal(np.array(build_dataset("shakespeare", root=str(tiny_text_root), context=8).train), good)
    # partial: killed before meta.json was written
    (prepared / "meta.json").unlink()
    (prepared / "val.bin").write_bytes(b"\x00")
    rebuilt = build_dataset("shakespeare", root=str(tiny_text_root), context=8)
    assert len(rebuilt.val) == len(data.val)


def _count_build(folder, counter):
    def build(tmp):
        with open(counter, "a") as handle:
            handle.write("built\n")
        (tmp / "x.bin").write_bytes(b"abc")
        return {}

    prepare_once(folder, {"dataset": "x"}, build)


def test_parallel_jobs_prepare_once(tmp_path):
    counter = tmp_path / "builds.txt"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_prepare_in_child, args=(tmp_path / "cache", counter)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert counter.read_text().count("built") == 1


def _prepare_in_child(folder, counter):
    _count_build(folder, counter)


def test_cifar_pickle_layout_and_augmentation(cifar_root):
    data = build_dataset("cifar10", root=str(cifar_root), augment="none")
    assert data.input_shape == (3, 32, 32) and len(data.train_labels) == 80
    # one epoch of batches covers every training image exactly once (sampling without replacement)
    seen = []
    for step in range(4):
        x, y = data.train_batch(step, batch_size=20, seed=0)
        assert x.shape == (20, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (20,)
        pixel = x[:, 0, 0, 0] * 0.2470 + 0.4914  # undo the per-channel normalisation
        seen += torch.round(pixel * 255).long().tolist()
    assert sorted(seen) == list(range(80))
    test = data.eval_batches(num_batches=2, batch_size=10)
    assert len(test) == 2 and all(torch.equal(a[0], b[0]) for a, b in zip(test, data.eval_batches(2, 10)))


@pytest.mark.parametrize("augment", ["crop_flip", "autoaugment"])
def test_cifar_training_augmentation_is_reproducible(cifar_root, augment):
    data = build_dataset("cifar10", root=str(cifar_root), augment=augment)
    plain = build_dataset("cifar10", root=str(cifar_root), augment="none")
    x1, y1 = data.train_batch(2, 16, seed=3)
    x2, _ = data.train_batch(2, 16, seed=3)
    assert torch.equal(x1, x2) and torch.equal(y1, plain.train_batch(2, 16, seed=3)[1])
    assert not torch.equal(x1, plain.train_batch(2, 16, seed=3)[0])
    # no augmentation at test time
    assert all(torch.equal(a[0], b[0]) for a, b in zip(data.eval_batches(2, 8), plain.eval_batches(2, 8)))


def test_cifar_bad_options(cifar_root):
    with pytest.raises(ValueError, match="allowed: autoaugment, crop_flip, none"):
        build_dataset("cifar10", root=str(cifar_root), augment="mixup")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="on_gpu"):
            build_dataset("cifar10", root=str(cifar_root), on_gpu=True)


def test_a_binary_file_as_shakespeares_source_is_one_line_naming_it(tmp_path):
    """nanoGPT's train.bin given as data.source: the check names the file and what the dataset reads, before any
    run folder is made (no UnicodeDecodeError traceback)."""
    from modula_cli.config.validate import config_problems

    from helpers import compose_config

    tokens = tmp_path / "train.bin"
    np.array([300, 7, 65535, 2], dtype=np.uint16).tofile(tokens)
    cfg = compose_config("data=shakespeare", f"data.source={tokens}")
    assert config_problems(cfg) == [
        f"data=shakespeare: {tokens} is not UTF-8 text (byte 0xff at position 4); this dataset reads a plain text "
        f"file, like tiny Shakespeare's input.txt, and makes its characters the tokens: name such a file with "
        f"data.source"]
    with pytest.raises(DataUnavailable, match="is not UTF-8 text"):
        build_dataset("shakespeare", source=str(tokens), root=str(tmp_path), context=1)
