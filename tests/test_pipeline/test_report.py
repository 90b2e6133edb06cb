"""`pipeline report`: an HTML page referencing valid PNGs for a test-made work directory; one line for a work
directory with no stage done."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys

import h5py
import numpy as np
import pytest

from wiki2bert_core.files import sha256_file
from wiki2bert_core.hdf5_format import DTYPES, read_rows
from wiki2bert_core.variant_dir import DOC_SENTENCES, VariantParams
from wiki2bert_core.wordpiece import SPECIAL_TOKENS, read_vocab, special_token_ids, wordpiece_tokenizer

from pipeline.cli import main
from pipeline.runner import fingerprint, read_manifest
from pipeline.stages import stage_by_name
from pipeline.funnel import Funnel, source_table

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DEDUP_REPORT = {  # the dedup stage's report.json for the filter output below: one exact duplicate
    "documents": {"in": 4, "kept": 3, "removed": 1, "exact": 1, "near": 0},
    "sources": {"wikipedia": {"documents_in": 4, "documents_kept": 3, "exact": 1, "near": 0, "tokens_in": 12,
                              "tokens_kept": 10}},
    "clusters": {"count": 1, "documents": 2, "largest": 2, "sizes": {"2": 1}},
    "largest_clusters": [{"size": 2, "members": [
        {"source": "wikipedia", "id": "7", "title": "Hetes <b>", "duplicate": "kept", "jaccard": 1.0, "text": "w6 zz"},
        {"source": "wikipedia", "id": "8", "piece": 2, "title": "", "duplicate": "exact", "jaccard": 1.0,
         "text": "w6 zz"}]}],
    "near_duplicate_clusters": [],
}


def manifest(stage_dir, counts):
    """The stage's _manifest.json as the runner writes it: its files, and the fingerprints of its inputs."""
    stage_dir.mkdir(parents=True, exist_ok=True)
    outputs = {str(p.relative_to(stage_dir)): {"size": p.stat().st_size, "sha256": sha256_file(p),
                                               "mtime_ns": p.stat().st_mtime_ns}
               for p in sorted(stage_dir.rglob("*")) if p.is_file()}
    inputs = {up: fingerprint(read_manifest(stage_dir.parent / up)) for up in stage_by_name(stage_dir.name).inputs
              if read_manifest(stage_dir.parent / up) is not None}  # a run without corpora: no corpus stage
    (stage_dir / "_manifest.json").write_text(json.dumps({"stage": stage_dir.name, "config_hash": "",
                                                          "inputs": inputs, "outputs": outputs, "counts": counts}))


@pytest.fixture
def work_dir(tmp_path, write_dataset, write_hdf5, write_vocab_dir):
    lang = tmp_path / "hu"
    variant = write_dataset(tmp_path, [30, 30], seq_len=32)
    write_hdf5(variant / "test" / "test_0000.hdf5", 20, 32, 5, seed=5)
    for path in variant.rglob("*.hdf5"):  # in the hdf5 stage's dtypes, which verify checks
        with h5py.File(path, "r") as f:
            arrays = read_rows(f)
        with h5py.File(path, "w") as f:
            for key, value in arrays.items():
                f.create_dataset(key, data=value.astype(DTYPES[key]))
    write_vocab_dir(lang / "vocab")
    (lang / "download").mkdir()
    (lang / "download" / "dump.json").write_text("{}")
    for stage in ("extract", "sentences"):
        (lang / stage).mkdir()
        (lang / stage / "part-00000.txt").write_text("w1 w2 w3 w4 w5 w6 w7\n")
    (lang / "filter").mkdir()
    drops = {"min_sentences": {"documents": 6, "sentences": 9, "tokens": 80, "examples": []},
             "policy": {"documents": 0, "sentences": 2, "tokens": 20, "examples": [
                 {"document": "Pékség", "text": "Ez a weboldal sütiket <használ>."}]}}
    (lang / "filter" / "report.json").write_text(json.dumps({
        "dropped": drops, "long_documents": {"mode": "split", "documents_cut": 1, "pieces": 3},
        "sources": {"web": {"rule_set": "web", "tokens": {"in": 400}, "dropped": drops}}}))
    (lang / "filter" / "part-00000.txt").write_text("w1 w2 w3\nw4 w5\n\nw6 zz\n\nw6 zz\n\nw7\nw8\nw9 w10\n")
    (lang / "dedup").mkdir()
    (lang / "dedup" / "part-00000.txt").write_text("w1 w2 w3\nw4 w5\n\nw6 zz\n\nw7\nw8\nw9 w10\n")
    (lang / "dedup" / "report.json").write_text(json.dumps(DEDUP_REPORT))
    (lang / "shard").mkdir()
    (lang / "shard" / "test_0000.txt").write_text("w1 w2 qq\nw3\n\n")
    manifest(lang / "download", {})
    manifest(lang / "extract", {"pages": 12, "articles": 9, "skipped": {"redirect": 3}})
    manifest(lang / "sentences", {})
    manifest(lang / "filter", {"documents_kept": 4, "documents_written": 5})
    manifest(lang / "dedup", {"documents_kept": 3})
    manifest(lang / "shard", {"training_documents": 2, "test_documents": 1})
    manifest(lang / "vocab", {})
    manifest(lang / "hdf5", {})
    return tmp_path


