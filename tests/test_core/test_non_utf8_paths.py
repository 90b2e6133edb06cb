"""Paths whose bytes are not UTF-8 (on Linux they arrive as str with surrogate escapes: b'caf\\xe9' -> 'caf\\udce9')
are refused up front, in one line naming the flag and showing the bad byte, by every command of both halves; a file
of such a name inside an input directory is named in one line too. Run under a strict UTF-8 terminal encoding, as a
user's en_US.UTF-8 one is (the C.UTF-8 locale would hide the crashes behind surrogateescape)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BAD = os.fsdecode(b"caf\xe9")  # 'caf\udce9'
SHOWN = "caf\\xe9"  # how the messages show it


def run(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8:strict"}
    return subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True, text=True,
                          errors="replace", cwd=cwd, env=env, timeout=120)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# (command line with {bad} for a non-UTF-8 directory and {ok} for a UTF-8 one, the flag named in the message)
COMMANDS = [
    ("pipeline.cli run --lang hu --workdir {bad}/w --dump {ok}/dump.xml.bz2", "--workdir"),
    ("pipeline.cli run --lang hu --workdir {ok}/w --dump {bad}/dump.xml.bz2", "--dump"),
    ("pipeline.cli stage download --lang hu --workdir {bad}/w --dump {ok}/dump.xml.bz2", "--workdir"),
    ("pipeline.cli status --lang hu --workdir {bad}/w", "--workdir"),
    ("pipeline.cli config --lang hu --config {bad}/stages.yaml", "--config"),
    ("pipeline.cli hdf5 --input {bad}/in.txt --vocab {ok}/vocab.txt --out {ok}/out", "--input"),
    ("pipeline.cli hdf5 --input {ok}/in.txt --vocab {bad}/vocab.txt --out {ok}/out", "--vocab"),
    ("pipeline.cli hdf5 --input {ok}/in.txt --vocab {ok}/vocab.txt --out {bad}/out", "--out"),
    ("pipeline.cli verify {bad}", "PATH"),
    ("pipeline.cli report --lang hu --workdir {bad}/w", "--workdir"),
    ("pipeline.cli report --lang hu --workdir {ok}/w --out {bad}/r", "--out"),
    ("pipeline.cli sample-dump {bad}/dump --pages 5", "OUT_DIR"),
    ("pipeline.cli sample-corpus {bad}/web --docs 5", "OUT_DIR"),
    ("pipeline.cli run --lang hu --workdir {ok}/w --corpus web={bad}/web.jsonl:2", "--corpus"),
    ("pretrain.cli phase1 --data {bad}/data --out {ok}/run", "--data"),
    ("pretrain.cli phase1 --data {ok}/data --out {bad}/run", "--out"),
    ("pretrain.cli phase2 --data {ok}/data --out {ok}/run --init {bad}/phase1", "--init"),
    ("pretrain.cli export {bad}/run/phase1 --out {ok}/hf", "MODEL_DIR"),
    ("pretrain.cli export {ok}/run/phase1 --out {bad}/hf", "--out"),
    ("pretrain.cli eval {bad}/hf --data {ok}/data", "PATH"),
    ("pretrain.cli eval {ok}/hf --data {bad}/data", "--data"),
    ("pretrain.cli plot {bad}/run", "RUN_DIR"),
    ("pretrain.cli plot {ok}/run --out {bad}/plots", "--out"),
]


@pytest.mark.parametrize("command, flag", COMMANDS, ids=[c.split()[1] + " " + f for c, f in COMMANDS])
def test_a_non_utf8_path_is_refused_in_one_line_naming_the_flag(tmp_path, command, flag):
    bad, ok = tmp_path / BAD, tmp_path / "ok"
    bad.mkdir()
    ok.mkdir()
    result = run(*command.format(bad=bad, ok=ok).split(), cwd=tmp_path)
    line = one_error_line(result)
    assert result.returncode == 2, result.stderr
    assert line.startswith(f"error: {flag}: ") and f"{SHOWN}" in line and "not UTF-8" in line, line
    assert not (bad / "w").exists() and not (bad / "dump").exists() and not (bad / "run").exists()


def test_a_relative_path_in_a_non_utf8_current_directory_is_refused(tmp_path):
    bad = tmp_path / BAD
    bad.mkdir()
    result = run("pipeline.cli", "status", "--lang", "hu", "--workdir", "w", cwd=bad)
    line = one_error_line(result)
    assert result.returncode == 2 and line.startswith("error: --workdir: ") and SHOWN in line, line


PRINTER = """
import logging, sys
from pathlib import Path
from wiki2bert_core.errors import DataError, run_cli
from wiki2bert_core.log import setup_logging

