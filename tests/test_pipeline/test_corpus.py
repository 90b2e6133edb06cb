"""The `corpus` stage and the `--corpus` flag: every format reads to the same documents, directories and globs,
ids and titles, bad input in one line naming the file, and which stages have work with and without corpora."""
from __future__ import annotations

import collections
import gzip
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from wiki2bert_core.errors import ConfigError, DataError
from pipeline.config import DEFAULT_CONFIG_PATH, load_pipeline_config
from pipeline.runner import MANIFEST, read_manifest, run_stages, status_rows
from pipeline.sources import corpus_flag_values, default_name, parse_corpus_flag
from pipeline.stages import InputLabel
from pipeline.stages.corpus import readers
from pipeline.stages.corpus.stage import CorpusConfig, CorpusSource, corpus_fingerprints, run
from pipeline.text_files import iter_jsonl

DOCUMENTS = [
    {"id": "d1", "title": "Első", "text": "Az alma piros és édes.\nA körte sárga, a szilva kék."},
    {"id": 7, "title": "Második", "text": "Ünnepi sütemény készül.\nŐszi árvíz a völgyben.\nHarmadik bekezdés."},
    {"id": "d3", "text": "Egyetlen bekezdés, cím nélkül."},
    {"id": "d4", "title": "Üres", "text": " \n "},
    {"id": None, "title": "Negyedik", "text": "Id nélkül: a fájl és a sor adja."},
]


