"""Stage extract on generated dumps: every layout, skips and their counts, templates, broken dumps, workers."""
from __future__ import annotations

import bz2
import gzip
import lzma
import collections
import dataclasses
import json
import re
from pathlib import Path

import pytest

from pipeline.tools import sample_dump as sample
import dump_writers
from pipeline.config import DEFAULT_CONFIG_PATH, load_pipeline_config
from wiki2bert_core.errors import DataError
from pipeline.stages.extract.dump import DumpFile
from pipeline.runner import read_manifest, run_stages
from pipeline.stages.extract import stage as extract
from pipeline.stages.hdf5.tokenize import WordCache
from wiki2bert_core.wordpiece import SPECIAL_TOKENS, load_tokenizer, read_vocab, special_token_ids, write_tokenizer_dir

HU = dict(redirect_words=["ÁTIRÁNYÍTÁS", "REDIRECT"], disambiguation_templates=["egyért"])


@pytest.fixture(scope="module")
def pages() -> list[sample.Page]:
    return sample.generate_pages(articles=90, seed=3)


@pytest.fixture(scope="module")
def multistream(tmp_path_factory, pages) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("multistream")
    dump, index = d / "x-multistream.xml.bz2", d / "x-multistream-index.txt.bz2"
    sample.write_multistream(pages, dump, index, pages_per_stream=10)
    return dump, index


@pytest.fixture(scope="module")
def reference(tmp_path_factory, multistream, run_extract) -> tuple[dict, list[dict], bytes]:
    return run_extract(tmp_path_factory.mktemp("ref"), *multistream)


@pytest.fixture(scope="session")
def run_extract(run_stage_function):
    def run_extract(tmp: Path, dump: Path, index: Path | None = None, workers: int = 1, **config):
        """Run the stage on a download/ directory made by hand; returns (counts, articles, bytes of all parts)."""
        download = tmp / "download"
        download.mkdir()
        (download / dump.name).symlink_to(dump)
        if index:
            (download / index.name).symlink_to(index)
        (download / "dump.json").write_text(json.dumps({"dump": dump.name, "index": index.name if index else None}))
        out, counts = run_stage_function(extract.run, extract.ExtractConfig(**{**HU, **config}), tmp,
                                         {"download": download}, "extract", workers)
        parts = sorted(out.glob("part-*.jsonl"))
        data = b"".join(p.read_bytes() for p in parts)
        return counts, [json.loads(line) for line in data.decode("utf-8").splitlines()], data
    return run_extract


def kept(pages) -> list[str]:
    return [p.title for p in pages if p.kind in sample.KEPT_KINDS]


def test_multistream_keeps_articles_and_counts_each_skip(pages, reference):
    counts, articles, _ = reference
    by_kind = collections.Counter(p.kind for p in pages)
    assert [a["title"] for a in articles] == kept(pages)  # dump order
    assert counts["pages"] == len(pages)
    assert counts["articles"] == len(articles)
    assert counts["skipped"] == {
        "namespace": sum(p.ns != 0 for p in pages),
        "redirect": by_kind["redirect"],
        "disambiguation": by_kind["disambiguation"],
        "empty": by_kind["empty"],
    }
    assert counts["templates"] == len(sample.TEMPLATES)
    # the generator makes redirects with only the text (no <redirect> element), in both spellings
    assert any(p.kind == "redirect" and p.redirect is None for p in pages)
    assert {re.match(r"#(\w+)", p.text).group(1) for p in pages if p.kind == "redirect"} >= {"ÁTIRÁNYÍTÁS", "REDIRECT"}
    assert any(p.kind == "disambiguation" and "__DISAMBIG__" in p.text for p in pages)


