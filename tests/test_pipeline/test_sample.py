"""The generated sample dump: deterministic, Wikimedia's multistream layout, every kind of page, usable Hungarian."""
from __future__ import annotations

import bz2
import collections
import json

import pytest
from typer.testing import CliRunner

from pipeline.tools import sample_dump as sample
from pipeline.cli import app
from pipeline.tools.sample_dump import inflect, year_inessive
from pipeline.config import DEFAULT_CONFIG_PATH, load_pipeline_config
from pipeline.runner import run_stages


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    return sample.write_sample_dump(tmp_path_factory.mktemp("sample"), articles=150, seed=1)


def test_same_seed_same_bytes(tmp_path, dump):
    again = sample.write_sample_dump(tmp_path / "again", articles=150, seed=1)
    assert again.read_bytes() == dump.read_bytes()
    assert (again.parent / sample.INDEX_NAME).read_bytes() == (dump.parent / sample.INDEX_NAME).read_bytes()
    other = sample.write_sample_dump(tmp_path / "other", articles=150, seed=2)
    assert other.read_bytes() != dump.read_bytes()


def test_multistream_layout_and_index(dump):
    data = dump.read_bytes()
    index = bz2.decompress((dump.parent / sample.INDEX_NAME).read_bytes()).decode("utf-8").splitlines()
    offsets = sorted({int(line.split(":", 1)[0]) for line in index})
    first = bz2.BZ2Decompressor()
    head = first.decompress(data[:offsets[0]]).decode("utf-8")
    assert first.eof and not first.unused_data
    assert head.startswith("<mediawiki ") and head.rstrip().endswith("</siteinfo>") and "<page>" not in head
    assert '<namespace key="10" case="first-letter">Sablon</namespace>' in head
    pages = sample.generate_pages(150, 1)
    assert [line.split(":", 2)[1:] for line in index] == [[str(p.id), p.title] for p in pages]
    ends = offsets[1:] + [len(data)]
    for i, (start, end) in enumerate(zip(offsets, ends)):
        d = bz2.BZ2Decompressor()
        text = d.decompress(data[start:end]).decode("utf-8")
        assert d.eof and text.startswith("  <page>\n") and text.count("<page>") == min(100, len(pages) - 100 * i)
        if end == len(data):  # the closing stream follows the last page stream
            assert bz2.decompress(d.unused_data) == b"</mediawiki>\n"
        else:
            assert not d.unused_data


def test_every_kind_of_page_is_there():
    pages = sample.generate_pages(400, 0)
    kinds = collections.Counter(p.kind for p in pages)
    assert kinds["article"] == 400
    assert all(kinds[k] >= 2 for k in ("stub", "english", "redirect", "disambiguation", "empty", "template", "talk",
                                         "category", "file"))
    assert [p.id for p in pages] == list(range(1, len(pages) + 1))
    assert len({p.title for p in pages}) == len(pages)
    articles = "\n".join(p.text for p in pages if p.kind == "article")
    for markup in ("'''", "[[", "|", "{{Település infobox", "{{Személy infobox", "<ref", "<references />", "== ",
                   "[[Kategória:", "[[Fájl:", "{{kb}}"):
        assert markup in articles
    assert all(c in articles for c in "áéíóöőúüű")
    assert any(p.text.startswith("#ÁTIRÁNYÍTÁS [[") for p in pages if p.kind == "redirect")
    assert any("{{egyért}}" in p.text.lower() for p in pages if p.kind == "disambiguation")
    assert {p.title for p in pages if p.ns == 10} == set(sample.TEMPLATES)
    assert all(p.title.startswith("Vita:") for p in pages if p.kind == "talk")


@pytest.mark.parametrize("noun, case, form", [
    ("ház*", "acc", "házat"), ("ház*", "pl", "házak"), ("alma", "ine", "almában"), ("kert", "ins", "kerttel"),
    ("gyümölcs", "acc", "gyümölcsöt"), ("kocsi", "pl", "kocsik"), ("papír", "ine", "papírban"),
    ("polgármester", "pl", "polgármesterek"), ("erdő", "all", "erdőhöz"), ("busz", "ins", "busszal"),
    ("király", "acc", "királyt"), ("templom", "acc", "templomot"), ("kastély", "ine", "kastélyban"),
])
def test_inflection(noun, case, form):
    assert inflect(noun, case) == form


@pytest.mark.parametrize("year, form", [(1867, "1867-ben"), (1848, "1848-ban"), (1900, "1900-ban"),
                                        (2000, "2000-ben"), (1956, "1956-ban"), (1920, "1920-ban")])
def test_year_suffix_follows_the_spoken_number(year, form):
    assert year_inessive(year) == form