def write_jsonl(path: Path, records: list[dict], opener=open) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    if opener is zstandard:
        path.write_bytes(zstandard.ZstdCompressor().compress(data[:len(data) // 2])
                         + zstandard.ZstdCompressor().compress(data[len(data) // 2:]))  # two frames
    else:
        with opener(path, "wb") as f:
            f.write(data)
    return path


def write_parquet(path: Path, records: list[dict], row_group_size: int = 2, **columns) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{"id": None if r.get("id") is None else str(r["id"]), "title": r.get("title"),
                                   "text": r["text"]} for r in records])
    pq.write_table(table.rename_columns([columns.get(c, c) for c in table.column_names]), path,
                   row_group_size=row_group_size)
    return path


def write_text(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(r["text"] for r in records if r["text"].strip()) + "\n", encoding="utf-8")
    return path


def corpus_documents(out_dir: Path, key: str = "record_id") -> dict[str, list[tuple]]:
    """source -> [(the record's `key`: its own id, or "id" where it is, title, text)] of the corpus stage's parts, in
    order."""
    documents: dict[str, list[tuple]] = {}
    for part in sorted(out_dir.glob("part-*.jsonl")):
        for record in iter_jsonl(part):
            documents.setdefault(record["source"], []).append((record.get(key), record["title"], record["text"]))
    return documents


@pytest.fixture(scope="session")
def run_corpus(run_stage_function):
    def run_corpus(tmp_path: Path, sources: dict[str, dict], name: str = "out", workers: int = 1, **config):
        return run_stage_function(run, CorpusConfig({n: CorpusSource(**s) for n, s in sources.items()}, **config),
                                  tmp_path, {}, name, workers)
    return run_corpus


def test_each_format_reads_to_the_same_documents(tmp_path, run_corpus):
    files = {"plain": write_jsonl(tmp_path / "c" / "docs.jsonl", DOCUMENTS),
             "gzipped": write_jsonl(tmp_path / "c" / "docs.jsonl.gz", DOCUMENTS, gzip.open),
             "zstd": write_jsonl(tmp_path / "c" / "docs.jsonl.zst", DOCUMENTS, zstandard),
             "parquet": write_parquet(tmp_path / "c" / "docs.parquet", DOCUMENTS),
             "text": write_text(tmp_path / "c" / "docs.txt", DOCUMENTS)}
    assert pq.ParquetFile(files["parquet"]).metadata.num_row_groups == 3  # a task each
    out, counts = run_corpus(tmp_path, {name: {"path": str(path)} for name, path in files.items()},
                             documents_per_part=2)
    documents = corpus_documents(out)
    expected = [("d1", "Első", DOCUMENTS[0]["text"]), ("7", "Második", DOCUMENTS[1]["text"]),
                ("d3", "", DOCUMENTS[2]["text"])]
    located = corpus_documents(out, "id")
    for name in ("plain", "gzipped", "zstd", "parquet"):
        file = files[name].name
        assert documents[name] == expected + [(None, "Negyedik", DOCUMENTS[4]["text"])], name
        assert [i for i, _, _ in located[name]] == [f"{file}:{n}" for n in (1, 2, 3, 5)]  # named by line (or row)
        assert counts["sources"][name]["documents"] == 4 and counts["sources"][name]["empty"] == 1
    assert [(t, text) for _, t, text in documents["text"]] == [("", text) for _, _, text in expected] + [
        ("", DOCUMENTS[4]["text"])]
    assert [i for i, _, _ in located["text"]] == ["docs.txt:1", "docs.txt:4", "docs.txt:8", "docs.txt:10"]
    assert counts["documents"] == 20 and counts["files"] == 5
    assert sorted(p.name for p in out.glob("part-parquet-*")) == [
        "part-parquet-00000-00000.jsonl", "part-parquet-00001-00000.jsonl", "part-parquet-00002-00000.jsonl"]
    assert len(list(out.glob("part-plain-00000-*.jsonl"))) == 2  # documents_per_part=2


def test_same_bytes_whatever_the_workers_and_the_order_of_the_sources(tmp_path, run_corpus):
    web = write_parquet(tmp_path / "web.parquet", DOCUMENTS * 5, row_group_size=3)
    news = write_jsonl(tmp_path / "news" / "a.jsonl", DOCUMENTS)
    write_jsonl(tmp_path / "news" / "b" / "c.jsonl.gz", DOCUMENTS[:2], gzip.open)
    one, _ = run_corpus(tmp_path, {"web": {"path": str(web)}, "news": {"path": str(news.parent)}}, "one",
                        documents_per_part=6)
    two, _ = run_corpus(tmp_path, {"news": {"path": str(news.parent)}, "web": {"path": str(web)}}, "two", workers=2,
                        documents_per_part=6)
    names = sorted(p.name for p in one.iterdir())
    # 9 row groups of 3 rows (the last 1) read as 5 tasks of 2 groups (the last 1), 2 files
    assert names == sorted(p.name for p in two.iterdir()) and len(names) == 7
    assert all((one / n).read_bytes() == (two / n).read_bytes() for n in names)
    assert [i for i, _, _ in corpus_documents(one)["news"]] == ["d1", "7", "d3", None, "d1", "7"]
    assert [i for i, _, _ in corpus_documents(one, "id")["news"]] == ["a.jsonl:1", "a.jsonl:2", "a.jsonl:3",
                                                                       "a.jsonl:5", "b/c.jsonl.gz:1", "b/c.jsonl.gz:2"]


def test_directories_globs_and_fields(tmp_path, run_corpus, caplog):
    root = tmp_path / "crawl"
    write_jsonl(root / "2024" / "a.jsonl", [{"content": "Első oldal.", "url": "https://a.hu/1"}])
    write_jsonl(root / "2025" / "b.jsonl", [{"content": "Második oldal.", "url": "https://a.hu/2"}])
    write_jsonl(root / ".cache" / "c.jsonl", [{"content": "Rejtett."}])
    (root / "README.md").write_text("# not a corpus file\n", encoding="utf-8")
    fields = {"text_field": "content", "title_field": "url"}
    out, counts = run_corpus(tmp_path, {"dir": {"path": str(root), **fields},
                                        "glob": {"path": str(root / "**" / "*.jsonl"), **fields}})
    documents = corpus_documents(out, "id")
    assert documents["dir"] == [("2024/a.jsonl:1", "https://a.hu/1", "Első oldal."),
                                ("2025/b.jsonl:1", "https://a.hu/2", "Második oldal.")]
    assert documents["glob"] == documents["dir"]  # ** crosses directories; hidden directories are left out...
    assert "1 file(s) of no corpus format left out (e.g. README.md)" in caplog.text  # ...README.md too, said so


@pytest.mark.parametrize("name, write, error, message", [
    ("malformed JSON line", lambda d: (d / "a.jsonl").write_text('{"text": "jó"}\n{"text": "rossz",}\n'),
     DataError, r"a\.jsonl: line 2: invalid JSON"),
    ("record without the text field", lambda d: write_jsonl(d / "a.jsonl", [{"text": "jó"}, {"body": "x"}]),
     DataError, r"a\.jsonl: line 2: no field 'text' \(fields: body\); set the source's text_field"),
    ("text that is not a string", lambda d: write_jsonl(d / "a.jsonl", [{"text": ["x"]}]),
     DataError, r"a\.jsonl: line 1: a list, not a string, in field 'text'"),
    ("Parquet file without the column", lambda d: write_parquet(d / "a.parquet", DOCUMENTS, text="body"),
     ConfigError, r"a\.parquet: no column 'text' \(columns: id, title, body\); set the source's text_field"),
    ("not a Parquet file", lambda d: (d / "a.parquet").write_bytes(b"PAR1 but not really"),
     DataError, r"a\.parquet: not a Parquet file"),
    ("non-UTF-8 bytes", lambda d: (d / "a.jsonl").write_bytes(b'{"text": "j\xf3"}\n'),
     DataError, r"a\.jsonl: line 1: not UTF-8 \(byte 11 of the line\)"),
    ("non-UTF-8 plain text", lambda d: (d / "a.txt").write_bytes(b"Egy.\n\nK\xe9t.\n"),
     DataError, r"a\.txt: line 3: not UTF-8"),
    ("damaged gzip", lambda d: (d / "a.jsonl.gz").write_bytes(gzip.compress(b'{"text": "x"}\n' * 50)[:-20]),
     DataError, r"a\.jsonl\.gz: after line \d+: damaged or cut compressed data"),
    ("empty corpus", lambda d: (d / "a.jsonl").write_text('{"text": "  "}\n'),
     DataError, r"no documents \(corpus source 'web': 1 file\(s\), 1 empty texts, 0 over corpus\.max_document_bytes\)"),
    ("unknown format", lambda d: (d / "a.csv").write_text("text\nx\n"),
     ConfigError, r"corpus\.sources\.web: .*a\.csv: unknown corpus format .*set corpus\.sources\.web\.format"),
    ("Parquet text column of lists", lambda d: pq.write_table(pa.table({"id": ["1"], "text": [["a", "b"]]}),
                                                              d / "a.parquet"),
     ConfigError, r"a\.parquet: column 'text' is of type list<.*string>, not a string"),
    ("FIFO", lambda d: os.mkfifo(d / "a.jsonl"), ConfigError, r"a\.jsonl: not a regular file"),
])
def test_bad_input_is_one_line_naming_the_file(tmp_path, run_corpus, name, write, error, message):
    data = tmp_path / "data"
    data.mkdir()
    write(data)
    path = next(data.iterdir())
    with pytest.raises(error, match=message) as raised:
        run_corpus(tmp_path, {"web": {"path": str(path)}})
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)


def test_a_fifo_in_a_corpus_directory_is_not_a_regular_file(tmp_path, run_corpus):
    write_jsonl(tmp_path / "data" / "a.jsonl", DOCUMENTS)
    os.mkfifo(tmp_path / "data" / "b.jsonl")
    with pytest.raises(ConfigError, match=r"corpus\.sources\.web: .*b\.jsonl: not a regular file"):
        run_corpus(tmp_path, {"web": {"path": str(tmp_path / "data")}})


def test_a_utf8_byte_order_mark_is_stripped_in_plain_text_and_json_lines(tmp_path, run_corpus):
    bom = "\ufeff".encode("utf-8")
    (tmp_path / "a.txt").write_bytes(bom + "Első bekezdés.\n\nMásodik.\n".encode("utf-8"))
    (tmp_path / "b.jsonl").write_bytes(bom + b'{"id": "x", "text": "Els\\u0151 sor."}\n{"text": "M\\u00e1sodik."}\n')
    out, _ = run_corpus(tmp_path, {"txt": {"path": str(tmp_path / "a.txt")},
                                   "jsonl": {"path": str(tmp_path / "b.jsonl")}})
    documents = corpus_documents(out)
    assert [text for _, _, text in documents["txt"]] == ["Első bekezdés.", "Második."]
    assert [text for _, _, text in documents["jsonl"]] == ["Első sor.", "Második."]


def test_a_path_that_names_nothing_is_a_usage_error(tmp_path, run_corpus):
    with pytest.raises(ConfigError, match=r"corpus\.sources\.web: .*nowhere\.jsonl: no such file or directory"):
        run_corpus(tmp_path, {"web": {"path": str(tmp_path / "nowhere.jsonl")}})
    with pytest.raises(ConfigError, match=r"corpus\.sources\.web: .*\*\.jsonl: no files"):
        run_corpus(tmp_path, {"web": {"path": str(tmp_path / "*.jsonl")}}, "out2")
    assert corpus_fingerprints(CorpusConfig({"web": CorpusSource(str(tmp_path / "x.jsonl"))})) == {
        "web": f"{tmp_path / 'x.jsonl'}: {tmp_path / 'x.jsonl'}: no such file or directory"}  # status never raises


def test_the_command_line_gives_one_line_the_exit_code_and_nothing_half_written(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text": "jó szöveg."}\n{"text": \n', encoding="utf-8")
    write_parquet(tmp_path / "nocol.parquet", DOCUMENTS, text="body")
    for corpus, code, message in ((f"web={tmp_path / 'bad.jsonl'}", 1, "bad.jsonl: line 2: invalid JSON"),
                                  (f"web={tmp_path / 'nocol.parquet'}", 2, "nocol.parquet: no column 'text'")):
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--lang", "hu", "--workdir",
                               str(tmp_path / "w"), "--corpus", corpus, "--quiet"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert done.returncode == code, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
        lang_dir = tmp_path / "w" / "hu"
        assert not (lang_dir / "corpus").exists() and not list(lang_dir.glob(".corpus*"))
        assert not (lang_dir / "download").exists()  # --corpus without --dump: no dump to read


def test_the_corpus_stage_without_corpora_has_nothing_to_do(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "stage", "corpus", "--lang", "hu", "--workdir",
                           str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 2
    assert done.stderr.strip() == "error: stage corpus: nothing to do with these flags (no --corpus)"


# --- the --corpus flag and which stages have work ---------------------------------------------------------------

def test_corpus_flag_syntax(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_corpus_flag("web=data/fineweb:2") == ("web", str(tmp_path / "data/fineweb"), 2.0)
    assert parse_corpus_flag("data/hu_1.jsonl.zst:0.5") == ("hu_1", str(tmp_path / "data/hu_1.jsonl.zst"), 0.5)
    assert parse_corpus_flag("/x/c4/*.json.gz") == ("c4", "/x/c4/*.json.gz", None)
    assert parse_corpus_flag("/x/2024-crawl/") == ("c2024-crawl", "/x/2024-crawl", None)
    assert default_name("/d/HPLT v2.jsonl") == "hplt_v2"
    assert corpus_flag_values(["a=/x:3", "/y/b.parquet"]) == {
        "corpus": {"sources": {"a": {"path": "/x"}, "b": {"path": "/y/b.parquet"}}}, "shard": {"weights": {"a": 3.0}}}
    assert corpus_flag_values([]) == {}
    with pytest.raises(ConfigError, match="a second source named 'b'"):
        corpus_flag_values(["/y/b.jsonl", "/z/b.parquet"])
    with pytest.raises(ConfigError, match="'wikipedia' is the dump's source name"):
        corpus_flag_values(["/y/wikipedia.jsonl"])


@pytest.mark.parametrize("weight", ["-1", "nan", "inf", "abc", ""])
def test_a_corpus_weight_that_is_not_a_number_of_at_least_0_is_refused_as_a_weight(tmp_path, weight):
    (tmp_path / "web.jsonl").write_text('{"text": "x"}\n')
    flag = f"web={tmp_path / 'web.jsonl'}:{weight}"
    with pytest.raises(ConfigError, match=re.escape(f"--corpus {flag}: the weight {weight!r} must be a number of at "
                                                    "least 0")):
        parse_corpus_flag(flag)


def test_a_weight_is_parsed_unless_it_is_part_of_an_existing_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "web.jsonl").write_text('{"text": "x"}\n')
    (tmp_path / "odd:2").mkdir()
    (tmp_path / "a=b.jsonl").write_text('{"text": "x"}\n')
    assert parse_corpus_flag("web=web.jsonl:1e3") == ("web", str(tmp_path / "web.jsonl"), 1000.0)
    assert parse_corpus_flag("odd:2") == ("odd_2", str(tmp_path / "odd:2"), None)  # a directory named odd:2
    assert parse_corpus_flag("x=odd:2:0.5") == ("x", str(tmp_path / "odd:2"), 0.5)
    assert parse_corpus_flag("a=b.jsonl") == ("a_b", str(tmp_path / "a=b.jsonl"), None)  # an existing file's name
    assert parse_corpus_flag("s3=missing/x:1/y.jsonl") == ("s3", str(tmp_path / "missing/x:1/y.jsonl"), None)


def test_a_source_name_that_is_not_lowercase_is_refused_as_a_name(tmp_path):
    (tmp_path / "good.jsonl").write_text('{"text": "x"}\n')
    for name, flag in (("Web", f"Web={tmp_path / 'good.jsonl'}"), ("2web", f"2web={tmp_path / 'good.jsonl'}:2")):
        with pytest.raises(ConfigError, match=re.escape(f"--corpus {flag}: {name!r}: a source name is a lowercase "
                                                        "letter, then lowercase letters, digits, '_' or '-'")):
            parse_corpus_flag(flag)


def test_per_source_settings_and_weights_through_the_config(tmp_path):
    values = corpus_flag_values([f"web={tmp_path}:0.5"])
    pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["corpus.sources.web.text_field=content",
                                                            "shard.weights.web=3"], values)
    assert pcfg.stage_configs["corpus"].sources["web"] == CorpusSource(str(tmp_path), text_field="content")
    assert pcfg.stage_configs["shard"].weights == {"web": 0.5}  # the flag's weight over --set's
    assert set(pcfg.idle) == {"download", "extract"}  # --corpus without --dump: only the corpus is read
    assert pcfg.inputs_of("sentences") == [InputLabel("corpus")]
    with pytest.raises(ConfigError, match=r"shard\.weights\.wikipedia: no such source \(this run's sources: web\)"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["shard.weights.wikipedia=2"], values)
    both = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["shard.weights.wikipedia=2"],
                                {**values, "download": {"source": "/d.xml.bz2"}})
    assert both.idle == {} and both.inputs_of("sentences") == [InputLabel("extract"), InputLabel("corpus")]
    assert both.stage_configs["shard"].weights == {"wikipedia": 2.0, "web": 0.5}
    with pytest.raises(ConfigError, match=r"corpus\.sources\.web\.path: required"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["corpus.sources.web.text_field=content"])
    with pytest.raises(ConfigError, match=r"shard\.weights\.web: must be a number of at least 0"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["shard.weights.web=-1"],
                             corpus_flag_values([f"web={tmp_path}"]))
    with pytest.raises(ConfigError, match=r"corpus\.sources\.Web: a source name is a lowercase letter"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", [f"corpus.sources.Web.path={tmp_path}"])


def test_repeated_ids_are_counted_once_in_a_warning_and_documents_are_named_by_where_they_are(
        tmp_path, run_corpus, caplog):
    numbered = [{"id": n, "text": f"Az {n}. oldal."} for n in range(3)]
    write_jsonl(tmp_path / "web" / "a.jsonl", numbered)  # files that each number from 0
    write_jsonl(tmp_path / "web" / "b.jsonl", numbered + [{"id": 0, "text": "Még egy nulladik."},
                                                          {"text": "Id nélkül."}])
    write_jsonl(tmp_path / "news.jsonl", [{"id": "same", "text": f"Hír {n}."} for n in range(4)])
    out, counts = run_corpus(tmp_path, {"web": {"path": str(tmp_path / "web")},
                                        "news": {"path": str(tmp_path / "news.jsonl")}}, workers=2)
    assert counts["sources"]["web"]["duplicate_ids"] == 4 and counts["sources"]["news"]["duplicate_ids"] == 3
    warnings = [r.getMessage() for r in caplog.records if "repeats an earlier one" in r.getMessage()]
    assert len(warnings) == 1 and "news 3 of 4 (id_field 'id'), web 4 of 8 (id_field 'id')" in warnings[0]
    ids = [i for documents in corpus_documents(out, "id").values() for i, _, _ in documents]
    assert len(ids) == len(set(ids)) == 12
    assert [i for i, _, _ in corpus_documents(out)["news"]] == ["same"] * 4  # each keeps its own id as record_id


def test_documents_over_max_document_bytes_are_left_out_counted_and_warned_of_once(tmp_path, run_corpus, caplog):
    long_text = "Hosszú mondat ez itt. " * 100  # 2,300 bytes
    write_jsonl(tmp_path / "web.jsonl", [{"text": "Rövid."}, {"text": long_text}, {"text": "Ő" * 600},
                                         {"text": long_text + "Még."}])
    write_text(tmp_path / "books.txt", [{"text": "Egy rövid könyv."}, {"text": long_text}])
    out, counts = run_corpus(tmp_path, {"web": {"path": str(tmp_path / "web.jsonl")},
                                        "books": {"path": str(tmp_path / "books.txt")}}, max_document_bytes=1200)
    assert [text for _, _, text in corpus_documents(out)["web"]] == ["Rövid.", "Ő" * 600]  # 1,200 bytes: kept
    assert counts["sources"]["web"]["too_long"] == 2 and counts["sources"]["web"]["longest_left_out"] == 2305
    assert counts["sources"]["books"]["too_long"] == 1 and counts["sources"]["web"]["documents"] == 2
    warnings = [r.getMessage() for r in caplog.records if "max_document_bytes" in r.getMessage()]
    assert warnings == ["corpus: documents longer than corpus.max_document_bytes (1,200 bytes) left out: books 1 (the "
                        "longest 2,300 bytes), web 2 (the longest 2,305 bytes)"]
    with pytest.raises(DataError, match=r"no documents \(corpus source 'web': 1 file\(s\), 0 empty texts, 1 over "
                                        r"corpus\.max_document_bytes\)"):
        run_corpus(tmp_path, {"web": {"path": str(write_jsonl(tmp_path / "one.jsonl", [{"text": long_text}]))}},
                   "only_long", max_document_bytes=1200)
    with pytest.raises(ConfigError, match=r"corpus\.max_document_bytes: must be at least 1, got 0"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["corpus.max_document_bytes=0"],
                             corpus_flag_values([f"web={tmp_path / 'web.jsonl'}"]))


def test_a_source_whose_records_all_carry_one_id_gets_its_weighted_share(tmp_path):
    """The shard stage picks the fractional part of a weight by a hash of (seed, source, id): with ids repeated by
    the records, every document used to share one fate (weight 0.5: all or none of the source), and dedup's
    removed.jsonl named a copy and the document kept in its place alike."""
    words = ["alma", "körte", "szilva", "virág", "ház", "kert", "folyó", "hegy", "város", "könyv", "asztal", "ablak"]
    rng = random.Random(3)
    pages = [{"id": "same", "text": "\n".join(" ".join(rng.choices(words, k=rng.randint(6, 14))).capitalize() + "."
                                              for _ in range(rng.randint(3, 8)))} for _ in range(300)]
    write_jsonl(tmp_path / "web.jsonl", pages + pages[:3])  # 3 exact copies
    values = corpus_flag_values([f"web={tmp_path / 'web.jsonl'}:0.5"])
    pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", [
        "filter.rules.web=wikipedia", "filter.langid=none", "dedup.method=exact", "vocab.vocab_size=150",
        "shard.num_shards=2", "shard.test_fraction=0"], values)
    run_stages(pcfg, tmp_path / "w" / "hu", ["corpus", "sentences", "filter", "dedup", "vocab", "shard"], quiet=True)
    web = read_manifest(tmp_path / "w" / "hu" / "shard")["counts"]["sources"]["web"]
    assert web["documents"] > 250 and 0.4 < web["training_tokens"] / web["tokens"] < 0.6, web
    removed = list(iter_jsonl(tmp_path / "w" / "hu" / "dedup" / "removed.jsonl"))
    assert [(r["id"], r["kept_id"]) for r in removed] == [(f"web.jsonl:{301 + n}", f"web.jsonl:{1 + n}")
                                                          for n in range(3)]
    records = [json.loads(line) for shard in (tmp_path / "w" / "hu" / "shard").glob("training_*.docs.jsonl")
               for line in shard.read_text(encoding="utf-8").splitlines()]
    assert len({r["id"] for r in records}) == len(records) and {r["record_id"] for r in records} == {"same"}


def test_corpus_runs_stages_judge_their_inputs_and_corpus_files_are_fingerprinted(tmp_path):
    """Without --dump: download and extract are off; sentences reads the corpus; a corpus file replaced at the same
    path makes the corpus stage stale, a touch re-runs it and nothing after it; status prints the sources."""
    corpus = write_jsonl(tmp_path / "web" / "a.jsonl", [{"id": str(i), "text": f"Ez a {i}. oldal szövege. Még egy."}
                                                        for i in range(5)])
    values = corpus_flag_values([f"web={corpus.parent}"])
    pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["sentences.splitter=rules"], values)
    lang_dir = tmp_path / "w" / "hu"
    run_stages(pcfg, lang_dir, ["download", "extract", "corpus", "sentences"], quiet=True)
    states = {r["stage"]: (r["state"], r["reason"]) for r in status_rows(pcfg, lang_dir)}
    assert states["download"] == ("off", "no --dump: the run reads only its corpora")
    assert states["extract"] == ("off", "no work upstream (download)")
    assert states["corpus"][0] == states["sentences"][0] == "done"
    assert not (lang_dir / "download").exists() and not (lang_dir / "extract").exists()
    assert set(read_manifest(lang_dir / "sentences")["inputs"]) == {"corpus"}
    assert read_manifest(lang_dir / "sentences")["counts"]["sources"] == {"web": {"documents": 5, "sentences": 10}}
    sentences = (lang_dir / "sentences" / "part-web-00000-00000.txt").read_bytes()
    sentences_manifest = (lang_dir / "sentences" / MANIFEST).read_bytes()

    os.utime(corpus, ns=(corpus.stat().st_atime_ns, corpus.stat().st_mtime_ns + 10**9))
    assert {r["stage"]: r["state"] for r in status_rows(pcfg, lang_dir)}["corpus"] == "stale"
    run_stages(pcfg, lang_dir, ["corpus", "sentences"], quiet=True)
    assert (lang_dir / "sentences" / MANIFEST).read_bytes() == sentences_manifest  # same bytes: not re-run

    write_jsonl(corpus, [{"id": "0", "text": "Egészen más szöveg. Új oldal."}])
    rows = {r["stage"]: r for r in status_rows(pcfg, lang_dir)}
    assert rows["corpus"]["state"] == "stale" and f"input web:{corpus} changed" in rows["corpus"]["reason"]
    run_stages(pcfg, lang_dir, ["corpus", "sentences"], quiet=True)
    assert (lang_dir / "sentences" / "part-web-00000-00000.txt").read_bytes() != sentences

    other = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["sentences.splitter=rules"],
                                 {"download": {"source": "/d.xml.bz2"}})
    (lang_dir / "extract").mkdir()  # as if extract were done: sentences is judged by what it reads
    (lang_dir / "extract" / MANIFEST).write_text(json.dumps(read_manifest(lang_dir / "corpus") | {
        "stage": "extract", "config_hash": "", "outputs": {}}))
    rows = {r["stage"]: r for r in status_rows(other, lang_dir)}  # the same work dir without --corpus
    assert rows["corpus"]["state"] == "off"
    assert (rows["sentences"]["state"], rows["sentences"]["reason"]) == ("stale", "reads extract now, not corpus")