def test_articles_are_clean_text_with_ids_and_urls(pages, reference):
    _, articles, data = reference
    ids = {p.title: p.id for p in pages}
    for a in articles:
        assert set(a) == {"id", "title", "url", "text"}
        assert a["id"] == str(ids[a["title"]])
        assert a["url"] == f"https://hu.wikipedia.org/wiki?curid={a['id']}"
        assert a["text"].strip() and "\n\n" not in a["text"]
        for markup in ("[[", "]]", "{{", "}}", "<ref", "'''", "==", "Kategória:", "Fájl:", "&lt;", "&amp;"):
            assert markup not in a["text"], (markup, a["title"])
    assert "é".encode() in data and b"\\u00e9" not in data  # UTF-8, not ASCII-escaped
    settlement = next(a for a in articles if a["text"].startswith(a["title"] + " község"))
    assert any(f"\n{heading}.\n" in settlement["text"] for heading in sample.SECTION_TITLES["settlement"])  # headings


def population_templates(pages) -> list[tuple[str, str, str]]:
    """(title, template name, population) of the articles that call {{lakosság|N}} or its redirect {{népesség|N}}."""
    return [(p.title, m.group(1), m.group(2)) for p in pages if p.kind == "article"
            for m in [re.search(r"\{\{(lakosság|Lakosság|népesség)\|(\d+)\}\}", p.text)] if m]


def test_templates_expand_from_the_template_namespace(pages, reference):
    _, articles, _ = reference
    text = {a["title"]: a["text"] for a in articles}
    uses = population_templates(pages)
    assert {name for _, name, _ in uses} == {"lakosság", "Lakosság", "népesség"}  # népesség: a template redirect
    for title, _, population in uses:
        assert f"lakossága {population} fő." in text[title]
        assert "körülbelül" in text[title]  # {{kb}}
        assert "Lakosság ||" not in text[title]  # the infobox is a table: dropped


def test_templates_defined_after_the_articles_still_expand(tmp_path, pages, run_extract):
    last = [p for p in pages if p.kind != "template"] + [p for p in pages if p.kind == "template"]
    dump, index = tmp_path / "late-multistream.xml.bz2", tmp_path / "late-multistream-index.txt.bz2"
    sample.write_multistream(last, dump, index, pages_per_stream=10)
    counts, articles, _ = run_extract(tmp_path, dump, index, workers=2)
    assert counts["templates"] == len(sample.TEMPLATES)
    text = {a["title"]: a["text"] for a in articles}
    for title, _, population in population_templates(pages):
        assert f"lakossága {population} fő." in text[title]


def test_without_template_expansion_templates_are_dropped(tmp_path, multistream, run_extract):
    counts, articles, _ = run_extract(tmp_path, *multistream, expand_templates=False)
    assert counts["templates"] == 0
    assert not any(" fő." in a["text"] or "körülbelül" in a["text"] for a in articles)
    assert any("lakossága." in a["text"] for a in articles)


@pytest.mark.parametrize("layout", ["bz2", "xml", "utf-16"])
def test_every_layout_gives_the_same_articles(tmp_path, pages, reference, layout, run_extract):
    path = tmp_path / {"bz2": "dump.xml.bz2", "xml": "dump.xml", "utf-16": "dump16.xml"}[layout]
    if layout == "bz2":
        dump_writers.write_bz2(pages, path)
    else:
        dump_writers.write_xml(pages, path, "utf-16" if layout == "utf-16" else "utf-8")
    if layout == "utf-16":
        assert path.read_bytes()[:2] == b"\xff\xfe"
    counts, _, data = run_extract(tmp_path, path)
    assert data == reference[2]
    assert counts == reference[0]


