"""Corpora their publishers cleaned and deduplicated (FineWeb-2, HPLT, CulturaX): told by their columns, read with
their metadata, checked only for our invariants, still deduplicated against Wikipedia; and rehydration: training
documents repeated by their cluster size before the source and language weights."""
from __future__ import annotations

import collections
import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.variant_dir import MIXTURE_FILE
from pipeline.config import DEFAULT_CONFIG_PATH, load_pipeline_config
from pipeline.funnel import Funnel
from pipeline.runner import read_manifest, run_stages
from pipeline.sources import corpus_flag_values
from pipeline.stages import InputLabel, StageContext
from pipeline.stages.corpus.stage import CorpusConfig, CorpusSource, run as run_corpus
from pipeline.stages.shard import FINEWEB2_REHYDRATION, ShardConfig, run as run_shard
from pipeline.tools.report import write_report
from pipeline.text_files import PUBLISHED, DocumentRecord, iter_documents_with_records, iter_jsonl

# Hungarian web pages as FineWeb-2 keeps them: the first has a heading line without a full stop (C4's line rule
# drops it), the second is two sentences (TurkuNLP's minimum is three, and thirty words)
HEADING = "Nyitvatartás és elérhetőség"
PAGES = [
    f"{HEADING}\nA könyvtár hétfőtől péntekig reggel nyolc órától este hat óráig várja az olvasókat. Szombaton "
    "csak délelőtt vagyunk nyitva, vasárnap és ünnepnapokon zárva tartunk. A kölcsönzéshez érvényes olvasójegy "
    "szükséges, amelyet a pultnál lehet igényelni a személyi igazolvány bemutatásával.",
    "Tegnap este nagy vihar söpört végig a megyén, több faluban kidőlt fák akadályozták a közlekedést. A "
    "tűzoltók egész éjszaka dolgoztak.",
    "A kertben idén korán virágzott a cseresznyefa, ezért a gazdák aggódnak a tavaszi fagyok miatt. Ha az "
    "éjszakai hőmérséklet fagypont alá süllyed, a virágok elpusztulnak, és kevés lesz a termés. A szakemberek "
    "azt tanácsolják, hogy a kisebb fákat takarják le fátyolfóliával.",
    "The museum is open every day from nine in the morning until five in the afternoon. Tickets can be bought "
    "online or at the entrance, and children under six enter for free. Guided tours start every hour.",
]
FINEWEB2_COLUMNS = ["text", "id", "dump", "url", "date", "file_path", "language", "language_score",
                    "language_script", "minhash_cluster_size", "top_langs"]