def test_extracted_articles_pass_the_hungarian_filter(tmp_path, dump):
    """What the demo needs: the real stages with the hu profile keep every article and drop only the English
    pages (language) and the stubs (too short)."""
    pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", [], {"download": {"source": str(dump)}})
    run_stages(pcfg, tmp_path / "hu", ["download", "extract", "sentences", "filter"], quiet=True)
    report = json.loads((tmp_path / "hu" / "filter" / "report.json").read_text(encoding="utf-8"))
    kinds = collections.Counter(p.kind for p in sample.generate_pages(150, 1))
    titles = {kind: {p.title for p in sample.generate_pages(150, 1) if p.kind == kind} for kind in kinds}
    assert report["language_check"] == "py3langid: hu"
    assert report["documents"] == {"in": kinds["article"] + kinds["english"] + kinds["stub"],
                                   "kept": kinds["article"], "dropped": kinds["english"] + kinds["stub"],
                                   "written": kinds["article"]}
    dropped = report["dropped"]
    assert dropped["language"]["documents"] == kinds["english"]
    assert {e["document"] for e in dropped["language"]["examples"]} == titles["english"]
    assert sum(d["documents"] for reason, d in dropped.items() if reason != "language") == kinds["stub"]
    assert all({e["document"] for e in d["examples"]} <= titles["stub"]
               for reason, d in dropped.items() if reason != "language")


def test_cli_writes_the_dump_and_prints_its_path(tmp_path):
    result = CliRunner().invoke(app, ["sample-dump", str(tmp_path / "out"), "--pages", "30", "--seed", "4"])
    assert result.exit_code == 0, result.output
    path = tmp_path / "out" / sample.DUMP_NAME
    assert result.stdout.strip() == str(path)  # the progress bar goes to stderr
    assert path.is_file() and (tmp_path / "out" / sample.INDEX_NAME).is_file()
    assert path.read_bytes() == sample.write_sample_dump(tmp_path / "again", 30, 4).read_bytes()


def test_dumps_of_many_blocks_keep_titles_unique_and_the_first_block_as_before(tmp_path, monkeypatch):
    """Past BLOCK_ARTICLES the dump goes on block by block (the old generator ran out of titles at ~15,000)."""
    monkeypatch.setattr(sample, "BLOCK_ARTICLES", 40)
    pages = list(sample.iter_pages(100, 3))
    assert sum(p.kind == "article" for p in pages) == 100
    assert [p.id for p in pages] == list(range(1, len(pages) + 1))
    assert len({p.title for p in pages}) == len(pages)
    assert pages[:len(first := sample.generate_pages(40, 3))] == first
    assert sum(p.ns == 10 for p in pages) == len(sample.TEMPLATES)
    assert all(" (2)" in p.title or " (3)" in p.title for p in pages[len(first):])

    dump = sample.write_sample_dump(tmp_path, 100, 3)
    index = bz2.decompress((tmp_path / sample.INDEX_NAME).read_bytes()).decode("utf-8").splitlines()
    assert [line.split(":", 2)[1:] for line in index] == [[str(p.id), p.title] for p in pages]
    assert bz2.decompress(dump.read_bytes()).decode("utf-8").count("<page>") == len(pages)


def test_workers_make_the_same_bytes_block_by_block(tmp_path, monkeypatch):
    """--workers makes the blocks in worker processes; each block's pages start a new stream, and the dump's bytes
    do not depend on the number of workers."""
    monkeypatch.setattr(sample, "BLOCK_ARTICLES", 40)
    one = sample.write_sample_dump(tmp_path / "one", 100, 3)
    two = sample.write_sample_dump(tmp_path / "two", 100, 3, workers=2)
    assert one.read_bytes() == two.read_bytes()
    assert (tmp_path / "one" / sample.INDEX_NAME).read_bytes() == (tmp_path / "two" / sample.INDEX_NAME).read_bytes()
    index = bz2.decompress((tmp_path / "two" / sample.INDEX_NAME).read_bytes()).decode("utf-8").splitlines()
    offsets = {}
    for line in index:
        offset, page_id, _ = line.split(":", 2)
        offsets.setdefault(int(offset), []).append(int(page_id))
    first_of_block_2 = len(sample.generate_pages(40, 3)) + 1
    assert any(ids[0] == first_of_block_2 for ids in offsets.values())  # block 2 starts a stream


def test_mb_sets_the_size_of_the_dump(tmp_path):
    result = CliRunner().invoke(app, ["sample-dump", str(tmp_path / "out"), "--mb", "0.5", "-q"])
    assert result.exit_code == 0, result.output
    xml = bz2.decompress((tmp_path / "out" / sample.DUMP_NAME).read_bytes())
    assert 0.45e6 < len(xml) < 0.55e6
    result = CliRunner().invoke(app, ["sample-dump", str(tmp_path / "fi"), "--mb", "0.5", "--lang", "fi"])
    assert "--mb: only with --lang hu" in str(result.exception)
