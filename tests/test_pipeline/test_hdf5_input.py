"""`pipeline hdf5` on the user's own text: text that would lose data silently gets a warning with counts, and a bad
file is named as the user gave it (not as the scratch copy the command works on)."""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.stages.hdf5.finished_files import SIDECAR

REPO = Path(__file__).resolve().parents[2]


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


def hdf5_command(text: Path, vocab: Path, out: Path, workers: int = 1) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "hdf5", "--input", str(text), "--vocab", str(vocab), "--out",
            str(out), "--quiet", "--workers", str(workers), "--set", "hdf5.dupe_factor=3",
            "--set", "hdf5.variants=[{max_seq_length: 64, max_predictions_per_seq: 10}]"]


def run_hdf5(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_failed_run_leaves_no_empty_partial_but_keeps_finished_files(tmp_path, write_vocab, write_corpus):
    text, vocab = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
    write_corpus(text, 20)
    vocab.write_text("w1\nw2\n")  # no special tokens: refused after the command made its scratch dir
    partial = tmp_path / "out.partial"
    result = run_hdf5(hdf5_command(text, vocab, tmp_path / "out"), tmp_path)
    assert result.returncode == 1 and "special tokens missing" in result.stderr
    assert not partial.exists() and not (tmp_path / "out").exists()

    finished = partial / "files" / "variant" / "training" / "training_corpus.hdf5"
    finished.parent.mkdir(parents=True)
    finished.write_bytes(b"a file a killed run finished")
    Path(f"{finished}{SIDECAR}").write_text("{}")
    assert run_hdf5(hdf5_command(text, vocab, tmp_path / "out"), tmp_path).returncode == 1
    assert finished.read_bytes() == b"a file a killed run finished"  # kept for the run that resumes


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    """A tmpfs at `path` (root only); skips the test where mounting is not allowed."""
    path.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_full_disk_is_one_line_naming_the_file(tmp_path, write_vocab, write_corpus, workers):
    """h5py reports a full disk as RuntimeError or OSError with HDF5's errno in its text (and HDF5 2.0 crashed at
    exit when the failed file was closed twice): one line naming the file, exit 1, from the main process and from
    a worker."""
    text, vocab = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
    write_corpus(text, 400)
    write_vocab(vocab)
    with small_tmpfs(tmp_path / "small", "200k") as small:
        result = run_hdf5(hdf5_command(text, vocab, small / "out", workers), tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1 and len(lines) == 1, result.stderr
        assert re.fullmatch(rf"error: {re.escape(str(small))}/out\.partial/files/\S+/training_corpus\.hdf5\.tmp: "
                            r"No space left on device", lines[0]), lines[0]
        assert list(small.iterdir()) == []  # the half-written file and the empty .partial are gone


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
