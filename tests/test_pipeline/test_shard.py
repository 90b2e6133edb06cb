"""The `shard` stage: balance, whole documents, nothing lost or added, test fraction, determinism, bounded memory,
and clear errors; plus vocab and shard run through the runner behind a toy filter stage."""
from __future__ import annotations

import collections
import dataclasses
import random
import sys
import tracemalloc
import types
from pathlib import Path

import pytest

from wiki2bert_core.errors import ConfigError
from pipeline.config import load_pipeline_config
from wiki2bert_core.errors import DataError
from pipeline.text_files import iter_documents
from pipeline.runner import read_manifest, run_stages
from pipeline.stages import Stage
from pipeline.stages import shard
from pipeline.stages.shard import ShardConfig, run

WORDS = "alma körte szilva barack fűzfa tükör árvíz ősz ürge szél hegy völgy folyó erdő mező".split()


@pytest.fixture(scope="session")
def make_corpus(write_document_parts):
    def make_corpus(directory: Path, documents: int, seed: int = 1, parts: int = 3) -> Path:
        """Documents of 2-30 sentences (sizes vary ~20x), spread over `parts` part files."""
        rng = random.Random(seed)
        docs = ([f"{d}. dokumentum {s}. mondata: " + " ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + "."
                 for s in range(rng.randint(2, 30))] for d in range(documents))
        return write_document_parts(directory, docs, parts)
    return make_corpus


@pytest.fixture(scope="session")
def run_shard(run_stage_function):
    def run_shard(tmp_path: Path, filter_dir: Path, name: str = "out", workers: int = 1, **config) -> tuple[Path, dict]:
        return run_stage_function(run, ShardConfig(**config), tmp_path, {"filter": filter_dir}, name, workers)
    return run_shard


def _documents(paths) -> collections.Counter:
    return collections.Counter(tuple(doc) for path in paths for doc in iter_documents(path))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, make_corpus) -> Path:
    return make_corpus(tmp_path_factory.mktemp("shard") / "filter", documents=6000)


@pytest.fixture(scope="module")
def sharded(corpus, tmp_path_factory, run_shard) -> tuple[Path, dict]:
    return run_shard(tmp_path_factory.mktemp("sharded"), corpus, num_shards=50)


def test_shards_are_balanced_by_size(sharded):
    out, counts = sharded
    sizes = [p.stat().st_size for p in sorted(out.glob("training_*.txt"))]
    assert [p.name for p in sorted(out.glob("training_*.txt"))][:2] == ["training_0000.txt", "training_0001.txt"]
    assert len(sizes) == counts["training_shards"] == 50 and sorted(out.glob("test_*.txt"))[0].name == "test_0000.txt"
    mean = sum(sizes) / len(sizes)
    assert max(sizes) <= 1.05 * mean
    assert counts["training_max_over_mean"] == round(max(sizes) / mean, 4)
    assert counts["training_bytes"] == sum(sizes)


def test_union_of_shards_is_the_input_and_documents_stay_whole(corpus, sharded):
    out, counts = sharded
    expected = _documents(sorted(corpus.glob("part-*.txt")))
    training, test = _documents(out.glob("training_*.txt")), _documents(out.glob("test_*.txt"))
    assert training + test == expected
    assert not set(training) & set(test)
    assert sum(training.values()) == counts["training_documents"] and sum(test.values()) == counts["test_documents"]
    for path in out.glob("*.txt"):  # same text format: sentence lines, one blank line after each document
        assert path.read_text(encoding="utf-8").endswith("\n\n") and "\n\n\n" not in path.read_text(encoding="utf-8")


def test_test_fraction(sharded):
    _, counts = sharded
    assert 0.085 <= counts["test_documents"] / counts["documents"] <= 0.115


def test_same_seed_same_bytes_whatever_the_workers(tmp_path, corpus, run_shard):
    a, _ = run_shard(tmp_path, corpus, "a", workers=1, num_shards=7, num_test_shards=2)
    b, _ = run_shard(tmp_path, corpus, "b", workers=2, num_shards=7, num_test_shards=2)
    c, _ = run_shard(tmp_path, corpus, "c", workers=1, num_shards=7, num_test_shards=2, seed=7)
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and len(names) == 18  # 9 shards, each with its records
    assert all((a / n).read_bytes() == (b / n).read_bytes() for n in names)
    assert _documents(c.glob("test_*.txt")) != _documents(a.glob("test_*.txt"))


def test_no_test_split(tmp_path, corpus, run_shard):
    out, counts = run_shard(tmp_path, corpus, num_shards=3, test_fraction=0.0)
    assert not list(out.glob("test_*.txt")) and counts["test_documents"] == 0 and counts["training_documents"] == 6000


