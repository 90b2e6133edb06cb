"""Fixtures shared by the test modules: running one stage function on directories a test made, without the
runner; the small corpora, vocabularies and HDF5 files several modules' tests read."""
from __future__ import annotations

import contextlib
import logging
import random
from pathlib import Path
from typing import Callable, Iterable

import h5py
import numpy as np
import pytest

from wiki2bert_core.wordpiece import SPECIAL_TOKENS, read_vocab, wordpiece_tokenizer
from pipeline.text_files import (WIKIPEDIA_SOURCE, DocumentRecord, part_name, records_path, write_document,
                                 write_record)
from pipeline.stages import StageContext

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SUFFIXES = ["s", "ed", "ing"]
# a test's seconds on 2 cores, on average: what orders the files (the suite's mean: 10 s a slow test, 0.5 s another)
SLOW_TEST_S, QUICK_TEST_S = 10.0, 0.5


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The test files longest first (by their tests' estimated seconds), each file's tests in their order: with
    `--dist loadfile --no-loadscope-reorder` (scripts/test.sh) the pytest workers take the long files first and end
    together on the short ones, instead of one worker running the last long file alone."""
    seconds: dict[Path, float] = {}
    for item in items:
        seconds[item.path] = seconds.get(item.path, 0.0) + (SLOW_TEST_S if item.get_closest_marker("slow")
                                                            else QUICK_TEST_S)
    items.sort(key=lambda item: (-seconds[item.path], str(item.path)))


@pytest.fixture(scope="session")
def stage_context() -> Callable[..., StageContext]:
    """make(base, inputs, name="out", lang="hu", workers=1): the context of a stage writing into the new directory
    base/name and reading the directories in `inputs` (upstream stage -> directory)."""
    def make(base: Path, inputs: dict[str, Path], name: str = "out", lang: str = "hu",
             workers: int = 1) -> StageContext:
        out = base / name
        out.mkdir()
        return StageContext(lang=lang, out_dir=out, inputs=inputs, cache_dir=base / f"cache-{name}", workers=workers,
                            quiet=True, log=logging.getLogger("test"))
    return make


@pytest.fixture(scope="session")
def run_stage_function(stage_context) -> Callable[..., tuple[Path, dict]]:
    """run(fn, config, base, inputs, name="out", workers=1, lang="hu"): fn(config, ctx) into base/name; returns
    (that directory, the counts)."""
    def run(fn: Callable, config, base: Path, inputs: dict[str, Path], name: str = "out", workers: int = 1,
            lang: str = "hu") -> tuple[Path, dict]:
        ctx = stage_context(base, inputs, name, lang, workers)
        return ctx.out_dir, fn(config, ctx)
    return run


@pytest.fixture(scope="session")
def write_document_parts() -> Callable[..., Path]:
    """write(directory, documents, parts, records=None): documents (lists of sentences) dealt round-robin into
    part-NNNNN.txt files of the filter format, with their records beside them (by default source wikipedia, id the
    document's number); returns the directory."""
    def write(directory: Path, documents: Iterable[list[str]], parts: int,
              records: Iterable[DocumentRecord] | None = None) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        records = iter(records) if records is not None else None
        with contextlib.ExitStack() as stack:
            files = [stack.enter_context(open(directory / part_name(i, ".txt"), "w", encoding="utf-8"))
                     for i in range(parts)]
            record_files = [stack.enter_context(open(records_path(f.name), "w", encoding="utf-8")) for f in files]
            for d, sentences in enumerate(documents):
                write_document(files[d % parts], sentences)
                write_record(record_files[d % parts],
                             next(records) if records is not None else DocumentRecord(WIKIPEDIA_SOURCE, str(d)))
        return directory
    return write


@pytest.fixture(scope="session")
def write_vocab() -> Callable[..., dict[str, int]]:
    """write(path, words=300, special_at=None): w0..w{words-1}, ##s/##ed/##ing, punctuation, and the special tokens
    (by default first, Google-style ids otherwise differ: pass special_at to put them elsewhere); returns the vocab."""
    def write(path: Path, words: int = 300, special_at: dict[str, int] | None = None) -> dict[str, int]:
        tokens = [f"w{i}" for i in range(words)] + [f"##{s}" for s in SUFFIXES] + [".", ","]
        special_at = special_at or {t: i for i, t in enumerate(SPECIALS)}
        for token, index in sorted(special_at.items(), key=lambda item: item[1]):
            tokens.insert(index, token)
        path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
        return read_vocab(path)
    return write


@pytest.fixture(scope="session")
def write_corpus() -> Callable[..., None]:
    """write(path, documents, seed=0, ...): random sentences of w<i> words (some with a ##-suffix), a blank line
    after each document: the text the hdf5 stage reads, for the vocabulary of write_vocab."""
    def write(path: Path, documents: int, seed: int = 0, words: int = 300, sentences=(1, 12),
              sentence_words=(3, 25), suffix_share: float = 0.3) -> None:
        rnd = random.Random(seed)
        with open(path, "w", encoding="utf-8") as f:
            for _ in range(documents):
                for _ in range(rnd.randint(*sentences)):
                    sentence = [f"w{rnd.randrange(words)}" + (rnd.choice(SUFFIXES) if rnd.random() < suffix_share
                                                               else "")
                                for _ in range(rnd.randint(*sentence_words))]
                    f.write(" ".join(sentence) + " .\n")
                f.write("\n")
    return write


@pytest.fixture(scope="session")
def run_hdf5_stage(stage_context) -> Callable[..., Path]:
    """run(base, shard_dir, vocab_file, config, workers=1, out_name="out"): the hdf5 stage on a shard directory and
    a vocab.txt (its tokenizer.json made here); returns the output directory."""
    from pipeline.stages.hdf5.stage import STAGE

    def run(base: Path, shard_dir: Path, vocab_file: Path, config, workers: int = 1, out_name: str = "out") -> Path:
        vocab_dir = base / f"vocab-{out_name}"
        vocab_dir.mkdir()
        (vocab_dir / "vocab.txt").write_bytes(vocab_file.read_bytes())
        wordpiece_tokenizer(read_vocab(vocab_file)).save(str(vocab_dir / "tokenizer.json"))
        ctx = stage_context(base, {"shard": shard_dir, "vocab": vocab_dir}, out_name, "xx", workers)
        STAGE.run(config, ctx)
        return ctx.out_dir
    return run


PRETRAIN_VOCAB_SIZE = 60  # write_vocab_dir's default size, the ids write_hdf5 draws from


@pytest.fixture(scope="session")
def write_vocab_dir() -> Callable[..., Path]:
    """write(vocab_dir, size=60): vocab.txt (SPECIAL_TOKENS first, then made-up words w0, w1, ...) and
    tokenizer.json, as in a vocab stage or variant directory; returns vocab_dir."""
    def write(vocab_dir: Path, size: int = PRETRAIN_VOCAB_SIZE) -> Path:
        vocab_dir.mkdir(parents=True, exist_ok=True)
        tokens = list(SPECIAL_TOKENS) + [f"w{i}" for i in range(size - len(SPECIAL_TOKENS))]
        (vocab_dir / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
        wordpiece_tokenizer(read_vocab(vocab_dir / "vocab.txt")).save(str(vocab_dir / "tokenizer.json"))
        return vocab_dir
    return write


@pytest.fixture(scope="session")
def write_hdf5() -> Callable[..., dict[str, np.ndarray]]:
    """write(path, samples, seq_len=32, max_predictions=5, ...): a file in NVIDIA's layout: [CLS] A [SEP] B [SEP] +
    padding, random word ids, masked positions (sorted, zero-padded) replaced by [MASK] in input_ids, random
    next-sentence labels; returns the arrays written."""
    cls_id, sep_id, mask_id = (SPECIAL_TOKENS.index(t) for t in ("[CLS]", "[SEP]", "[MASK]"))

    def write(path: Path, samples: int, seq_len: int = 32, max_predictions: int = 5,
              vocab_size: int = PRETRAIN_VOCAB_SIZE, seed: int = 0, dtype=np.int32,
              labels_2d: bool = False) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        arrays = {k: np.zeros((samples, seq_len), dtype) for k in ("input_ids", "input_mask", "segment_ids")}
        arrays["masked_lm_positions"] = np.zeros((samples, max_predictions), dtype)
        arrays["masked_lm_ids"] = np.zeros((samples, max_predictions), dtype)
        arrays["next_sentence_labels"] = rng.integers(0, 2, (samples, 1) if labels_2d else samples).astype(dtype)
        for i in range(samples):
            length = int(rng.integers(8, seq_len + 1))
            sep = int(rng.integers(2, length - 2))  # A = 1..sep-1, B = sep+1..length-2
            ids = rng.integers(len(SPECIAL_TOKENS), vocab_size, length)
            ids[0], ids[sep], ids[length - 1] = cls_id, sep_id, sep_id
            words = [p for p in range(1, length - 1) if p != sep]
            chosen = np.sort(rng.choice(words, size=min(max_predictions, max(1, round(0.15 * length))),
                                        replace=False))
            arrays["masked_lm_positions"][i, :len(chosen)] = chosen
            arrays["masked_lm_ids"][i, :len(chosen)] = ids[chosen]
            ids[chosen] = mask_id
            arrays["input_ids"][i, :length] = ids
            arrays["input_mask"][i, :length] = 1
            arrays["segment_ids"][i, sep + 1:length] = 1
        path.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(path, "w") as f:
            for key, value in arrays.items():
                f.create_dataset(key, data=value, compression="gzip")
        return arrays
    return write


@pytest.fixture(scope="session")
def write_dataset(write_vocab_dir, write_hdf5) -> Callable[..., Path]:
    """write(root, sizes, seq_len=32, max_predictions=5): a variant directory <root>/hu/hdf5/seq_len_<seq_len> as
    the hdf5 stage writes it: training/training_NNNN.hdf5 of `sizes` rows each, and the vocabulary."""
    def write(root: Path, sizes: list[int], seq_len: int = 32, max_predictions: int = 5) -> Path:
        variant = root / "hu" / "hdf5" / f"seq_len_{seq_len}"
        write_vocab_dir(variant)
        for i, n in enumerate(sizes):
            write_hdf5(variant / "training" / f"training_{i:04d}.hdf5", n, seq_len, max_predictions, seed=i)
        return variant
    return write


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A BERT with 2 layers of width 32 (random weights) and its tokenizer, as `pretrain export` writes one, for the
    fine-tuning tests (tests/support/finetune_tasks.py); tests that change it change a copy."""
    from finetune_tasks import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run ~80x faster on one thread than on two when the cores are busy (thread synchronisation)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
