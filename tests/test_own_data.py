"""Your data without editing the package: nanoGPT's token files, a corpus file with any tokenizer, a saved
Hugging Face dataset, an image folder, and a function of your own; each checked against the same data read by
hand, and each bad input said in one line before a run trains."""

import json
import math
import pickle
import re
import sys
import textwrap
from collections import OrderedDict

import numpy as np
import pytest
import torch

from helpers import TINY_TRAIN, compose_config
from modula_cli.config.identity import fingerprint
from modula_cli.config.validate import config_problems
from modula_cli.data import DataUnavailable, build_dataset, prepare_dataset
from modula_cli.data.tokenizers import byte_encoding
from modula_cli.run.trainer import train

CORPUS = "".join(f"The quick brown fox {i} jumps over the lazy dog.\nSo it goes, line {i}.\n" for i in range(300))


def write_bins(folder, train_ids, val_ids, dtype=np.uint16, meta=None, meta_name="meta.pkl"):
    folder.mkdir(parents=True, exist_ok=True)
    np.asarray(train_ids, dtype=dtype).tofile(folder / "train.bin")
    np.asarray(val_ids, dtype=dtype).tofile(folder / "val.bin")
    if meta is not None:
        data = pickle.dumps(meta) if meta_name.endswith(".pkl") else json.dumps(meta).encode()
        (folder / meta_name).write_bytes(data)
    return folder


