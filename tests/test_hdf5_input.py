"""`pipeline hdf5` on the user's own text: text that would lose data silently gets a warning with counts, and a bad
file is named as the user gave it (not as the scratch copy the command works on)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def hdf5_cli(write_vocab):
    def hdf5_cli(tmp_path: Path, text: Path) -> subprocess.CompletedProcess:
        vocab = tmp_path / "vocab.txt"
        write_vocab(vocab)
        args = ["hdf5", "--input", text, "--vocab", vocab, "--out", tmp_path / "out", "--quiet", "--set",
                "hdf5.variants=[{max_seq_length: 64, max_predictions_per_seq: 10}]", "--set", "hdf5.dupe_factor=1"]
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *map(str, args)], capture_output=True, text=True,
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    return hdf5_cli


def test_a_huge_line_and_a_file_without_blank_lines_are_reported_with_counts(tmp_path, hdf5_cli, write_corpus):
    text = tmp_path / "corpus.txt"
    write_corpus(text, 20)
    lines = text.read_text().splitlines()
    huge = " ".join(["w7"] * 100_000) + " ."  # 300 KB "sentence": 64 tokens of it fit in an instance
    text.write_text("\n".join(lines[:5] + [huge] + lines[5:]) + "\n")
    result = hdf5_cli(tmp_path, text)
    assert result.returncode == 0, result.stderr
    assert f"{text}: 1 line(s) longer than 1024 bytes (the longest: line 6, {len(huge) + 1} bytes)" in result.stderr
    assert "no blank line" not in result.stderr

    flat = tmp_path / "flat.txt"
    flat.write_text("\n".join(line for line in lines if line) + "\n")
    result = hdf5_cli(tmp_path, flat)
    count = sum(1 for line in lines if line)
    assert f"{flat}: no blank line between its {count} sentences, so the whole file is one document" in result.stderr


def test_bad_text_is_named_as_the_user_gave_it(tmp_path, hdf5_cli, write_corpus):
    text = tmp_path / "mine.txt"
    write_corpus(text, 5)
    text.write_bytes(text.read_bytes() + b"w1 \xff w2 .\n\n")
    result = hdf5_cli(tmp_path, text)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {text}: line ") and "not UTF-8" in lines[0]


def test_input_without_text_is_named_as_the_user_gave_it(tmp_path, hdf5_cli):
    text = tmp_path / "empty.txt"
    text.write_text("\n\n")
    result = hdf5_cli(tmp_path, text)
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: {text}: no text to make instances from (only blank lines)"


def test_a_token_holding_a_unicode_line_separator_keeps_the_ids_bert_tokenizers_give(tmp_path, write_vocab,
                                                                                     write_corpus):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    vocab = tmp_path / "vocab.txt"
    write_vocab(vocab)
    lines = vocab.read_text().splitlines()
    vocab.write_text("\n".join(lines[:5] + ["w\u2028x"] + lines[5:]) + "\n")  # one line, one token
    text = tmp_path / "corpus.txt"
    write_corpus(text, 20)
    args = ["hdf5", "--input", text, "--vocab", vocab, "--out", tmp_path / "out", "--quiet", "--set",
            "hdf5.variants=[{max_seq_length: 64, max_predictions_per_seq: 10}]", "--set", "hdf5.dupe_factor=1"]
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", *map(str, args)], capture_output=True, text=True,
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    [variant] = (tmp_path / "out").iterdir()
    bert = transformers.BertTokenizer(str(vocab)).get_vocab()
    assert len(bert) == len(lines) + 1
    assert Tokenizer.from_file(str(variant / "tokenizer.json")).get_vocab() == bert  # the ids the files hold
    assert json.loads((variant / "variant.json").read_text())["vocab_size"] == len(bert)
