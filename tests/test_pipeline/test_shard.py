"""The `shard` stage: balance, whole documents, nothing lost or added, test fraction, determinism, bounded memory,
and clear errors; plus dedup, vocab and shard run through the runner behind a toy filter stage."""
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
from pipeline.text_files import (DocumentRecord, iter_documents, iter_documents_with_records, list_parts, records_path,
                                 write_record)
from pipeline.runner import read_manifest, run_stages
from pipeline.stages import Stage, StageCounts
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
        return run_stage_function(run, ShardConfig(**config), tmp_path, {"dedup": filter_dir}, name, workers)
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


@pytest.mark.slow
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
    (empty / "part-00000.docs.jsonl").unlink()
    with pytest.raises(DataError, match=r"part-00000\.docs\.jsonl: missing: the records of the documents of "
                                        r"part-00000\.txt \(made by a version before document records\?"):
        run_shard(tmp_path, empty, "no-records", num_shards=2)
    bad = make_corpus(tmp_path / "bad", documents=20)
    (bad / "part-00002.txt").write_bytes(b"Egy mondat.\nRossz \xff b\xe1jt.\n\n")
    with pytest.raises(DataError, match=r"bad/part-00002\.txt: line 2: not UTF-8"):
        run_shard(tmp_path, bad, "out2", num_shards=2)
    with pytest.raises(ConfigError, match="^num_shards: must be at least 1, got 0$"):
        ShardConfig(num_shards=0)
    with pytest.raises(ConfigError, match="^test_fraction: "):
        ShardConfig(test_fraction=1.0)


@dataclasses.dataclass(frozen=True)
class _ToyFilterConfig:
    documents: int = 400


@pytest.fixture(scope="session")
def toy_filter(make_corpus):
    def toy_filter(config: _ToyFilterConfig, ctx) -> StageCounts:
        make_corpus(ctx.out_dir, config.documents, parts=2)
        for part in list_parts(ctx.out_dir, ".txt"):
            with open(records_path(part), "w", encoding="utf-8") as records:
                for n, _ in enumerate(iter_documents(part)):
                    write_record(records, DocumentRecord("wikipedia", f"{part.stem}-{n}"))
        kept = {"documents_kept": config.documents, "documents_written": config.documents}
        return StageCounts(kept, sources={"wikipedia": kept})
    return toy_filter


