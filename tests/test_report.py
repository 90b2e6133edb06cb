"""`pipeline report`: an HTML page referencing valid PNGs for a test-made work directory; one line for a work
directory with no stage done."""
from __future__ import annotations

import json
import re
import sys

import h5py
import pytest

from wiki2bert_core.hdf5_format import DTYPES, read_rows
from wiki2bert_core.wordpiece import SPECIAL_TOKENS, read_vocab, wordpiece_tokenizer

from pipeline.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def manifest(stage_dir, counts):
    stage_dir.mkdir(parents=True, exist_ok=True)
    (stage_dir / "_manifest.json").write_text(json.dumps({"stage": stage_dir.name, "counts": counts}))


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
    manifest(lang / "hdf5", {})
    write_vocab_dir(lang / "vocab")
    manifest(lang / "vocab", {})
    manifest(lang / "extract", {"pages": 12, "articles": 9, "skipped": {"redirect": 3}})
    manifest(lang / "filter", {"documents_kept": 3})
    (lang / "filter" / "report.json").write_text(json.dumps({"dropped": {"min_sentences": {"documents": 6}}}))
    (lang / "filter" / "part-00000.txt").write_text("w1 w2 w3\nw4 w5\n\nw6 zz\n\nw7\nw8\nw9 w10\n")
    manifest(lang / "shard", {"training_documents": 2, "test_documents": 1})
    (lang / "shard" / "test_0000.txt").write_text("w1 w2 qq\nw3\n\n")
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
    assert {"funnel.png", "dropped.png", "sentences_per_document.png", "tokens_per_document.png",
            "real_tokens_seq_len_32.png"} <= set(images)
    for name in images:
        assert (work_dir / "r" / name).read_bytes().startswith(PNG_SIGNATURE)
    assert "<td>pages</td><td>12</td>" in page and "<td>documents kept</td><td>3</td>" in page
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
    vocab = [*SPECIAL_TOKENS, *"東京は大きい。", *(f"##{c}" for c in "東京は大きい")]
    (lang / "vocab").mkdir(parents=True)
    (lang / "vocab" / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    wordpiece_tokenizer(read_vocab(lang / "vocab" / "vocab.txt")).save(str(lang / "vocab" / "tokenizer.json"))
    manifest(lang / "vocab", {})
    manifest(lang / "filter", {})
    (lang / "filter" / "_manifest.json").write_text(json.dumps({"stage": "filter", "config": {"chars_per_word": 1.7}}))
    manifest(lang / "shard", {})
    (lang / "shard" / "test_0000.txt").write_text("東京は大きい。\n\n", encoding="utf-8")
    assert run(monkeypatch, "--workdir", str(tmp_path), "--out", str(tmp_path / "r")) == 0
    page = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    # 東 京 は 大 き ##い 。: 7 tokens; 6 kanji and kana / 1.7 + "。" = 4.53 words
    assert f"tokens per word (test split)</td><td>{7 / (6 / 1.7 + 1):.3f}<" in page