def nanogpt_char_folder(folder):
    """What nanoGPT's data/shakespeare_char/prepare.py writes: uint16 ids and meta.pkl with vocab_size, itos, stoi."""
    chars = sorted(set(CORPUS))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = [stoi[c] for c in CORPUS]
    cut = int(0.9 * len(ids))
    return write_bins(folder, ids[:cut], ids[cut:], meta={"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                                                          "stoi": stoi}), ids, cut


def test_tokens_reads_nanogpt_files_memory_mapped(tmp_path):
    folder, ids, cut = nanogpt_char_folder(tmp_path / "shakespeare_char")
    data = build_dataset("tokens", path=str(folder), context=8)
    assert data.vocab_size == len(set(CORPUS)) and isinstance(data.train, np.memmap)
    assert data.train.tolist() == ids[:cut] and data.val.tolist() == ids[cut:]
    x, y = data.train_batch(3, 4, seed=0)
    assert x.shape == (4, 8) and torch.equal(x[:, 1:], y[:, :-1])
    for row in x:  # every window is a piece of the corpus
        text = "".join(data_char(folder, int(i)) for i in row)
        assert text in CORPUS


def data_char(folder, index):
    return pickle.loads((folder / "meta.pkl").read_bytes())["itos"][index]


def test_tokens_uint32_and_vocab_from_json_or_the_config(tmp_path):
    ids = np.arange(70_000, dtype=np.uint32) % 69_999
    folder = write_bins(tmp_path / "big", ids, ids[:100], dtype=np.uint32, meta={"vocab_size": 70_000},
                        meta_name="meta.json")
    data = build_dataset("tokens", path=str(folder), context=16)
    assert data.train.dtype == np.uint32 and data.train[-2] == 69_998 and data.vocab_size == 70_000
    plain = write_bins(tmp_path / "plain", [1, 2, 3] * 20, [3, 2, 1] * 10)
    assert build_dataset("tokens", path=str(plain), context=4, vocab_size=5).vocab_size == 5


def test_tokens_bad_files_are_one_line_each(tmp_path):
    odd = write_bins(tmp_path / "odd", [1, 2, 3], [1, 2], meta={"vocab_size": 10})
    with open(odd / "train.bin", "ab") as handle:
        handle.write(b"\x00")
    with pytest.raises(DataUnavailable, match=r"train.bin has 7 bytes, not a whole number of uint16 token ids"):
        build_dataset("tokens", path=str(odd), context=1)
    high = write_bins(tmp_path / "high", [1, 2, 12] * 5, [1, 2] * 5, meta={"vocab_size": 10})
    with pytest.raises(DataUnavailable, match=r"train.bin holds token id 12, not below the vocabulary size 10"):
        build_dataset("tokens", path=str(high), context=1)
    unknown = write_bins(tmp_path / "unknown", [1, 2] * 5, [1, 2] * 5)
    with pytest.raises(DataUnavailable, match="the vocabulary size of .* is not known; set data.vocab_size"):
        build_dataset("tokens", path=str(unknown), context=1)
    # a meta.pkl that names a class is never unpickled (it could run code)
    evil = write_bins(tmp_path / "evil", [1, 2] * 5, [1, 2] * 5, meta=OrderedDict(vocab_size=10))
    with pytest.raises(DataUnavailable, match=r"meta.pkl is refused \(it names collections.OrderedDict"):
        build_dataset("tokens", path=str(evil), context=1)
    problems = config_problems(compose_config("data=tokens", f"data.path={tmp_path / 'none'}"))
    assert problems == [f"data.path={tmp_path / 'none'}: no such folder (data=tokens reads train.bin and val.bin "
                        f"from a folder)"]
    short = write_bins(tmp_path / "short", [1, 2, 3] * 100, [1, 2, 3, 4], meta={"vocab_size": 10})
    assert config_problems(compose_config("data=tokens", f"data.path={short}", "data.context=8")) == [
        "data.context=8 needs 9 tokens per window, but the validation split of tokens has 4"]


def tiny_bpe_folder(folder):
    """A byte-level BPE trained here on the corpus and saved as Hugging Face tokenizers save it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator([CORPUS], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>").save_pretrained(folder)
    return folder


def test_text_files_with_each_tokenizer_equal_the_tokenizer_by_hand(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text(CORPUS)
    chars = sorted(set(CORPUS))
    char = build_dataset("text_files", path=str(text), tokenizer="char", root=str(tmp_path / "cache"), context=8)
    ids = [chars.index(c) for c in CORPUS]
    cut = len(ids) - round(0.1 * len(ids))
    assert (char.vocab_size, char.train.tolist(), char.val.tolist()) == (len(chars), ids[:cut], ids[cut:])
    # documents: each followed by end-of-text
    docs = [f"document {i}: " + "words " * (i % 7) for i in range(40)]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"body": d}) + "\n" for d in docs))
    byte = build_dataset("text_files", path=str(jsonl), text_field="body", tokenizer="byte", holdout=0.25,
                         root=str(tmp_path / "cache"), context=4)
    enc = byte_encoding()
    stream = [t for d in docs for t in [*enc.encode_ordinary(d), enc.eot_token]]
    cut = len(stream) - round(0.25 * len(stream))
    assert byte.train.tolist() == stream[:cut] and byte.val.tolist() == stream[cut:]
    # parquet, a BPE tokenizer folder and a separate validation file
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    folder = tiny_bpe_folder(tmp_path / "bpe")
    pq.write_table(pa.table({"text": docs[:30]}), tmp_path / "train.parquet")
    pq.write_table(pa.table({"text": docs[30:]}), tmp_path / "val.parquet")
    bpe = build_dataset("text_files", path=str(tmp_path / "train.parquet"), val_path=str(tmp_path / "val.parquet"),
                        tokenizer=str(folder), root=str(tmp_path / "cache"), context=4)
    hf = AutoTokenizer.from_pretrained(folder)
    by_hand = lambda part: [t for d in part for t in [*hf.encode(d, add_special_tokens=False), hf.eos_token_id]]  # noqa: E731
    assert bpe.train.tolist() == by_hand(docs[:30]) and bpe.val.tolist() == by_hand(docs[30:])
    assert bpe.vocab_size == len(hf) and bpe.train.dtype == np.uint16


def test_a_corpus_is_tokenised_once_and_an_edited_one_is_another_run(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text(CORPUS)
    overrides = ["data=text_files", f"data.path={text}", "data.tokenizer=byte", f"data.root={tmp_path / 'cache'}"]
    first = build_dataset("text_files", path=str(text), tokenizer="byte", root=str(tmp_path / "cache"), context=8)
    meta = next((tmp_path / "cache" / "text_files").glob("byte-*/meta.json"))
    stamp = meta.stat().st_mtime_ns
    before = fingerprint(compose_config(*overrides))
    prepare_dataset("text_files", path=str(text), tokenizer="byte", root=str(tmp_path / "cache"))
    assert meta.stat().st_mtime_ns == stamp  # found, not rebuilt
    text.write_text(CORPUS + "One more line.\n")
    after = build_dataset("text_files", path=str(text), tokenizer="byte", root=str(tmp_path / "cache"), context=8)
    assert len(after.train) + len(after.val) == len(first.train) + len(first.val) + len("One more line.\n")
    assert len(list((tmp_path / "cache" / "text_files").glob("byte-*/meta.json"))) == 2
    assert fingerprint(compose_config(*overrides)) != before


def test_text_files_bad_input_is_one_line_each(tmp_path):
    binary = tmp_path / "train.txt"
    binary.write_bytes(b"fine text " * 3 + b"\xff\xfe rest")
    with pytest.raises(DataUnavailable, match=r"is not UTF-8 text \(byte 0xff at byte offset 30\)"):
        build_dataset("text_files", path=str(binary), tokenizer="byte", root=str(tmp_path / "c"), context=2)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    good = tmp_path / "good.txt"
    good.write_text(CORPUS)
    cases = {
        f"data.path={empty}": f"data.path={empty} is empty",
        f"data.path={tmp_path / 'corpus.csv'}": f"data.path={tmp_path / 'corpus.csv'}: no such file",
        "data.tokenizer=gpt5": "data.tokenizer='gpt5' is neither a known name nor a folder; allowed: byte, char, gpt2",
        f"data.tokenizer={tmp_path}": f"data.tokenizer='{tmp_path}' is a folder without a tokenizer file",
    }
    for override, message in cases.items():
        path = [] if override.startswith("data.path") else [f"data.path={good}"]
        problems = config_problems(compose_config("data=text_files", *path, override))
        assert len(problems) == 1 and problems[0].startswith(message), (override, problems)
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"text": "one"}\n{"body": "two"}\n')
    with pytest.raises(DataUnavailable, match=r"docs.jsonl, line 2, has no text field 'text'; set data.text_field"):
        build_dataset("text_files", path=str(jsonl), tokenizer="byte", root=str(tmp_path / "c"), context=2)


def test_hf_dataset_saved_to_disk_equals_its_documents_by_hand(tmp_path):
    import datasets

    docs = [f"story {i}: the cat sat." for i in range(50)]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": docs[:40]}),
                          "validation": datasets.Dataset.from_dict({"text": docs[40:]})}).save_to_disk(tmp_path / "ds")
    data = build_dataset("hf_dataset", path=str(tmp_path / "ds"), tokenizer="byte", root=str(tmp_path / "c"),
                         context=8)
    enc = byte_encoding()
    by_hand = lambda part: [t for d in part for t in [*enc.encode_ordinary(d), enc.eot_token]]  # noqa: E731
    assert data.train.tolist() == by_hand(docs[:40]) and data.val.tolist() == by_hand(docs[40:])
    assert config_problems(compose_config("data=hf_dataset", f"data.path={tmp_path / 'nothing'}")) == [
        f"data.path={tmp_path / 'nothing'}: no such folder (a local dataset is a folder written by save_to_disk)"]
    with pytest.raises(DataUnavailable, match=r"has no column 'body' \(columns: text\); set data.text_field"):
        build_dataset("hf_dataset", path=str(tmp_path / "ds"), text_field="body", tokenizer="byte",
                      root=str(tmp_path / "c"), context=8)


def image_folder(root, per_class=6):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label, colour in (("cat", 40), ("dog", 200)):
            (root / split / label).mkdir(parents=True)
            for i in range(per_class):
                pixels = np.clip(rng.normal(colour, 10, size=(12, 12, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(root / split / label / f"{i}.png")
    return root


def test_image_folder_reads_classes_and_draws_reproducible_batches(tmp_path):
    folder = image_folder(tmp_path / "pets")
    data = build_dataset("image_folder", path=str(folder), image_size=8, augment="crop_flip")
    assert data.num_classes == 2 and data.input_shape == (3, 8, 8) and len(data.train) == 12
    x, y = data.train_batch(1, 4, seed=3)
    again, labels = data.train_batch(1, 4, seed=3)
    assert torch.equal(x, again) and torch.equal(y, labels)  # the same augmentation on a resume
    (test_x, test_y), = data.eval_batches(1, 12)
    # the dog images are brighter: normalised, their mean is above the cats'
    assert test_x[test_y == 1].mean() > test_x[test_y == 0].mean()
    (tmp_path / "flat" / "train").mkdir(parents=True)
    (tmp_path / "flat" / "test").mkdir()
    (tmp_path / "flat" / "train" / "a.png").write_bytes(b"")
    assert config_problems(compose_config("data=image_folder", f"data.path={tmp_path / 'flat'}", "arch=resmlp")) == [
        f"data.path={tmp_path / 'flat'}: train/ has no class folders; put each class's images in a folder of its own "
        f"(train/cat/1.png, train/dog/2.png)"]


USER_DATA = '''
import numpy as np
import torch
from modula_cli.data import ImageSplits


def tokens(cfg):
    ids = np.fromfile(cfg.path, dtype=np.uint16)
    return {"train": ids[:-50], "test": torch.from_numpy(ids[-50:].astype(np.int64)), "vocab_size": cfg.vocab}


class Squares(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((1, 4, 4), float(i % 3)), i % 3


def images(cfg):
    return ImageSplits(Squares(30), Squares(9), classes=3)


def floats(cfg):
    return {"train": np.ones(100), "test": np.ones(100), "vocab_size": 4}


def nothing(cfg):
    return [1, 2, 3]


def broken(cfg):
    raise KeyError("split")
'''


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    (tmp_path / "my_data.py").write_text(textwrap.dedent(USER_DATA))
    np.arange(300, dtype=np.uint16).__mod__(7).astype(np.uint16).tofile(tmp_path / "ids.bin")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("my_data", None)


def test_a_data_function_gets_its_yaml_and_returns_either_kind(user_folder):
    data = build_dataset("my_data:tokens", path=str(user_folder / "ids.bin"), vocab=7, context=8)
    assert data.vocab_size == 7 and data.train.tolist() == [i % 7 for i in range(250)]
    assert data.val.tolist() == [i % 7 for i in range(250, 300)] and data.kind == "language"
    images = build_dataset("my_data:images")
    assert (images.kind, images.num_classes, images.input_shape) == ("image", 3, (1, 4, 4))
    x, y = images.train_batch(0, 6, seed=0)
    assert torch.equal(x[:, 0, 0, 0], y.float())
    cases = {"my_data:floats": "its train split is a float64 array of shape (100,); expected a 1-D array of integer",
             "my_data:nothing": "returned list; expected a mapping with train, test and vocab_size",
             "my_data:broken": "raised KeyError: 'split'",
             "my_data:absent": "absent is not defined in"}
    for name, message in cases.items():
        with pytest.raises(DataUnavailable, match=re.escape(message)):
            build_dataset(name, context=4)
    with pytest.raises(DataUnavailable, match="its train split holds token id 6, outside 0 … vocab_size - 1 = 4"):
        build_dataset("my_data:tokens", path=str(user_folder / "ids.bin"), vocab=5, context=8)
    with pytest.raises(DataUnavailable, match="data.context=64 needs at least 65 tokens, but the validation split of "
                                              "my_data:tokens has 50; use a shorter context"):
        build_dataset("my_data:tokens", path=str(user_folder / "ids.bin"), vocab=7, context=64)


def test_a_run_on_a_data_function_trains_and_its_file_is_its_identity(user_folder, tmp_path):
    overrides = ["data.name=my_data:tokens", f"+data.path={user_folder / 'ids.bin'}", "+data.vocab=7",
                 "data.context=8", "arch=gpt", "arch.width=16", "arch.depth=1", "arch.heads=2", *TINY_TRAIN,
                 "train.steps=4"]
    cfg = compose_config(*overrides)
    assert config_problems(cfg) == []
    summary = train(cfg, tmp_path / "run").summary
    assert summary["status"] == "completed" and summary["settings"]["data.identity"]
    before = fingerprint(cfg)
    (user_folder / "ids.bin").write_bytes(np.arange(300, dtype=np.uint16).__mod__(5).astype(np.uint16).tobytes())
    assert fingerprint(compose_config(*overrides)) != before
    bad = compose_config(*overrides[:1], "data.name=my_data:absent")
    assert any("data.name='my_data:absent': absent is not defined" in p for p in config_problems(bad))


def _format_overrides(kind, tmp_path):
    """Each format's data, made here, and the overrides of a run on it."""
    if kind == "text_files":
        (tmp_path / "corpus.txt").write_text(CORPUS)
        return ["data=text_files", f"data.path={tmp_path / 'corpus.txt'}", "data.tokenizer=char", "data.context=8"]
    if kind == "hf_dataset":
        import datasets

        datasets.Dataset.from_dict({"text": CORPUS.splitlines()}).save_to_disk(tmp_path / "ds")
        return ["data=hf_dataset", f"data.path={tmp_path / 'ds'}", "data.tokenizer=byte", "data.context=8"]
    if kind == "tokens":
        folder, _, _ = nanogpt_char_folder(tmp_path / "bins")
        return ["data=tokens", f"data.path={folder}", "data.context=8"]
    return ["data=image_folder", f"data.path={image_folder(tmp_path / 'pets')}", "data.image_size=8", "arch=resmlp",
            "arch.depth=2"]


@pytest.mark.parametrize("kind", ["tokens", "text_files", "hf_dataset", "image_folder"])
def test_a_run_trains_on_each_format(kind, tmp_path):
    language = kind != "image_folder"
    arch = ["arch=gpt", "arch.depth=1", "arch.heads=2"] if language else []
    cfg = compose_config(*arch, "arch.width=16", *_format_overrides(kind, tmp_path), f"data.root={tmp_path / 'c'}",
                         *TINY_TRAIN, "train.batch_size=4", "train.steps=4", "optim.mode=normed")
    assert config_problems(cfg) == []
    summary = train(cfg, tmp_path / "run").summary
    assert summary["status"] == "completed" and summary["settings"]["data.identity"]
    assert math.isfinite(summary["train_loss"]) and math.isfinite(summary["test_loss"])