def test_dedup_vocab_and_shard_through_the_runner(tmp_path, monkeypatch, toy_filter):
    monkeypatch.setitem(sys.modules, "pipeline.stages.filter",
                        types.SimpleNamespace(STAGE=Stage("filter", _ToyFilterConfig, toy_filter)))
    config = tmp_path / "stages.yaml"
    config.write_text("stages: [filter, dedup, vocab, shard]\n"
                      "defaults:\n  vocab: {vocab_size: 300}\n  shard: {num_shards: 4}\n"
                      "languages:\n  default: {}\n", encoding="utf-8")
    pcfg = load_pipeline_config(config, "hu")
    run_stages(pcfg, tmp_path / "hu", ["filter", "dedup", "vocab", "shard"], workers=2, quiet=True)
    vocab, shard = read_manifest(tmp_path / "hu" / "vocab"), read_manifest(tmp_path / "hu" / "shard")
    assert vocab["counts"]["special_token_ids"]["[UNK]"] == 101 and "sentencepiece" in vocab["tools"]
    assert set(vocab["outputs"]) == {"vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    assert shard["counts"]["training_shards"] == 4 and len(shard["outputs"]) == 10  # 5 shards and their records


# --- mixing sources by weight ---------------------------------------------------------------------------------

SOURCES = ("wikipedia", "web", "news")


@pytest.fixture(scope="module")
def mixed_corpus(tmp_path_factory, write_document_parts) -> tuple[Path, dict[str, int]]:
    """3,000 documents of three sources (sizes vary ~20x), and each source's tokens."""
    rng = random.Random(5)
    docs, records, tokens = [], [], collections.Counter()
    for d in range(3000):
        source = SOURCES[d % 3]
        doc = [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + "." for _ in range(rng.randint(2, 30))]
        docs.append(doc)
        records.append(DocumentRecord(source, f"{source}-{d}", f"Cím {d}"))
        tokens[source] += sum(len(s.split()) for s in doc)
    return write_document_parts(tmp_path_factory.mktemp("mixed") / "filter", docs, 4, records), tokens


def _training_tokens(out: Path) -> collections.Counter:
    tokens = collections.Counter()
    for shard_file in out.glob("training_*.txt"):
        for record, doc in iter_documents_with_records(shard_file):
            tokens[record.source] += sum(len(s.split()) for s in doc)
    return tokens


@pytest.mark.parametrize("weights", [{"web": 2.0, "news": 0.3}, {"wikipedia": 0.5, "web": 1.5, "news": 3.25}])
def test_weights_give_the_stated_token_shares(tmp_path, mixed_corpus, run_shard, weights):
    corpus, tokens = mixed_corpus
    out, counts = run_shard(tmp_path, corpus, num_shards=8, test_fraction=0.0, weights=weights)
    wanted = {s: weights.get(s, 1.0) * tokens[s] for s in SOURCES}
    got = _training_tokens(out)
    for source in SOURCES:
        share, stated = got[source] / sum(got.values()), wanted[source] / sum(wanted.values())
        assert abs(share - stated) <= 0.01 * stated, (source, share, stated)
        assert counts["sources"][source]["training_tokens"] == got[source]
        assert counts["sources"][source]["training_share"] == pytest.approx(share, abs=1e-6)
        assert counts["sources"][source]["weight"] == weights.get(source, 1.0)


def test_fractional_weights_pick_documents_by_their_own_hash_and_copies_go_to_other_shards(
        tmp_path, mixed_corpus, run_shard, write_document_parts):
    corpus, _ = mixed_corpus
    weights = {"web": 2.0, "news": 0.4}
    out, counts = run_shard(tmp_path, corpus, "out", num_shards=8, test_fraction=0.0, weights=weights)
    documents = [(record, doc) for part in sorted(corpus.glob("part-*.txt"))
                 for record, doc in iter_documents_with_records(part)]
    reversed_dir = write_document_parts(tmp_path / "reversed", [d for _, d in documents[::-1]], 3,
                                        [r for r, _ in documents[::-1]])
    again, _ = run_shard(tmp_path, reversed_dir, "again", num_shards=8, test_fraction=0.0, weights=weights)

    def copies(directory: Path) -> dict[tuple, list[int]]:
        found = collections.defaultdict(list)
        for shard_file in sorted(directory.glob("training_*.txt")):
            for record, _ in iter_documents_with_records(shard_file):
                found[(record.source, record.id)].append(int(shard_file.stem[-4:]))
        return found

    placed = copies(out)
    assert {key for key in placed if key[0] == "news"} == {key for key in copies(again) if key[0] == "news"}
    assert all(len(shards) == 1 for key, shards in placed.items() if key[0] != "web")
    assert all(len(shards) == 2 and shards[0] != shards[1] for key, shards in placed.items() if key[0] == "web")
    assert len([k for k in placed if k[0] == "web"]) == 1000 and 300 < len([k for k in placed if k[0] == "news"]) < 500
    assert counts["training_documents"] == sum(map(len, placed.values()))
    second = [r for f in out.glob("training_*.txt") for r, _ in iter_documents_with_records(f) if "copy" in r.extra]
    assert len(second) == 1000 and {r.extra["copy"] for r in second} == {1}


def test_default_weights_are_the_unweighted_shards_byte_for_byte(tmp_path, mixed_corpus, run_shard):
    corpus, _ = mixed_corpus
    plain, _ = run_shard(tmp_path, corpus, "plain", num_shards=5)
    ones, _ = run_shard(tmp_path, corpus, "ones", num_shards=5, weights={"wikipedia": 1.0, "web": 1, "news": 1})
    assert sorted(p.name for p in plain.iterdir()) == sorted(p.name for p in ones.iterdir())
    assert all((plain / p.name).read_bytes() == (ones / p.name).read_bytes() for p in plain.iterdir())
    zero, counts = run_shard(tmp_path, corpus, "zero", num_shards=5, weights={"news": 0})
    assert counts["sources"]["news"]["training_documents"] == 0 and _training_tokens(zero)["news"] == 0
    assert _documents(zero.glob("test_*.txt")) == _documents(plain.glob("test_*.txt"))  # the test split unweighted
    with pytest.raises(ConfigError, match="every training document has weight 0"):
        run_shard(tmp_path, corpus, "none", weights={s: 0 for s in SOURCES})