def run(monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["pipeline", "report", "--lang", "hu", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code


def test_report_is_html_referencing_valid_pngs(work_dir, monkeypatch, capsys):
    assert run(monkeypatch, "--workdir", str(work_dir), "--out", str(work_dir / "r")) == 0
    page = (work_dir / "r" / "report.html").read_text()
    images = re.findall(r"<img src='([^']+)'", page)
    assert {"funnel.png", "dropped.png", "cluster_sizes.png", "sentences_per_document.png", "tokens_per_document.png",
            "real_tokens_seq_len_32.png"} <= set(images)
    for name in images:
        assert (work_dir / "r" / name).read_bytes().startswith(PNG_SIGNATURE)
    assert "<td>pages</td><td>12</td>" in page and "<td>documents kept</td><td>4</td>" in page
    assert "<td>documents written (long ones cut)</td><td>5</td>" in page
    assert "<td>documents kept by dedup</td><td>3</td>" in page and "<p>2 documents</p><table" in page
    assert "<td>exact / near duplicates removed</td><td>1 / 0</td>" in page
    # the largest cluster's members side by side, titles escaped, an untitled member named by its id, a piece of a
    # long document by its piece
    assert re.search(r"<tr><th>Hetes &lt;b&gt;<br><small>wikipedia 7: kept, Jaccard 1.00</small></th><th>8<br>"
                     r"<small>wikipedia 8 piece 2: exact, Jaccard 1.00</small></th></tr><tr><td[^>]*>w6 zz</td><td[^>]*>w6 zz",
                     page)
    assert ("<td>web (web)</td><td>policy</td><td>0</td><td>2</td><td>20</td><td>5.00%</td>"
            "<td><small><b>Pékség</b>: Ez a weboldal sütiket &lt;használ&gt;.</small></td>") in page
    assert "Long documents cut into pieces: 1 into 3 (split)" in page
    # "qq" is no vocabulary word: 1 [UNK] among the test split's tokens
    assert re.search(r"unknown-token rate \(test split\)</td><td>[1-9]", page)
    assert "seq_len 32: padding share" in page and "NSP random next" in page


def test_a_work_dir_with_no_stage_done_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "hu").mkdir()
    assert run(monkeypatch, "--workdir", str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "no finished stages" in err, err
    assert not (tmp_path / "hu" / "report").exists()


def test_tokens_per_word_of_unspaced_text_counts_words_as_the_filter_did(tmp_path, monkeypatch):
    """With filter.chars_per_word set, a word of the test split is chars_per_word characters of an unspaced script,
    not a BERT word (BERT makes each kanji a word: 6 here, which would give 7/6 tokens per word)."""
    lang = tmp_path / "hu"
    manifest(lang / "download", {})
    manifest(lang / "extract", {"pages": 1, "articles": 1})
    manifest(lang / "sentences", {})
    (lang / "filter").mkdir()
    (lang / "filter" / "report.json").write_text("{}")
    manifest(lang / "filter", {"documents_kept": 1})
    recorded = json.loads((lang / "filter" / "_manifest.json").read_text())
    (lang / "filter" / "_manifest.json").write_text(json.dumps({**recorded, "config": {"chars_per_word": 1.7}}))
    (lang / "dedup").mkdir()
    (lang / "dedup" / "report.json").write_text(json.dumps({**DEDUP_REPORT, "largest_clusters": []}))
    manifest(lang / "dedup", {"documents_kept": 1})
    vocab = [*SPECIAL_TOKENS, *"東京は大きい。", *(f"##{c}" for c in "東京は大きい")]
    (lang / "vocab").mkdir(parents=True)
    (lang / "vocab" / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    wordpiece_tokenizer(read_vocab(lang / "vocab" / "vocab.txt")).save(str(lang / "vocab" / "tokenizer.json"))
    manifest(lang / "vocab", {})
    (lang / "shard").mkdir()
    (lang / "shard" / "test_0000.txt").write_text("東京は大きい。\n\n", encoding="utf-8")
    manifest(lang / "shard", {"training_documents": 0, "test_documents": 1})
    assert run(monkeypatch, "--workdir", str(tmp_path), "--out", str(tmp_path / "r")) == 0
    page = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    # 東 京 は 大 き ##い 。: 7 tokens; 6 kanji and kana / 1.7 = 3.53 words (the 。 beside them is no word)
    assert f"tokens per word (test split)</td><td>{7 / (6 / 1.7):.3f}<" in page


def test_a_corpus_only_run_shows_its_documents_and_drops_and_each_sources_share_of_every_step(tmp_path,
                                                                                            monkeypatch):
    """Without the dump (no extract) the report still shows the documents through the stages and the filter's drops;
    each step counted per source is split by source, and the sources' table has each source's filter and dedup
    counts."""
    lang = tmp_path / "hu"
    manifest(lang / "corpus", {"documents": 10, "sources": {"web": {"documents": 6}, "news": {"documents": 4}}})
    manifest(lang / "sentences", {"documents": 10, "sources": {"web": {"documents": 6}, "news": {"documents": 4}}})
    (lang / "filter").mkdir()
    drops = {"lorem_ipsum": {"documents": 1, "sentences": 3, "tokens": 30, "examples": []}}
    (lang / "filter" / "report.json").write_text(json.dumps({"dropped": drops, "sources": {
        "news": {"rule_set": "web", "tokens": {"in": 300}, "dropped": drops}}}))
    manifest(lang / "filter", {"documents_kept": 7, "documents_written": 8, "sources": {
        "news": {"documents_kept": 3, "documents_written": 3}, "web": {"documents_kept": 4, "documents_written": 5}}})
    (lang / "dedup").mkdir()
    (lang / "dedup" / "report.json").write_text(json.dumps({**DEDUP_REPORT, "largest_clusters": []}))
    manifest(lang / "dedup", {"documents_kept": 6, "sources": {"news": {"documents_kept": 3, "removed": 0},
                                                                 "web": {"documents_kept": 3, "removed": 2}}})
    assert run(monkeypatch, "--workdir", str(tmp_path), "--out", str(tmp_path / "r")) == 0
    page = (tmp_path / "r" / "report.html").read_text()
    assert {"funnel.png", "dropped.png"} <= set(re.findall(r"<img src='([^']+)'", page))
    assert "<td>corpus documents</td><td>10</td>" in page and "<td>documents kept by dedup</td><td>6</td>" in page
    assert "<td>news (web)</td><td>lorem_ipsum</td><td>1</td>" in page
    # source, read, with text, after filter, duplicates, kept (blank: no shard stage), ...
    assert "<tr><td>web</td><td>6</td><td>6</td><td>5</td><td>2</td><td></td>" in page
    steps = Funnel({name: read_manifest(lang / name) for name in ("corpus", "filter", "dedup")}).document_steps()
    assert steps == [("corpus documents", {"web": 6, "news": 4}, 10), ("documents kept", {"news": 3, "web": 4}, 7),
                     ("documents written (long ones cut)", {"news": 3, "web": 5}, 8),
                     ("documents kept by dedup", {"news": 3, "web": 3}, 6)]


def test_the_corpus_stages_documents_left_out_as_too_long_and_repeated_ids_are_in_the_sources_table(tmp_path,
                                                                                                   monkeypatch):
    """`pipeline status` and `pipeline report` show, per source, the corpus stage's documents over
    corpus.max_document_bytes and those whose record id repeats, beside the documents read (issue 37)."""
    lang = tmp_path / "hu"
    manifest(lang / "corpus", {"documents": 10, "sources": {
        "web": {"documents": 6, "too_long": 2, "duplicate_ids": 5},
        "news": {"documents": 4, "too_long": 0, "duplicate_ids": 0}}})
    manifest(lang / "sentences", {"documents": 10, "sources": {"web": {"documents": 6}, "news": {"documents": 4}}})
    funnel = Funnel({name: read_manifest(lang / name) for name in ("corpus", "sentences")})
    table = source_table(funnel.source_rows())  # what `pipeline status` prints
    assert list(table[0])[:5] == ["source", "read", "too long", "repeated ids", "with text"]
    assert [(r["source"], r["read"], r["too long"], r["repeated ids"]) for r in table] == [
        ("news", "4", "0", "0"), ("web", "6", "2", "5")]
    assert run(monkeypatch, "--workdir", str(tmp_path), "--out", str(tmp_path / "r")) == 0
    page = (tmp_path / "r" / "report.html").read_text()
    assert "<th>read</th><th>too long</th><th>repeated ids</th><th>with text</th>" in page
    assert "<tr><td>web</td><td>6</td><td>2</td><td>5</td><td>6</td>" in page


def test_missing_or_changed_outputs_are_named_never_ok(work_dir, monkeypatch, capsys):
    """The report judges the work directory by its manifests as `pipeline status` does (without the config: a stage
    done with other settings still describes its data): a stage whose files are gone or changed is left out of
    the figures, named on the page and on stderr, and the exit code is 1."""
    lang = work_dir / "hu"
    shutil.rmtree(lang / "hdf5" / "seq_len_32")  # a deleted variant
    assert run(monkeypatch, "--workdir", str(work_dir), "--out", str(work_dir / "r")) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {lang}: 1 stage not current: {lang / 'hdf5'}: stale "
                                                  "(output seq_len_32/"), lines
    assert captured.out.strip() == str(work_dir / "r" / "report.html")  # written all the same, for what is current
    page = (work_dir / "r" / "report.html").read_text()
    assert "Not current" in page and "seq_len 32: padding share" not in page and "OK" not in page
    assert "<td>pages</td><td>12</td>" in page  # the stages before it still report

    (lang / "extract" / "part-00000.txt").write_text("")  # an emptied extract part: everything after it is stale
    assert run(monkeypatch, "--workdir", str(work_dir), "--out", str(work_dir / "r")) == 1
    err = capsys.readouterr().err
    assert f"{lang / 'extract'}: stale (output part-00000.txt missing or changed)" in err
    assert f"{lang / 'filter'}: stale (input sentences changed)" in err
    page = (work_dir / "r" / "report.html").read_text()
    assert "<td>pages</td>" not in page and "unknown-token rate" not in page

    shutil.rmtree(lang / "sentences")  # a missing stage
    assert run(monkeypatch, "--workdir", str(work_dir), "--out", str(work_dir / "r")) == 1
    assert f"{lang / 'sentences'}: missing (not run)" in capsys.readouterr().err


def test_an_unreadable_hdf5_file_is_named(work_dir, monkeypatch, capsys):
    """A truncated HDF5 file that the manifests cannot catch (a work dir put together by hand, or bit rot at the
    same size and mtime): named on the page and on stderr, exit 1."""
    test_file = work_dir / "hu" / "hdf5" / "seq_len_32" / "test" / "test_0000.hdf5"
    stat = test_file.stat()
    data = test_file.read_bytes()
    test_file.write_bytes(data[:5000] + bytes(len(data) - 5000))
    os.utime(test_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert run(monkeypatch, "--workdir", str(work_dir), "--out", str(work_dir / "r")) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and f"{test_file}: cannot read the file" in err, err
    assert f"{test_file}: cannot read the file" in (work_dir / "r" / "report.html").read_text()


def test_a_doc_sentences_variant_is_labelled_and_has_no_nsp_figures(work_dir, monkeypatch, write_vocab_dir):
    lang = work_dir / "hu"
    pairs = lang / "hdf5" / "seq_len_32"
    doc = write_vocab_dir(lang / "hdf5" / "seq_len_32_doc")
    vocab = read_vocab(doc / "vocab.txt")
    with h5py.File(pairs / "training" / "training_0000.hdf5", "r") as f:
        arrays = read_rows(f)
    rows = np.arange(len(arrays["input_ids"]))
    middle_sep = np.argmax(arrays["segment_ids"] == 1, axis=1) - 1
    arrays["input_ids"][rows, middle_sep] = vocab["w3"]  # [CLS] A B [SEP]: one segment
    arrays["segment_ids"][:] = 0
    arrays["next_sentence_labels"][:] = 0
    (doc / "training").mkdir()
    with h5py.File(doc / "training" / "training_0000.hdf5", "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value.astype(DTYPES[key]))
    params = VariantParams(32, 5, 0.15, 1, 0.0, 0, False, False, len(vocab), special_token_ids(vocab), DOC_SENTENCES)
    (doc / "variant.json").write_text(json.dumps(dataclasses.asdict(params)))
    (lang / "hdf5" / "_manifest.json").unlink()
    manifest(lang / "hdf5", {})  # the stage's files now with this variant
    assert run(monkeypatch, "--workdir", str(work_dir), "--out", str(work_dir / "r")) == 0
    page = (work_dir / "r" / "report.html").read_text()
    assert "<h2>HDF5 variant: seq_len 32 doc-sentences, max_pred 5</h2>" in page and "no sentence pairs" in page
    assert "<td>seq_len 32 doc-sentences: padding share</td>" in page
    assert "seq_len 32 doc-sentences: NSP random next" not in page and "<td>seq_len 32: NSP random next</td>" in page
    assert (work_dir / "r" / "real_tokens_seq_len_32_doc_sentences.png").read_bytes().startswith(PNG_SIGNATURE)
    assert (work_dir / "r" / "real_tokens_seq_len_32.png").is_file()  # the pair variant's, not overwritten