@pytest.mark.slow
def test_a_wikipedia_and_web_mix_end_to_end_shows_each_source(tmp_path):
    """sample-dump + sample-corpus through `pipeline run --corpus web=PATH:2 --to shard`: every shard document says
    where it came from, `pipeline status` and `pipeline report` show each source's counts and training share."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    dump = cli("sample-dump", "dump", "--pages", "80", "-q")
    web = cli("sample-corpus", "web", "--docs", "100", "-q")
    flags = ["--lang", "hu", "--workdir", "w", "--dump", dump, "--corpus", f"web={web}:2", "--set",
             "vocab.vocab_size=1000", "--set", "shard.num_shards=3"]
    cli("run", *flags, "--to", "shard", "--quiet")
    status = cli("status", *flags).splitlines()
    assert all(line.split()[1] == "done" for line in status[1:9] if line.split()[0] != "hdf5")
    table = {line.split()[0]: line.split() for line in status[status.index("") + 2:]}
    assert status[status.index("") + 1].split()[:2] == ["source", "read"] and set(table) == {"wikipedia", "web"}
    header = status[status.index("") + 1]
    assert [c.strip() for c in re.split(r"\s{2,}", header.strip())][:8] == [
        "source", "read", "too long", "repeated ids", "with text", "after filter", "duplicates", "kept"]
    # read, too long, repeated ids (the corpus stage's), with text, after filter (a long page cut into pieces),
    # duplicates, kept: the filter's and dedup's counts
    read, too_long, repeated, with_text, filtered, duplicates, kept = map(int, table["web"][1:8])
    assert read == with_text == 100 and too_long == repeated == 0
    assert filtered > kept == filtered - duplicates and duplicates > 0
    assert table["web"][9] == "2"
    assert float(table["web"][-1].rstrip("%")) + float(table["wikipedia"][-1].rstrip("%")) == pytest.approx(100, 0.01)
    sources = collections.Counter(json.loads(line)["source"] for shard in (tmp_path / "w/hu/shard").glob("*.docs.jsonl")
                                  for line in shard.read_text(encoding="utf-8").splitlines())
    assert set(sources) == {"wikipedia", "web"}
    report = tmp_path / cli("report", "--lang", "hu", "--workdir", "w")
    assert "<h2>Sources</h2>" in report.read_text(encoding="utf-8") and (report.parent / "source_shares.png").exists()
    assert "stale" in cli("status", *flags[:6])  # without --corpus: sentences reads another set of inputs


def test_small_row_groups_are_read_together_into_parts_of_documents_per_part(tmp_path, run_corpus):
    """Writers' row groups range from a few rows to millions: a task (and a part) per 64-row group made a 1 GB corpus
    7,928 parts, each a file and a task in every later stage."""
    records = [{"id": str(i), "text": f"Szöveg {i}."} for i in range(335)]
    path = write_parquet(tmp_path / "web.parquet", records, row_group_size=5)  # 67 groups, the last of 5 rows too
    out, counts = run_corpus(tmp_path, {"web": {"path": str(path)}}, documents_per_part=40)
    parts = sorted(out.glob("part-web-*.jsonl"))
    assert [len(list(iter_jsonl(part))) for part in parts] == [40] * 8 + [15]  # 8 tasks of 8 groups, 1 of the 3 left
    assert [name.split("-")[2] for name in map(lambda p: p.name, parts)] == [f"{i:05d}" for i in range(9)]
    assert corpus_documents(out)["web"] == [(str(i), "", f"Szöveg {i}.") for i in range(335)]
    assert [i for i, _, _ in corpus_documents(out, "id")["web"]] == [f"web.parquet:{n}" for n in range(1, 336)]
    assert counts["parts"] == 9 and counts["documents"] == 335
    uneven = write_parquet(tmp_path / "uneven.parquet", records[:7], row_group_size=1)
    tasks, _ = readers.read_tasks([uneven], tmp_path, readers.Fields(), "auto", rows_per_task=3)
    assert [(t.row_groups, t.first_row) for t in tasks] == [((0, 1, 2), 0), ((3, 4, 5), 3), ((6,), 6)]


def test_a_parquet_files_footer_is_parsed_once_per_process_for_all_its_row_groups(tmp_path, monkeypatch):
    """A task reads one row group: each parsed the file's footer again, which grows with the row groups (a 126 MB file
    of 2,000 row groups: 35 ms a task against 11 ms of reading, 2/3 of a 1 GB corpus stage's CPU)."""
    path = write_parquet(tmp_path / "web.parquet", [{"id": str(i), "text": f"Szöveg {i}."} for i in range(40)])
    opened = []
    monkeypatch.setattr(readers, "_parquet_file", lambda p, real=readers._parquet_file: opened.append(p) or real(p))
    readers._parquet_metadata.cache_clear()
    tasks, _ = readers.read_tasks([path], tmp_path, readers.Fields(text="text"), "auto")
    assert len(tasks) == 20
    texts = [d.text for task in tasks for d in readers.read_documents(task)]
    assert texts == [f"Szöveg {i}." for i in range(40)]
    assert len(opened) == 2  # read_tasks' look at the schema, and one footer for the 20 row groups
    write_parquet(path, [{"id": "0", "text": "Új szöveg, más méretű."}])  # the same file rewritten: read anew
    tasks, _ = readers.read_tasks([path], tmp_path, readers.Fields(text="text"), "auto")
    assert [d.text for d in readers.read_documents(tasks[0])] == ["Új szöveg, más méretű."]
