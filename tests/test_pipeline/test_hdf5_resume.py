"""Stage hdf5 after a kill: the files it finished are reused by the re-run (same inode: not written again), the
final bytes equal an uninterrupted run's, and nothing of the killed run remains (token arrays, temp dirs)."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.stages.hdf5.finished_files import SIDECAR

REPO = Path(__file__).resolve().parents[2]
SHARDS = 16


def hdf5_command(shards: Path, vocab: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "hdf5", "--input", str(shards), "--vocab", str(vocab),
            "--out", str(out), "--quiet", "--set", "hdf5.variants=[{max_seq_length: 64, max_predictions_per_seq: 10}]"]


def file_hashes(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_killed_hdf5_reuses_its_finished_files(tmp_path, write_vocab, write_corpus):
    vocab = tmp_path / "vocab.txt"
    write_vocab(vocab)
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(SHARDS):
        write_corpus(shards / f"training_{i:04d}.txt", 400, seed=i)
    temp = tmp_path / "temp"  # the runs' TMPDIR: must stay empty
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(temp)}
    out = tmp_path / "out"
    finished = tmp_path / "out.partial" / "files"

    proc = subprocess.Popen(hdf5_command(shards, vocab, out), env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while len(list(finished.rglob("*" + SIDECAR))) < 3:
        assert time.time() < deadline and proc.poll() is None, "the run ended before 3 files were finished"
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = {str(s.relative_to(finished))[:-len(SIDECAR)] for s in finished.rglob("*" + SIDECAR)}
    assert 3 <= len(done) < SHARDS
    inodes = {relative: (finished / relative).stat().st_ino for relative in done}
    assert (tmp_path / "out.partial" / "scratch").is_dir()  # the killed run's token arrays

    rerun = subprocess.run(hdf5_command(shards, vocab, out), env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert {relative: (out / relative).stat().st_ino for relative in done} == inodes  # reused, not rewritten
    assert not (tmp_path / "out.partial").exists() and not (tmp_path / "out.tmp").exists()
    assert list(temp.iterdir()) == []

    clean = subprocess.run(hdf5_command(shards, vocab, tmp_path / "clean"), env=env, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr
    assert file_hashes(out) == file_hashes(tmp_path / "clean")
    assert len([p for p in file_hashes(out) if p.endswith(".hdf5")]) == SHARDS


def test_a_finished_file_whose_bytes_changed_is_written_again(tmp_path, write_vocab, write_corpus):
    """A damaged finished file (same size, other bytes) or one made with another config is not reused."""
    from pipeline.stages.hdf5.finished_files import FinishedFiles, file_key

    path = tmp_path / "files" / "v" / "training" / "a.hdf5"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"complete file")
    files = FinishedFiles(tmp_path / "files")
    key = file_key(seed=1, shard="a")
    files.record("v/training/a.hdf5", key, {"instances": 7})
    assert files.reusable("v/training/a.hdf5", key) == {"instances": 7}
    assert files.reusable("v/training/a.hdf5", file_key(seed=2, shard="a")) is None
    path.write_bytes(b"damaged file!")
    assert files.reusable("v/training/a.hdf5", key) is None
    (tmp_path / "files" / "v" / "training" / "b.hdf5.tmp").write_bytes(b"half")
    files.prune({"v/training/a.hdf5"})
    assert sorted(p.name for p in (tmp_path / "files" / "v" / "training").iterdir()) == ["a.hdf5", "a.hdf5" + SIDECAR]