def test_memory_does_not_grow_with_the_corpus(tmp_path, monkeypatch, make_corpus, run_shard):
    monkeypatch.setattr(shard, "BUFFER_BUDGET", 256 << 10)  # the stage's only corpus-sized-looking buffer, made small
    peaks = {}
    for documents in (3_000, 12_000):  # ~4 MB and ~15 MB
        corpus = make_corpus(tmp_path / f"filter{documents}", documents=documents)
        tracemalloc.start()
        try:
            run_shard(tmp_path, corpus, f"out{documents}", num_shards=20)
            peaks[documents] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    size = sum(p.stat().st_size for p in (tmp_path / "filter12000").iterdir())
    assert size > 12_000_000
    assert peaks[12_000] < size / 10
    assert peaks[12_000] < 1.2 * peaks[3_000] + 200_000


def test_shard_count_is_capped_by_the_documents(tmp_path, make_corpus, run_shard, caplog):
    """No shard so small that it cannot pair A with a random B from another document: with 30 documents, 50
    shards asked for become 30 // min_documents_per_shard, with a warning."""
    small = make_corpus(tmp_path / "filter", documents=30)
    out, counts = run_shard(tmp_path, small, num_shards=50, test_fraction=0.0)
    assert counts["training_shards"] == 3 and len(list(out.glob("training_*.txt"))) == 3
    assert "make 3 shards, not shard.num_shards 50" in caplog.text
    assert all(len(list(iter_documents(p))) >= 2 for p in out.glob("training_*.txt"))  # balanced by size
    out, counts = run_shard(tmp_path, small, "out2", num_shards=50, test_fraction=0.0, min_documents_per_shard=2)
    assert counts["training_shards"] == 15
    out, counts = run_shard(tmp_path, small, "out3", num_shards=2, test_fraction=0.3, num_test_shards=20)
    assert counts["test_shards"] == 1 and counts["training_shards"] == 2  # fewer than 10 test documents: one shard
    with pytest.raises(ConfigError, match="min_documents_per_shard"):
        ShardConfig(min_documents_per_shard=0)


def test_bad_input(tmp_path, make_corpus, run_shard):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "part-00000.txt").write_text("\n\n", encoding="utf-8")
    (empty / "part-00000.docs.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="no documents to shard"):
        run_shard(tmp_path, empty, num_shards=2)
    bad = make_corpus(tmp_path / "bad", documents=20)
    (bad / "part-00002.txt").write_bytes(b"Egy mondat.\nRossz \xff b\xe1jt.\n\n")
    with pytest.raises(DataError, match=r"bad/part-00002\.txt: line 2: not UTF-8"):
        run_shard(tmp_path, bad, "out2", num_shards=2)
    with pytest.raises(ConfigError, match="shard.num_shards"):
        ShardConfig(num_shards=0)
    with pytest.raises(ConfigError, match="shard.test_fraction"):
        ShardConfig(test_fraction=1.0)


@dataclasses.dataclass(frozen=True)
class _ToyFilterConfig:
    documents: int = 400


@pytest.fixture(scope="session")
def toy_filter(make_corpus):
    def toy_filter(config: _ToyFilterConfig, ctx) -> dict:
        make_corpus(ctx.out_dir, config.documents, parts=2)
        return {"documents": config.documents}
    return toy_filter


def test_vocab_and_shard_through_the_runner(tmp_path, monkeypatch, toy_filter):
    monkeypatch.setitem(sys.modules, "pipeline.stages.filter",
                        types.SimpleNamespace(STAGE=Stage("filter", _ToyFilterConfig, toy_filter)))
    config = tmp_path / "stages.yaml"
    config.write_text("stages: [filter, vocab, shard]\n"
                      "defaults:\n  vocab: {vocab_size: 300}\n  shard: {num_shards: 4}\n"
                      "languages:\n  default: {}\n", encoding="utf-8")
    pcfg = load_pipeline_config(config, "hu")
    run_stages(pcfg, tmp_path / "hu", ["filter", "vocab", "shard"], workers=2, quiet=True)
    vocab, shard = read_manifest(tmp_path / "hu" / "vocab"), read_manifest(tmp_path / "hu" / "shard")
    assert vocab["counts"]["special_token_ids"]["[UNK]"] == 101 and "sentencepiece" in vocab["tools"]
    assert set(vocab["outputs"]) == {"vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    assert shard["counts"]["training_shards"] == 4 and len(shard["outputs"]) == 10  # 5 shards and their records