def app():
    log = setup_logging(Path(sys.argv[1]) / "pipeline.log")
    log.warning("reading %s", sys.argv[1])
    raise DataError(sys.argv[1] + ": boom")

run_cli(app, "interrupted")
"""


def test_the_error_line_and_the_log_never_crash_on_a_non_utf8_name(tmp_path):
    """A message holding such a name (from code that lists a directory, say) is printed with the byte escaped, and the
    log file takes it (a failed write there would have silently ended the log)."""
    bad = tmp_path / BAD
    bad.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", PRINTER, str(bad)], capture_output=True, text=True, errors="replace", cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8:strict"}, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1] == f"error: {os.fsencode(bad).decode('utf-8', 'backslashreplace')}: boom"
    assert "reading" in (bad / "pipeline.log").read_text(encoding="utf-8")


@pytest.fixture
def data_with_a_non_utf8_name(tmp_path, write_dataset, write_hdf5) -> Path:
    """A variant directory whose training and test splits each hold a file of a non-UTF-8 name next to a good one."""
    variant = write_dataset(tmp_path / "data", [20])
    write_hdf5(variant / "training" / f"{BAD}.hdf5", 20, seed=1)
    write_hdf5(variant / "test" / "test_0000.hdf5", 20, seed=2)
    write_hdf5(variant / "test" / f"{BAD}.hdf5", 20, seed=3)
    return variant


@pytest.mark.parametrize("command, split", [
    ("pipeline.cli verify {data}", "test"),  # the first in name order
    ("pretrain.cli eval {tmp}/no-model --data {data}", "test"),
    ("pretrain.cli phase1 --data {data} --out {tmp}/run --preset tiny", "training"),
], ids=["verify", "eval", "phase1"])
def test_a_non_utf8_file_name_in_a_data_directory_is_one_line(tmp_path, data_with_a_non_utf8_name, command, split):
    result = run(*command.format(data=data_with_a_non_utf8_name, tmp=tmp_path).split(), cwd=tmp_path)
    line = one_error_line(result)
    named = os.fsencode(data_with_a_non_utf8_name / split / f"{BAD}.hdf5").decode("utf-8", "backslashreplace")
    assert result.returncode == 1 and line.startswith(f"error: {named}: the file name is not UTF-8"), line
    assert not (tmp_path / "run").exists()


def test_a_non_utf8_file_name_in_an_hdf5_input_directory_is_one_line(tmp_path, write_vocab, write_corpus):
    text_dir = tmp_path / "in"
    text_dir.mkdir()
    write_corpus(text_dir / "a.txt", 5)
    write_corpus(text_dir / f"{BAD}.txt", 5, seed=1)
    write_vocab(tmp_path / "vocab.txt")
    result = run("pipeline.cli", "hdf5", "--input", text_dir, "--vocab", tmp_path / "vocab.txt", "--out",
                 tmp_path / "out", "--quiet", "--set",
                 "hdf5.variants=[{max_seq_length: 64, max_predictions_per_seq: 10}]", cwd=tmp_path)
    line = one_error_line(result)
    assert result.returncode == 1, result.stderr
    assert line.startswith(f"error: {text_dir}/{SHOWN}.txt: the file name is not UTF-8"), line
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_non_utf8_file_name_in_a_corpus_directory_is_one_line(tmp_path):
    corpus = tmp_path / "web"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text('{"text": "Egy mondat."}\n', encoding="utf-8")
    (corpus / f"{BAD}.jsonl").write_text('{"text": "Más mondat."}\n', encoding="utf-8")
    result = run("pipeline.cli", "run", "--lang", "hu", "--workdir", tmp_path / "w", "--corpus", f"web={corpus}",
                 "--quiet", cwd=tmp_path)
    line = one_error_line(result)
    assert result.returncode == 1 and line.startswith(f"error: {corpus}/{SHOWN}.jsonl: the file name is not UTF-8"), \
        line
    assert not (tmp_path / "w" / "hu" / "corpus").exists()


def test_a_symlink_into_a_non_utf8_directory_is_refused(tmp_path):
    """--dump is stored resolved (the same file from any directory), so a UTF-8 link to a non-UTF-8 path counts."""
    bad = tmp_path / BAD
    bad.mkdir()
    (bad / "dump.xml.bz2").write_bytes(b"")
    (tmp_path / "dump.xml.bz2").symlink_to(bad / "dump.xml.bz2")
    result = run("pipeline.cli", "run", "--lang", "hu", "--workdir", "w", "--dump", "dump.xml.bz2", cwd=tmp_path)
    line = one_error_line(result)
    assert result.returncode == 2 and line.startswith("error: --dump: ") and f"{SHOWN}/dump.xml.bz2" in line, line
