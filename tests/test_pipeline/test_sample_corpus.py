"""`pipeline sample-corpus`: every kind of page, the truth beside it (copies, Jaccard levels, boilerplate lines),
the same bytes for the same seed, and the same documents as JSON Lines or Parquet."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from wiki2bert_core.errors import ConfigError
from pipeline.stages.corpus.readers import Fields, find_files, read_documents, read_tasks
from pipeline.tools.sample_corpus import (DECK, LONG_ARTICLE_WORDS, NEAR_COPY_LEVELS, jaccard, word_shingles,
                                          write_sample_corpus)


def pages(pages_dir: Path) -> dict[str, tuple[str, str, str]]:
    """id -> (file, title, text) of a sample corpus, read as the corpus stage reads it."""
    files, root = find_files(str(pages_dir))
    tasks, _ = read_tasks(files, root, Fields(), "auto")
    return {document.record_id: (Path(task.path).name, document.title, document.text)
            for task in tasks for document in read_documents(task)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("sample") / "web"
    pages_dir = write_sample_corpus(out, docs=200, seed=3, files=3)
    return pages_dir, json.loads((out / "truth.json").read_text(encoding="utf-8"))


def test_every_kind_in_every_hundred_pages_and_the_truth_matches_the_files(corpus):
    pages_dir, truth = corpus
    assert collections.Counter(p["kind"] for p in truth["pages"][:100]) == collections.Counter(DECK)
    written = pages(pages_dir)
    assert [p["id"] for p in truth["pages"]] == list(written) and len(written) == 200
    lines = collections.defaultdict(list)
    for page in truth["pages"]:
        lines[page["file"]].append(page["line"])
        assert written[page["id"]][0] == page["file"] and page["words"] == len(written[page["id"]][2].split())
    assert sorted(lines) == ["web-00000.jsonl", "web-00001.jsonl", "web-00002.jsonl"]
    assert all(numbers == list(range(1, len(numbers) + 1)) for numbers in lines.values())


def test_copies_and_near_copies_at_their_measured_similarity(corpus):
    pages_dir, truth = corpus
    written = {ident: text for ident, (_, _, text) in pages(pages_dir).items()}
    near = [p for p in truth["pages"] if p["kind"] == "near_copy"]
    assert sorted({p["level"] for p in near}) == sorted(NEAR_COPY_LEVELS)
    for page in near:
        measured = jaccard(word_shingles(written[page["copy_of"]]), word_shingles(written[page["id"]]))
        assert page["jaccard"] == round(measured, 4) and abs(measured - page["level"]) <= 0.01, page
        assert written[page["copy_of"]] != written[page["id"]]  # 1.0 too: the same words, other lines and commas
    exact = [p for p in truth["pages"] if p["kind"] == "exact_copy"]
    assert exact and all(written[p["id"]] == written[p["copy_of"]] for p in exact)
    originals = {p["id"]: p["kind"] for p in truth["pages"]}
    assert {originals[p["copy_of"]] for p in near + exact} <= {"prose", "boilerplate"}
    # the web rules drop a line without terminal punctuation: a copy of prose keeps the original's periods
    of_prose = [p["id"] for p in near + exact if originals[p["copy_of"]] == "prose"]
    assert {p["level"] for p in near if p["id"] in of_prose} == set(NEAR_COPY_LEVELS)
    assert [line for ident in of_prose for line in written[ident].split("\n") if not line.endswith(".")] == []


def test_boilerplate_long_articles_and_the_noise_kinds(corpus):
    pages_dir, truth = corpus
    written = {ident: text for ident, (_, _, text) in pages(pages_dir).items()}
    by_kind = collections.defaultdict(list)
    for page in truth["pages"]:
        by_kind[page["kind"]].append(page)
    for page in by_kind["boilerplate"]:
        lines = written[page["id"]].split("\n")
        assert lines[:2] + lines[-3:] == page["boilerplate_lines"]
    assert all(p["words"] >= LONG_ARTICLE_WORDS for p in by_kind["long_article"])
    assert all("cookie" in written[p["id"]] or "JavaScript" in written[p["id"]] for p in by_kind["cookie_notice"])
    assert all("{" in written[p["id"]] for p in by_kind["code"])
    assert all("Lorem ipsum" in written[p["id"]] for p in by_kind["lorem_ipsum"])
    assert all(" the " in written[p["id"]] for p in by_kind["other_language"])


def test_same_seed_same_bytes_and_parquet_holds_the_same_pages(tmp_path, corpus):
    first = write_sample_corpus(tmp_path / "a", docs=120, seed=1)
    again = write_sample_corpus(tmp_path / "b", docs=120, seed=1)
    other = write_sample_corpus(tmp_path / "c", docs=120, seed=2)
    for name in ("pages/web-00000.jsonl", "pages/web-00001.jsonl", "truth.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a/pages/web-00000.jsonl").read_bytes() != (tmp_path / "c/pages/web-00000.jsonl").read_bytes()
    parquet = write_sample_corpus(tmp_path / "p", docs=120, seed=1, fmt="parquet")
    assert sorted(p.name for p in parquet.iterdir()) == ["web-00000.parquet", "web-00001.parquet"]
    assert [(i, t, x) for i, (_, t, x) in pages(parquet).items()] == \
        [(i, t, x) for i, (_, t, x) in pages(first).items()]
    assert other != first


def test_an_earlier_sample_is_replaced_whole_and_other_contents_are_refused(tmp_path):
    out = tmp_path / "web"
    write_sample_corpus(out, docs=30, files=3, seed=1)
    pages_dir = write_sample_corpus(out, docs=10, files=1, seed=1, fmt="parquet")
    assert sorted(p.name for p in pages_dir.iterdir()) == ["web-00000.parquet"]
    truth = json.loads((out / "truth.json").read_text(encoding="utf-8"))
    assert len(pages(pages_dir)) == len(truth["pages"]) == 10
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"web: holds notes\.txt, not only an earlier sample-corpus output"):
        write_sample_corpus(out, docs=10)
    (out / "notes.txt").unlink()
    (pages_dir / "mine.jsonl").write_text("{}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"web: holds pages/mine\.jsonl"):
        write_sample_corpus(out, docs=10)
    assert (pages_dir / "mine.jsonl").exists() and (pages_dir / "web-00000.parquet").exists()  # nothing removed


def test_workers_make_the_same_bytes_and_mb_sets_the_size(tmp_path, monkeypatch):
    """Blocks of BLOCK_PAGES pages made by worker processes: the same files and truth whatever the workers, ids
    numbered on across blocks; --mb asks for a size of page text."""
    import pipeline.tools.sample_corpus as sample_corpus
    from typer.testing import CliRunner
    from pipeline.cli import app

    monkeypatch.setattr(sample_corpus, "BLOCK_PAGES", 60)
    one = write_sample_corpus(tmp_path / "one", docs=150, seed=2, files=2, fmt="parquet")
    two = write_sample_corpus(tmp_path / "two", docs=150, seed=2, files=2, fmt="parquet", workers=2)
    assert [p.read_bytes() for p in sorted(one.iterdir())] == [p.read_bytes() for p in sorted(two.iterdir())]
    assert (tmp_path / "one" / "truth.json").read_bytes() == (tmp_path / "two" / "truth.json").read_bytes()
    truth = json.loads((tmp_path / "two" / "truth.json").read_text(encoding="utf-8"))["pages"]
    assert [page["id"] for page in truth] == [f"web-{n:06d}" for n in range(1, 151)]
    assert all(int(page["copy_of"][4:]) > 120 for page in truth[120:] if "copy_of" in page)  # its own block's

    monkeypatch.undo()
    result = CliRunner().invoke(app, ["sample-corpus", str(tmp_path / "mb"), "--mb", "1", "-q"])
    assert result.exit_code == 0, result.output
    text = sum(len(page[2].encode("utf-8")) for page in pages(Path(result.stdout.strip())).values())
    assert 0.9e6 < text < 1.1e6