def test_output_does_not_depend_on_workers(tmp_path, multistream, pages, monkeypatch, run_extract):
    runs = []
    for workers in (1, 2):
        (tmp_path / f"w{workers}").mkdir()
        runs.append(run_extract(tmp_path / f"w{workers}", *multistream, workers=workers, articles_per_part=25))
    assert runs[0][2] == runs[1][2]
    assert runs[0][0]["parts"] == -(-len(kept(pages)) // 25) == len(list((tmp_path / "w2/extract").glob("part-*")))
    # a sequential dump goes to the workers in batches, a few windows of them at a time
    monkeypatch.setattr(extract, "PAGES_PER_BATCH", 7)
    monkeypatch.setattr(extract, "BATCHES_PER_WINDOW", 2)
    single = tmp_path / "single.xml.bz2"
    dump_writers.write_bz2(pages, single)
    (tmp_path / "s").mkdir()
    assert run_extract(tmp_path / "s", single, workers=2, articles_per_part=25)[2] == runs[0][2]


def run_pipeline(tmp_path: Path, dump: Path, workers: int = 1):
    pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", values={"download": {"source": str(dump)}})
    lang_dir = tmp_path / "work" / "hu"
    run_stages(pcfg, lang_dir, ["download", "extract"], workers=workers, quiet=True)
    return lang_dir


def test_through_the_runner_with_the_sample_dump(tmp_path):
    dump = sample.write_sample_dump(tmp_path / "dl", articles=60, seed=5)
    lang_dir = run_pipeline(tmp_path, dump, workers=2)
    manifest = read_manifest(lang_dir / "extract")
    assert manifest["counts"]["articles"] == len(kept(sample.generate_pages(60, 5)))
    assert manifest["tools"]["wikiextractor"] == "3.1.0"
    assert list(manifest["outputs"]) == ["part-00000.jsonl"]


def test_truncated_multistream_names_file_and_stream_offset(tmp_path, pages):
    dump = tmp_path / "huwiki-cut-pages-articles-multistream.xml.bz2"
    index = tmp_path / "huwiki-cut-pages-articles-multistream-index.txt.bz2"  # found by download beside the dump
    offset = dump_writers.write_truncated_multistream(pages, dump, index)
    with pytest.raises(DataError, match=rf"{dump.name}: bz2 stream at byte {offset:,} is cut short"):
        run_pipeline(tmp_path, dump)
    lang_dir = tmp_path / "work" / "hu"
    assert not (lang_dir / "extract").exists() and not (lang_dir / ".extract.tmp").exists()
    assert (lang_dir / ".state" / "extract.failed").exists()


def test_dump_shorter_than_its_index(tmp_path, multistream, run_extract):
    dump, index = multistream
    cut = tmp_path / dump.name
    cut.write_bytes(dump.read_bytes()[:len(dump.read_bytes()) // 2])
    with pytest.raises(DataError, match=r"the index lists a stream at byte [\d,]+ but the file has [\d,]+ bytes"):
        run_extract(tmp_path, cut, index)


@pytest.mark.parametrize("layout", ["bz2", "xml"])
def test_truncated_sequential_dump(tmp_path, pages, layout, run_extract):
    path = tmp_path / f"dump.{'xml.bz2' if layout == 'bz2' else 'xml'}"
    (dump_writers.write_bz2 if layout == "bz2" else dump_writers.write_xml)(pages, path)
    path.write_bytes(path.read_bytes()[:path.stat().st_size * 2 // 3])
    expected = (r"near compressed byte [\d,]+: the compressed data ends before the end of its bz2 stream"
                if layout == "bz2" else r"near byte [\d,]+: ends inside page '.+' \(id \d+\)")
    with pytest.raises(DataError, match=rf"{path.name}: {expected}"):
        run_extract(tmp_path, path)


def test_missing_closing_tag_is_a_truncated_dump(tmp_path, pages, run_extract):
    path = tmp_path / "dump.xml"
    dump_writers.write_xml(pages, path)
    path.write_text(path.read_text(encoding="utf-8").replace(sample.CLOSING, ""), encoding="utf-8")
    with pytest.raises(DataError, match=r"ends before </mediawiki>"):
        run_extract(tmp_path, path)


@pytest.mark.parametrize("layout", ["multistream", "bz2", "xml"])
@pytest.mark.parametrize("fault, message", [
    ("</text>", r"page '.+' \(id {id}\): raw markup inside <text> \('<sha1>.*malformed XML"),
    ("  </page>\n", r"page '.+' \(id {id}\) has no </page> before the next <page>: malformed XML"),
])
def test_malformed_xml_names_the_page_and_where(tmp_path, pages, monkeypatch, layout, fault, message, run_extract):
    """A page missing </text> used to swallow the next page into its text, one missing </page> dropped a page."""
    broken = next(p for p in pages[12:] if p.text and p.ns == 0)
    page_xml = sample.page_xml
    monkeypatch.setattr(sample, "page_xml", lambda p: page_xml(p).replace(fault, "", 1) if p is broken else page_xml(p))
    path = tmp_path / {"multistream": "d-multistream.xml.bz2", "bz2": "d.xml.bz2", "xml": "d.xml"}[layout]
    index = tmp_path / "d-multistream-index.txt.bz2" if layout == "multistream" else None
    if index:
        sample.write_multistream(pages, path, index, pages_per_stream=10)
    else:
        (dump_writers.write_bz2 if layout == "bz2" else dump_writers.write_xml)(pages, path)
    where = r"stream at byte [\d,]+" if index else r"near (compressed )?byte [\d,]+"
    with pytest.raises(DataError, match=rf"{path.name}: {where}: {message.format(id=broken.id)}"):
        run_extract(tmp_path, path, index)


def test_corrupt_stream_and_foreign_index(tmp_path, pages, multistream, run_extract):
    dump, index = multistream
    data = bytearray(dump.read_bytes())
    offsets = sorted({int(line.split(":")[0]) for line in bz2.decompress(index.read_bytes()).decode().splitlines()})
    data[offsets[3] + 40:offsets[3] + 60] = b"x" * 20
    broken = tmp_path / "broken" / dump.name
    broken.parent.mkdir()
    broken.write_bytes(bytes(data))
    with pytest.raises(DataError, match=rf"{broken.name}: corrupt bz2 stream at byte {offsets[3]:,}"):
        run_extract(broken.parent, broken, index)

    other = tmp_path / "other"
    other.mkdir()
    sample.write_multistream(sample.generate_pages(90, seed=4), other / "o.xml.bz2", other / "o-index.txt.bz2",
                             pages_per_stream=10)
    with pytest.raises(DataError, match=rf"o-index.txt.bz2: lists a bz2 stream at byte [\d,]+ of \S+/{dump.name}, "
                                        r"which has none there: the index of another dump\?"):
        run_extract(other, dump, other / "o-index.txt.bz2")

    lines = bz2.decompress(index.read_bytes()).decode().splitlines(keepends=True)
    short = tmp_path / "short" / index.name  # the right offsets, but a page of the fourth stream left out
    short.parent.mkdir()
    fourth = [i for i, line in enumerate(lines) if int(line.split(":")[0]) == offsets[3]]
    short.write_bytes(bz2.compress("".join(lines[:fourth[0]] + lines[fourth[0] + 1:]).encode()))
    with pytest.raises(DataError, match=rf"{dump.name}: stream at byte {offsets[3]:,}: holds {len(fourth)} pages "
                                            rf"but the index lists {len(fourth) - 1}: does the index belong"):
        run_extract(short.parent, dump, short)


def test_an_index_of_a_longer_dump_is_named_as_such_not_as_a_truncated_dump(tmp_path, multistream, run_extract):
    dump, _ = multistream
    longer = tmp_path / "longer"
    longer.mkdir()
    sample.write_multistream(sample.generate_pages(400, seed=4), longer / "l-multistream.xml.bz2",
                             longer / "l-multistream-index.txt.bz2", pages_per_stream=10)
    with pytest.raises(DataError, match=rf"l-multistream-index.txt.bz2: lists a bz2 stream at byte [\d,]+, but "
                                        rf"\S+/{dump.name} ends complete at [\d,]+ bytes: the index of another dump\?"):
        run_extract(longer, dump, longer / "l-multistream-index.txt.bz2")


def test_damaged_bz2_is_reported_as_damage_not_as_bad_text(tmp_path, pages):
    """bzip2 checks a block's CRC after handing out its bytes, so damage often first shows as undecodable text."""
    path = tmp_path / "d.xml.bz2"
    dump_writers.write_bz2(pages, path)
    good = path.read_bytes()
    messages = []
    for position in range(300, len(good) - 100, len(good) // 25):
        damaged = bytearray(good)
        damaged[position] ^= 0x40
        path.write_bytes(bytes(damaged))
        with pytest.raises(DataError) as e:
            list(DumpFile(path, None).pages())
        messages.append(str(e.value))
    assert all("corrupt" in m and "utf-8" not in m and str(path) in m for m in messages), messages


def test_bad_namespace_names_the_file(tmp_path, pages, run_extract):
    path = tmp_path / "dump.xml"
    dump_writers.write_xml(pages[:5], path)
    text = path.read_text(encoding="utf-8")
    path.write_text(re.sub(r"<ns>\d+</ns>", "<ns>main</ns>", text, count=1), encoding="utf-8")
    with pytest.raises(DataError, match=r"dump.xml: near byte .*: bad namespace '<ns>main</ns>'"):
        run_extract(tmp_path, path)


def test_not_a_dump(tmp_path, run_extract):
    path = tmp_path / "notes.xml"
    path.write_text("<notes>\n  <page>\n    <title>x</title>\n  </page>\n</notes>\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"notes.xml: .*no <siteinfo>"):
        run_extract(tmp_path, path)


def test_no_articles_is_an_error(tmp_path, pages, run_extract):
    path = tmp_path / "talk.xml"
    dump_writers.write_xml([dataclasses.replace(p, ns=1) for p in pages[:20]], path)
    with pytest.raises(DataError, match=r"no articles found \(20 pages"):
        run_extract(tmp_path, path)


def test_redirect_and_disambiguation_markers(tmp_path, run_extract):
    texts = {
        "Egy": ("'''Egy''' jelentései: [[Egy (szám)]]. {{Egyért}}", "disambiguation"),
        "Kettő": ("'''Kettő''' lehet több dolog is.\n{{ egyért | szám }}", "disambiguation"),
        "Három": ("'''Három''' lehet több dolog is.\n__DISAMBIG__", "disambiguation"),
        "Négy": ("#átirányítás [[Egy]]", "redirect"),
        "Öt": ("  #REDIRECT[[Egy]]", "redirect"),
        "Hat": ("'''Hat''' egy szám, nem egyértelműsítő lap. {{egyért2}}", "article"),
        "Hét": ("'''Hét''' a hét napjainak száma, lásd #átirányítás.", "article"),
    }
    pages = [sample.Page(i, title, 0, text, kind) for i, (title, (text, kind)) in enumerate(texts.items(), 1)]
    dump_writers.write_xml(pages, tmp_path / "markers.xml")
    counts, articles, _ = run_extract(tmp_path, tmp_path / "markers.xml")
    assert [a["title"] for a in articles] == ["Hat", "Hét"]
    assert counts["skipped"] == {"namespace": 0, "redirect": 2, "disambiguation": 3, "empty": 0}


def test_articles_per_part_must_be_positive(tmp_path, multistream, run_extract):
    from wiki2bert_core.errors import ConfigError

    with pytest.raises(ConfigError, match="articles_per_part"):
        run_extract(tmp_path, *multistream, articles_per_part=0)


def test_literal_special_tokens_tokenize_alike_for_training_and_inference(tmp_path, run_extract):
    """A "[MASK]" written in an article: the data tokenizer splits it into pieces, transformers' tokenizer of the
    exported model would read it as the mask token; extract spaces it out so both give the same ids."""
    transformers = pytest.importorskip("transformers")
    text = "A BERT a [MASK] jelet tanulja, a [SEP] és [CLS] jel is [PAD] [UNK] lehet a szövegben."
    pages = [sample.Page(1, "BERT", 0, text, "article")]
    dump_writers.write_xml(pages, tmp_path / "special.xml")
    _, articles, _ = run_extract(tmp_path, tmp_path / "special.xml")
    extracted = articles[0]["text"]
    assert not re.search(r"\[(MASK|SEP|CLS|PAD|UNK)\]", extracted) and "[ MASK ]" in extracted
    words = sorted(set(re.findall(r"\w+", text.lower())) | {"[", "]", ",", "."})
    (tmp_path / "tok").mkdir()
    write_tokenizer_dir(tmp_path / "tok", list(SPECIAL_TOKENS) + words, lowercase=True)
    vocab = read_vocab(tmp_path / "tok" / "vocab.txt")
    training, _ = WordCache(load_tokenizer(tmp_path / "tok"), special_token_ids(vocab)).encode([extracted])
    inference = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    assert inference(extracted, add_special_tokens=False)["input_ids"] == training.tolist()
    assert vocab["mask"] in training.tolist() and vocab["[MASK]"] not in training.tolist()


@pytest.mark.parametrize("layout", ["xml", "multistream"])
def test_date_magic_words_take_the_dump_date(tmp_path, layout, run_extract):
    """{{CURRENTYEAR}} & co. expand to the date in the dump's name, else to its newest revision (not to 2000)."""
    text = "'''Ár''' 5 dollár ({{CURRENTYEAR}}. {{CURRENTMONTH}}. havi áron), és még egy mondat a lapon."
    pages = [sample.Page(i, f"Ár {i}", 0, text, "article") for i in (1, 2, 3)]  # revisions 2024-09-02 .. 2024-09-04
    if layout == "xml":
        dump, index = tmp_path / "huwiki-latest-pages-articles.xml", None
        dump_writers.write_xml(pages, dump)
    else:
        dump, index = tmp_path / "x-multistream.xml.bz2", tmp_path / "x-multistream-index.txt.bz2"
        sample.write_multistream(pages, dump, index, pages_per_stream=1)
    (tmp_path / "undated").mkdir()
    counts, articles, _ = run_extract(tmp_path / "undated", dump, index)
    assert counts["dump_date"] == "2024-09-04" and counts["dump_date_from"] == "newest revision timestamp"
    assert "(2024. 09. havi áron)" in articles[0]["text"] and "2000" not in articles[0]["text"]
    dated = tmp_path / "dated" / "huwiki-20231105-pages-articles.xml"
    dated.parent.mkdir()
    dump_writers.write_xml(pages, dated)
    counts, articles, _ = run_extract(tmp_path / "dated", dated)
    assert counts["dump_date"] == "2023-11-05" and counts["dump_date_from"] == "file name"
    assert "(2023. 11. havi áron)" in articles[0]["text"]


@pytest.mark.parametrize("suffix, compress", [(".xz", lzma.compress), (".gz", gzip.compress)])
def test_xz_and_gzip_dumps_read_like_plain_xml(tmp_path, pages, reference, suffix, compress, run_extract):
    plain = tmp_path / "dump.xml"
    dump_writers.write_xml(pages, plain)
    dump = tmp_path / f"dump.xml{suffix}"
    dump.write_bytes(compress(plain.read_bytes()))
    (tmp_path / "ok").mkdir()
    counts, articles, data = run_extract(tmp_path / "ok", dump, workers=2)
    assert data == reference[2] and counts["articles"] == reference[0]["articles"]
    dump.write_bytes(dump.read_bytes()[:dump.stat().st_size * 2 // 3])
    (tmp_path / "cut").mkdir()
    name = {".xz": "xz", ".gz": "gzip"}[suffix]
    with pytest.raises(DataError, match=rf"{dump.name}: near compressed byte [\d,]+: the compressed data ends "
                                            rf"before the end of its {name} stream: truncated dump"):
        run_extract(tmp_path / "cut", dump)


@pytest.mark.parametrize("layout", ["xml", "multistream"])
def test_allow_truncated_keeps_the_complete_pages_and_says_where_it_stopped(tmp_path, pages, reference, layout,
                                                                           run_extract):
    if layout == "xml":
        dump, index = tmp_path / "dump.xml", None
        dump_writers.write_xml(pages, dump)
        dump.write_text(dump.read_text(encoding="utf-8").replace(sample.CLOSING, ""), encoding="utf-8")
    else:
        dump, index = tmp_path / "x-multistream.xml.bz2", tmp_path / "x-multistream-index.txt.bz2"
        sample.write_multistream(pages, dump, index, pages_per_stream=10)
        data = dump.read_bytes()
        closing = bz2.compress(sample.CLOSING.encode())
        assert data.endswith(closing)
        dump.write_bytes(data[:-len(closing)])
    (tmp_path / "refused").mkdir()
    with pytest.raises(DataError, match=r"ends before </mediawiki> .*extract.allow_truncated: true keeps"):
        run_extract(tmp_path / "refused", dump, index)
    (tmp_path / "kept").mkdir()
    counts, articles, data = run_extract(tmp_path / "kept", dump, index, allow_truncated=True)
    assert data == reference[2]
    assert re.search(rf"{dump.name}: .*ends before </mediawiki>, after page '{re.escape(pages[-1].title)}'",
                     counts["truncated"])


def test_headings_in_scripts_without_spaces_get_no_latin_period(tmp_path, run_extract):
    """wikiextractor ends every heading with "." ("Története."): a heading mostly in a script written without
    spaces keeps none ("歴史", not "歴史."), other headings keep it as before."""
    body = "東京は日本の首都である。人口は多い。"
    texts = {"東京": f"{body}\n== 歴史 ==\n{body}\n== JR東日本の駅 ==\n{body}\n== Discography ==\n{body}\n"
                     f"=== なぜ？ ===\n{body}",
             "Budapest": "Budapest a főváros.\n== Története ==\nRégi város.\n== Miért? ==\nMert szép."}
    pages = [sample.Page(i, title, 0, text, "article") for i, (title, text) in enumerate(texts.items(), 1)]
    dump_writers.write_xml(pages, tmp_path / "headings.xml")
    _, articles, _ = run_extract(tmp_path, tmp_path / "headings.xml")
    assert articles[0]["text"].split("\n") == [body, "歴史", body, "JR東日本の駅", body, "Discography.", body,
                                               "なぜ？", body]
    assert articles[1]["text"].split("\n") == ["Budapest a főváros.", "Története.", "Régi város.", "Miért?",
                                               "Mert szép."]


def test_brackets_emptied_by_templates_are_removed(tmp_path, run_extract):
    """Templates that expand to nothing (not in the dump) leave "()", "（）", "(; born", "（、" behind: extract
    removes those, and keeps brackets that hold something (a symbol, even a lone separator; code's "f()"; an
    ordinal)."""
    texts = {
        "東京都": "'''東京都'''（{{lang-en|Tokyo}}）は日本の首都である。'''新宿'''（しんじゅく、{{lang-en|Shinjuku}}）は"
                  "区である。'''山田'''（{{lang-en|Yamada}}、1950年 - ）は作家。'''鈴木'''（{{lang-en|Suzuki}}、"
                  "{{lang-fr|Suzuki}}、{{IPA|s}}）は画家。読点（、）を打つ。",
        "Lybster": "'''Lybster''' ({{IPA|x}}) is a village. '''Savas''' ({{IPA|y}}; {{lang|el|z}}; born 1952) is a "
                   "physicist. '''Odanad''' ({{lang|ml|w}}, \"ōṭānāṭŭ\") is a town. It cost $5 ({{inflation}}). "
                   "A semicolon (;) separates. Near ( {{lang|x}} ) here.",
        "Függvény": "A HAMIS() függvény mínusz (-) jelet ad, IV. Béla (1235–1270) (2.) fejezet. Vége. () (zárójel)",
    }
    pages = [sample.Page(i, title, 0, text, "article") for i, (title, text) in enumerate(texts.items(), 1)]
    dump_writers.write_xml(pages, tmp_path / "brackets.xml")
    _, articles, _ = run_extract(tmp_path, tmp_path / "brackets.xml")
    assert [a["text"] for a in articles] == [
        "東京都は日本の首都である。新宿（しんじゅく）は区である。山田（1950年 - ）は作家。鈴木は画家。読点（、）を打つ。",
        "Lybster is a village. Savas (born 1952) is a physicist. Odanad (\"ōṭānāṭŭ\") is a town. It cost $5. "
        "A semicolon (;) separates. Near here.",
        "A HAMIS() függvény mínusz (-) jelet ad, IV. Béla (1235–1270) (2.) fejezet. Vége. () (zárójel)",
    ]