def write_fineweb2(path: Path, texts: list[str], cluster_sizes: list, row_group_size: int = 2) -> Path:
    """A Parquet file with FineWeb-2's columns, in its order and types."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"text": text, "id": f"<urn:uuid:{i:08d}>", "dump": "CC-MAIN-2024-10", "url": f"https://pelda.hu/{i}",
             "date": "2024-02-21T10:00:00Z", "file_path": "s3://commoncrawl/x.warc.gz", "language": "hun",
             "language_score": 0.95 - i / 100, "language_script": "Latn", "minhash_cluster_size": size,
             "top_langs": '{"hun_Latn_score": 0.95}'} for i, (text, size) in enumerate(zip(texts, cluster_sizes))]
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    assert pq.ParquetFile(path).schema_arrow.names == FINEWEB2_COLUMNS
    return path


def corpus_records(out_dir: Path) -> list[dict]:
    return [record for part in sorted(out_dir.glob("part-*.jsonl")) for record in iter_jsonl(part)]


def test_publishers_are_told_by_their_columns_and_their_metadata_is_kept(tmp_path, caplog):
    write_fineweb2(tmp_path / "fw2" / "hun_Latn" / "000_00000.parquet", PAGES[:3], [1, 7, 1200])
    hplt = tmp_path / "hplt" / "hu_1.jsonl"
    hplt.parent.mkdir()
    hplt.write_text("".join(json.dumps({"f": "x.warc", "o": 1, "u": f"https://h.hu/{i}", "lang": ["hun_Latn"],
                                        "prob": [0.9 - i / 10], "text": text, "seg_langs": ["hun_Latn"], "id": str(i),
                                        "filter": "keep", "doc_scores": [9.5]}) + "\n"
                            for i, text in enumerate(PAGES[:2])), encoding="utf-8")
    culturax = tmp_path / "culturax" / "hu_part_00000.parquet"
    culturax.parent.mkdir()
    pq.write_table(pa.Table.from_pylist([{"text": PAGES[0], "timestamp": "2021/01/01", "url": "https://c.hu/",
                                          "source": "mC4"}]), culturax)
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"text": PAGES[2], "url": "https://r.hu/"}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    config = CorpusConfig({"fw2": CorpusSource(str(tmp_path / "fw2")), "hplt": CorpusSource(str(hplt)),
                           "cx": CorpusSource(str(culturax)), "raw": CorpusSource(str(raw)),
                           "plain": CorpusSource(str(tmp_path / "fw2"), publisher="none")})
    with caplog.at_level(logging.INFO, logger="test"):
        counts = run_corpus(config, StageContext("hu", out, {}, tmp_path / "cache", quiet=True,
                                                 log=logging.getLogger("test")))
    records = collections.defaultdict(list)
    for record in corpus_records(out):
        records[record["source"]].append(record.get(PUBLISHED))
    assert records["fw2"] == [{"url": f"https://pelda.hu/{i}", "language_score": 0.95 - i / 100, "cluster_size": size}
                              for i, size in enumerate([1, 7, 1200])]
    assert records["hplt"] == [{"url": "https://h.hu/0", "language_score": 0.9},
                               {"url": "https://h.hu/1", "language_score": 0.8}]
    assert records["cx"] == [{"url": "https://c.hu/"}]
    assert records["raw"] == [None] and records["plain"] == [None] * 3
    assert {name: c.get("publisher") for name, c in counts.sources.items()} == {
        "fw2": "fineweb-2", "hplt": "hplt", "cx": "culturax", "raw": None, "plain": None}
    said = [r.getMessage() for r in caplog.records if "cleaned and deduplicated by" in r.getMessage()]
    assert len(said) == 3 and said[0].startswith(
        "corpus: cx: CulturaX's columns (source, text, timestamp, url) found in hu_part_00000.parquet: read as "
        "cleaned and deduplicated by CulturaX: the filter checks only its language and cuts long documents (rule "
        "set `published`, unless filter.rules.cx names another)")
    assert "cluster_size from 'minhash_cluster_size'" in said[1]


@pytest.mark.parametrize("size", [0, "3", 2.5])
def test_a_cluster_size_that_is_not_a_whole_number_of_at_least_1_is_one_line(tmp_path, size):
    path = tmp_path / "fw2.jsonl"
    path.write_text(json.dumps({"text": PAGES[0], "url": "u", "language_score": 0.9, "minhash_cluster_size": 1})
                    + "\n" + json.dumps({"text": PAGES[1], "url": "u", "language_score": 0.9,
                                         "minhash_cluster_size": size}) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DataError) as e:
        run_corpus(CorpusConfig({"fw2": CorpusSource(str(path))}), StageContext("hu", out, {}, tmp_path / "c",
                                                                                 quiet=True))
    assert str(e.value) == (f"{path}: line 2: column 'minhash_cluster_size' is {size!r}, not a whole number of at "
                            "least 1 (FineWeb-2's cluster size; set the source's publisher to none to read the text "
                            "alone)")


def test_a_publishers_corpus_gets_the_published_rule_set_unless_filter_rules_names_it(tmp_path):
    fw2 = write_fineweb2(tmp_path / "fw2.parquet", PAGES[:1], [1])
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"text": PAGES[0]}) + "\n", encoding="utf-8")
    flags = corpus_flag_values([f"fw2={fw2}", f"raw={raw}", f"missing={tmp_path / 'none.parquet'}"])

    def rules(*overrides: str, config: Path = DEFAULT_CONFIG_PATH) -> dict[str, str]:
        return load_pipeline_config(config, "hu", list(overrides), flags).stage_configs["filter"].rules

    assert rules() == {"wikipedia": "wikipedia", "default": "web", "fw2": "published"}
    assert rules("filter.rules.fw2=web")["fw2"] == "web"
    assert "fw2" not in rules("corpus.sources.fw2.publisher=none")
    assert rules("filter.rules.raw=published", "corpus.sources.raw.publisher=culturax")["raw"] == "published"
    assert rules("corpus.sources.raw.publisher=hplt")["raw"] == "published"
    own = tmp_path / "stages.yaml"  # a stages.yaml of its own, written before the published rule set existed
    own.write_text(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8").replace("      published:", "      old_published:"),
                   encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        rules(config=own)
    assert str(e.value).startswith("a publisher's corpus (corpus.sources.*.publisher): filter.rules.fw2: unknown "
                                   "rule set 'published' (known: ")


def _filter_texts(filter_dir: Path, source: str) -> list[str]:
    return [" ".join(sentences) for part in sorted(filter_dir.glob("part-*.txt"))
            for record, sentences in iter_documents_with_records(part) if record.source == source]


def test_a_fineweb2_parquet_is_read_as_published_not_cleaned_again_and_deduplicated_against_wikipedia(tmp_path):
    """FineWeb-2's file through corpus, sentences, filter and dedup beside the dump: its heading line and its short
    page stay (the web rules cut them: shown with filter.rules.fw2=web), the English page goes (language), its copy
    of a Wikipedia article goes (dedup keeps Wikipedia's), and its records keep the publisher's metadata."""
    from pipeline.tools.sample_dump import write_sample_dump

    dump = write_sample_dump(tmp_path / "dump", 30, 0)
    lang_dir = tmp_path / "w" / "hu"
    common = ["sentences.splitter=rules", "extract.articles_per_part=10"]
    wiki = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", common, {"download": {"source": str(dump)}})
    run_stages(wiki, lang_dir, ["download", "extract"], quiet=True)
    articles = [a for part in sorted((lang_dir / "extract").glob("part-*.jsonl")) for a in iter_jsonl(part)]
    copied = max(articles, key=lambda a: len(a["text"]))
    fw2 = write_fineweb2(tmp_path / "fw2" / "000_00000.parquet", [*PAGES, copied["text"]], [1, 2, 5, 1, 3])
    values = {"download": {"source": str(dump)}, **corpus_flag_values([f"fw2={fw2.parent}"])}
    pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", common, values)
    assert pcfg.stage_configs["filter"].rules["fw2"] == "published"
    run_stages(pcfg, lang_dir, ["corpus", "sentences", "filter", "dedup"], quiet=True)

    kept = _filter_texts(lang_dir / "filter", "fw2")
    assert any(text.startswith(HEADING) for text in kept) and any(text.startswith("Tegnap este") for text in kept)
    assert not any(text.startswith("The museum") for text in kept)
    report = json.loads((lang_dir / "filter" / "report.json").read_text(encoding="utf-8"))["sources"]["fw2"]
    assert report["rule_set"] == "published" and list(report["dropped"]) == ["language"]
    assert report["dropped"]["language"]["documents"] == 1
    removed = list(iter_jsonl(lang_dir / "dedup" / "removed.jsonl"))
    assert [(r["source"], r["id"], r["kept_source"], r["kept_id"], r["duplicate"]) for r in removed] == [
        ("fw2", "000_00000.parquet:5", "wikipedia", copied["id"], "exact")]
    records = {record.id: record.extra for part in sorted((lang_dir / "dedup").glob("part-*.txt"))
               for record, _ in iter_documents_with_records(part) if record.source == "fw2"}
    assert records["000_00000.parquet:1"][PUBLISHED] == {"url": "https://pelda.hu/0", "language_score": 0.95,
                                                         "cluster_size": 1}
    assert records["000_00000.parquet:3"][PUBLISHED]["cluster_size"] == 5 and \
        records["000_00000.parquet:3"]["cluster_size"] == 1  # dedup's own: no copy among this run's documents

    web = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", [*common, "filter.rules.fw2=web"], values)
    run_stages(web, lang_dir, ["filter"], quiet=True)
    cleaned = _filter_texts(lang_dir / "filter", "fw2")
    assert not any(HEADING in text for text in cleaned) and not any(t.startswith("Tegnap") for t in cleaned)


# --- rehydration ----------------------------------------------------------------------------------------------

WORDS = [f"w{i}" for i in range(5, 60)]  # one WordPiece token each in write_vocab_dir's vocabulary


def _rehydration_corpus(directory: Path, write_document_parts, sizes: list[int], wiki_sizes: list[int],
                        seed: int = 0) -> dict[str, int]:
    """Documents of fw2 (their published cluster sizes `sizes`) and of wikipedia (dedup's cluster sizes
    `wiki_sizes`), of 11 tokens each (whitespace-separated and WordPiece alike); {source: its tokens after FineWeb-2's
    rehydration}."""
    import random

    rng = random.Random(seed)
    documents, records, rehydrated = [], [], collections.Counter()
    for source, source_sizes in (("fw2", sizes), ("wikipedia", wiki_sizes)):
        for i, size in enumerate(source_sizes):
            documents.append([" ".join(rng.choices(WORDS, k=5)) + " .", " ".join(rng.choices(WORDS, k=4)) + " ."])
            extra = ({PUBLISHED: {"cluster_size": size, "url": f"https://p.hu/{i}"}, "cluster_size": 1}
                     if source == "fw2" else {"cluster_size": size})
            records.append(DocumentRecord(source, f"{source}-{i}", "", extra))
            rehydrated[source] += 11 * FINEWEB2_REHYDRATION[max(k for k in FINEWEB2_REHYDRATION if k <= size)]
    write_document_parts(directory, documents, 3, records)
    return rehydrated


def _training_copies(out: Path) -> collections.Counter:
    return collections.Counter((record.source, record.id) for shard_file in out.glob("training_*.txt")
                               for record, _ in iter_documents_with_records(shard_file))


def test_rehydration_repeats_documents_as_fineweb2s_table_says_and_weights_apply_after(
        tmp_path, write_document_parts, run_stage_function):
    sizes = [1, 2, 3, 4, 5, 99, 100, 999, 1000, 5000]
    corpus = tmp_path / "dedup"
    rehydrated = _rehydration_corpus(corpus, write_document_parts, sizes, [1, 2, 4])
    settings = {"num_shards": 4, "test_fraction": 0.0, "min_documents_per_shard": 1}
    out, counts = run_stage_function(run_shard, ShardConfig(**settings, rehydrate=True), tmp_path, {"dedup": corpus})
    copies = _training_copies(out)
    assert [copies["fw2", f"fw2-{i}"] for i in range(len(sizes))] == [1, 2, 3, 3, 5, 5, 8, 8, 1, 1]
    assert [copies["wikipedia", f"wikipedia-{i}"] for i in range(3)] == [1, 2, 3]  # dedup's cluster_size
    assert {name: (c["tokens"], c["rehydrated_tokens"], c["training_tokens"])
            for name, c in counts["sources"].items()} == {
        "fw2": (110, rehydrated["fw2"], rehydrated["fw2"]), "wikipedia": (33, 66, 66)}

    out, counts = run_stage_function(run_shard, ShardConfig(**settings, rehydrate=True, weights={"wikipedia": 2.0},
                                                            rehydrate_table={1: 1, 3: 0, 100: 2}),
                                     tmp_path, {"dedup": corpus}, "table")
    copies = _training_copies(out)
    assert [copies["fw2", f"fw2-{i}"] for i in range(len(sizes))] == [1, 1, 0, 0, 0, 0, 2, 2, 2, 2]
    assert [copies["wikipedia", f"wikipedia-{i}"] for i in range(3)] == [2, 2, 0]
    assert counts["sources"]["wikipedia"]["training_tokens"] == 2 * counts["sources"]["wikipedia"]["rehydrated_tokens"]

    out, counts = run_stage_function(run_shard, ShardConfig(**settings), tmp_path, {"dedup": corpus}, "off")
    assert set(_training_copies(out).values()) == {1}
    assert {c["rehydrated_tokens"] for c in counts["sources"].values()} == {None}


@pytest.mark.parametrize("table, message", [
    ({2: 2}, "rehydrate_table: needs an entry for cluster size 1 (the unique documents)"),
    ({1: 1, "0": 3}, "rehydrate_table.0: a cluster size is a whole number of at least 1"),
    ({1: 1, "x": 3}, "rehydrate_table.x: a cluster size is a whole number of at least 1"),
    ({1: 1, 5: -1}, "rehydrate_table.5: copies must not be negative, got -1"),
])
def test_a_rehydration_table_that_does_not_fit_is_one_line(table, message):
    with pytest.raises(ConfigError) as e:
        ShardConfig(rehydrate=True, rehydrate_table=table)
    assert str(e.value) == message
    with pytest.raises(ConfigError) as e:
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", [f"shard.rehydrate_table.{list(table)[-1]}=-1"])
    assert str(e.value).startswith(f"--set shard.rehydrate_table.{list(table)[-1]}=-1: shard.rehydrate_table.")


def test_the_mixture_shares_follow_the_rehydrated_tokens(tmp_path, write_document_parts, write_vocab_dir):
    """Two languages at alpha 1: each one's share of mixture.json is its tokens after rehydration."""
    hu = _rehydration_corpus(tmp_path / "hu" / "dedup", write_document_parts, [1, 2, 5, 100, 1] * 6, [3, 1] * 10)
    fi = _rehydration_corpus(tmp_path / "fi" / "dedup", write_document_parts, [1] * 30, [1] * 20, seed=1)
    vocab = write_vocab_dir(tmp_path / "vocab")
    shares = {}
    for name, rehydrate in (("on", True), ("off", False)):
        out = tmp_path / name
        out.mkdir()
        ctx = StageContext("hu+fi", out, {"vocab": vocab}, tmp_path / f"cache-{name}", quiet=True, language_inputs={
            InputLabel("dedup", lang): tmp_path / lang / "dedup" for lang in ("hu", "fi")})
        run_shard(ShardConfig(num_shards=4, test_fraction=0.0, min_documents_per_shard=1, alpha=1.0,
                              rehydrate=rehydrate), ctx)
        mixture = json.loads((out / MIXTURE_FILE).read_text(encoding="utf-8"))
        shares[name] = {lang: mixture["languages"][lang]["share"] for lang in ("hu", "fi")}
    # each word is one token and each sentence's " ." one more: the whitespace tokens
    assert shares["on"]["hu"] == pytest.approx(sum(hu.values()) / (sum(hu.values()) + sum(fi.values())), abs=1e-6)
    assert shares["off"]["hu"] == pytest.approx(0.5, abs=1e-6)


@pytest.mark.slow
def test_published_and_rehydrated_runs_write_the_same_bytes_with_1_and_2_workers(tmp_path):
    """corpus (FineWeb-2's Parquet) through shard with rehydration on, with 1 and 2 workers: the same bytes; the
    funnel's rows show the tokens before and after rehydration."""
    pages = [f"{text}\nA {n}. oldal vége. Itt a {n}. bekezdés folytatódik, és a szöveg véget ér." for n in range(40)
             for text in PAGES[:1]]
    fw2 = write_fineweb2(tmp_path / "fw2" / "000_00000.parquet", pages, [1, 2, 5, 100] * 10, row_group_size=7)
    values = corpus_flag_values([f"fw2={fw2.parent}"])
    settings = ["sentences.splitter=rules", "filter.langid=none", "vocab.vocab_size=200", "shard.num_shards=3",
                "shard.rehydrate=true", "corpus.documents_per_part=6", "dedup.method=exact"]
    outputs = {}
    for workers in (1, 2):
        lang_dir = tmp_path / f"w{workers}" / "hu"
        pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", settings, values)
        run_stages(pcfg, lang_dir, ["corpus", "sentences", "filter", "dedup", "vocab", "shard"], workers=workers,
                   quiet=True)
        outputs[workers] = {stage: {name: meta["sha256"] for name, meta in read_manifest(lang_dir / stage)[
            "outputs"].items()} for stage in ("corpus", "filter", "dedup", "shard")}
    assert outputs[1] == outputs[2]
    funnel = Funnel({stage: read_manifest(tmp_path / "w1" / "hu" / stage) for stage in ("corpus", "shard")})
    row, = funnel.source_rows()
    assert row["rehydrated tokens"] == row["kept tokens"] // 40 * (1 + 2 + 5 + 8) * 10 > row["kept tokens"]
    html, _, _ = write_report(tmp_path / "w1" / "hu", tmp_path / "report")
    assert "<th>rehydrated tokens</th>" in html.read_text(encoding="utf-8")
