"""Checkpoints written in the background (`checkpoint_writes: background`, checkpoint.BackgroundSaver): the same
bytes as a blocking save, `latest` only on complete checkpoints whatever moment a kill -9 lands, a stop signal
during a write, and failures reported as one line at the next save or the end of the run."""
from __future__ import annotations

import filecmp
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from wiki2bert_core.errors import DataError
from pretrain.model import checkpoint_files
from pretrain.run import checkpoint
from pretrain.model.checkpoint_files import MODEL_STATES
from pretrain_cli import ENV, TINY, metrics, pretrain, run_ranks, tags, wait_for_rows

COMPARED = ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "lr", "grad_norm")


@pytest.fixture(scope="module")
def data(tmp_path_factory, write_dataset) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"), [40, 40, 40], seq_len=32)


SAME_BYTES_SCRIPT = """
import sys
from pathlib import Path
from pretrain.data.loader import model_inputs
from pretrain.run import checkpoint
from pretrain.run import train
from pretrain.config import load_train_config
from pretrain.run.prepare import prepare

data, out, zero_stage = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
config = load_train_config("phase1", overrides=["global_batch=8", "micro_batch=4", "loader_workers=0", "steps=4",
                                                f"zero_stage={zero_stage}"], values={"preset": "tiny"})
run = prepare("phase1", data, out, config)
engine = train.start(run).engine
batches = iter(train.make_loader(run.data, 4, run.vocab_size, 0, 1, config.seed, 0, None, pack=True))
saver = checkpoint.BackgroundSaver(engine, out / "background", keep=2, world_size=1)
for step in (1, 2):  # the second copy goes into the memory of the first
    for micro in range(2):
        batch, _ = model_inputs(next(batches))
        engine.backward(engine(**batch).loss)
        engine.step()
    client = {"step": step, "ranks": [{"rng": checkpoint.rng_state()}]}
    checkpoint.save(engine, out / "blocking", step, {"world_size": 1}, client, keep=2)
    saver.save(step, {"world_size": 1}, client)
saver.finish()
"""


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage", [0, 2])
def test_a_background_save_writes_the_bytes_of_a_blocking_one(data, tmp_path, zero_stage):
    done = subprocess.run([sys.executable, "-c", SAME_BYTES_SCRIPT, str(data), str(tmp_path), str(zero_stage)],
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for tag in ("step00000001", "step00000002"):
        blocking, background = (checkpoint_files.checkpoint_dir(tmp_path / mode) / tag
                                for mode in ("blocking", "background"))
        names = sorted(p.name for p in blocking.iterdir())
        assert names == sorted(p.name for p in background.iterdir()) and checkpoint_files.META in names
        assert len(names) == (2 if zero_stage == 0 else 3), names  # under ZeRO, the optimizer's shard too
        for name in names:
            assert filecmp.cmp(blocking / name, background / name, shallow=False), (tag, name)
    assert checkpoint_files.latest(tmp_path / "background").tag == "step00000002"


class Engine:
    """What BackgroundSaver uses of a DeepSpeed engine: its config and save_checkpoint through checkpoint_engine."""
    _config = None

    def __init__(self):
        self.checkpoint_engine = None
        self.weights = torch.arange(1000, dtype=torch.float32)

    def save_checkpoint(self, save_dir, tag, client_state, save_latest):
        (Path(save_dir) / tag).mkdir(parents=True)
        self.checkpoint_engine.save({"module": {"w": self.weights}, **client_state},
                                    str(Path(save_dir) / tag / MODEL_STATES))


def test_a_failed_background_write_is_one_line_at_the_next_save_and_keeps_latest(tmp_path, monkeypatch):
    engine = Engine()
    saver = checkpoint.BackgroundSaver(engine, tmp_path, keep=3, world_size=1)
    saver.save(1, {"world_size": 1}, {"step": 1})
    engine.weights += 1  # training goes on while the checkpoint is written: the copy is what it saves
    saver.finish()
    assert torch.load(checkpoint_files.latest(tmp_path).path / MODEL_STATES)["module"]["w"][1] == 1
    torch_save = torch.save

    def full_disk(obj, path, **kwargs):
        Path(path).write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file")

    monkeypatch.setattr(torch, "save", full_disk)
    saver.save(2, {"world_size": 1}, {"step": 2})  # returns: the write fails in the background
    monkeypatch.setattr(torch, "save", torch_save)
    step2 = checkpoint_files.checkpoint_dir(tmp_path) / "step00000002"
    with pytest.raises(DataError, match=rf"^{step2}: saving the checkpoint failed \(RuntimeError: \[enforce fail "
                                        r".*\); .* GiB free there; the latest checkpoint is still step00000001$"):
        saver.save(3, {"world_size": 1}, {"step": 3})  # reported at the next save, which is not begun
    assert checkpoint_files.latest(tmp_path).tag == "step00000001" and tags(tmp_path) == ["step00000001"]

    monkeypatch.setattr(torch, "save", full_disk)
    saver.save(4, {"world_size": 1}, {"step": 4})
    with pytest.raises(DataError, match="step00000004: saving the checkpoint failed"):
        saver.finish()  # or at the end of the run
    assert checkpoint_files.latest(tmp_path).tag == "step00000001" and tags(tmp_path) == ["step00000001"]


def test_a_bug_in_the_background_write_is_raised_as_it_is(tmp_path, monkeypatch):
    saver = checkpoint.BackgroundSaver(Engine(), tmp_path, keep=3, world_size=1)
    monkeypatch.setattr(torch, "save", lambda *args, **kwargs: {}["no such key"])
    saver.save(1, {"world_size": 1}, {"step": 1})
    with pytest.raises(KeyError):
        saver.finish()
    assert checkpoint_files.latest(tmp_path) is None and tags(tmp_path) == []


def test_an_abandoned_write_leaves_latest_and_prunes_only_after_a_complete_checkpoint(tmp_path, monkeypatch):
    engine = Engine()
    saver = checkpoint.BackgroundSaver(engine, tmp_path, keep=1, world_size=1)
    saver.save(1, {"world_size": 1}, {"step": 1})
    saver.finish()
    torch_save = torch.save

    def slow(obj, path, **kwargs):
        time.sleep(0.5)
        if "step00000002" in path:  # keep=1, yet step 1 stays until step 2 is complete
            assert tags(tmp_path) == ["step00000001", "step00000002"]
        torch_save(obj, path, **kwargs)

    monkeypatch.setattr(torch, "save", slow)
    saver.save(2, {"world_size": 1}, {"step": 2})
    saver.finish()
    assert checkpoint_files.latest(tmp_path).tag == "step00000002" and tags(tmp_path) == ["step00000002"]

    engine.save_checkpoint = lambda save_dir, tag, client_state, save_latest: [
        Engine.save_checkpoint(engine, save_dir, tag, client_state, save_latest),
        engine.checkpoint_engine.save({"second": "file"}, str(Path(save_dir) / tag / "second.pt"))]
    saver.save(3, {"world_size": 1}, {"step": 3})
    saver.abandon()  # during the first file: the second is not written
    assert checkpoint_files.latest(tmp_path).tag == "step00000002" and tags(tmp_path) == ["step00000002"]


SLOW_WRITES = """
import random, sys, time, torch
from pretrain.cli import main
save = torch.save

def slow_save(obj, path, **kwargs):  # a slow disk: a write of ~0.5 s in 5 parts, a kill -9 may land in any
    save(obj, path, **kwargs)
    if not isinstance(path, str):  # torch pickles tensors through torch.save into memory too
        return
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        for i in range(5):
            f.write(data[i * len(data) // 5:(i + 1) * len(data) // 5])
            f.flush()
            time.sleep(0.1)

torch.save = slow_save
sys.argv[0] = "pretrain"
main()
"""


@pytest.mark.slow
def test_kill_9_during_background_writes_leaves_a_latest_that_loads_and_resumes_exactly(data, tmp_path):
    args = ["phase1", "--data", str(data), *TINY, "--set", "steps=6", "--set", "checkpoint_every=1",
            "--set", "keep_checkpoints=2", "--set", "loader_workers=0"]
    full = pretrain(*args, "--out", str(tmp_path / "full"), "--set", "checkpoint_writes=blocking")
    assert full.returncode == 0, full.stderr
    expected = metrics(tmp_path / "full" / "phase1")
    latest_steps = []
    for trial, delay in enumerate((0.1, 1.2, 2.4)):  # after the first step's row: kills at different moments
        out = tmp_path / f"killed{trial}"
        proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITES, *args, "--out", str(out)], env=ENV,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for_rows(out / "phase1", 1, proc)
            time.sleep(delay)
        finally:
            proc.kill()
            proc.communicate()
        found = checkpoint_files.latest(out / "phase1")  # DataError if `latest` named a damaged checkpoint
        latest_steps.append(found and found.step)
        if found is not None:
            checkpoint_files.verify(found)
            checkpoint_files.load_weights(found)
        resumed = pretrain(*args, "--out", str(out))  # the same command
        assert resumed.returncode == 0, resumed.stderr
        got = {row["step"]: row for row in metrics(out / "phase1")}
        assert sorted(got) == list(range(1, 7))
        for row in expected:
            for key in COMPARED:
                assert row[key] == got[row["step"]][key], (trial, row["step"], key)  # bit for bit
    assert len(set(latest_steps)) > 1, latest_steps  # the kills landed at different moments


@pytest.mark.slow
def test_sigterm_during_a_background_write_stops_in_seconds_and_resumes_exactly(data, tmp_path):
    args = ["phase1", "--data", str(data), *TINY, "--set", "steps=30", "--set", "checkpoint_every=1",
            "--set", "loader_workers=0", "--out", str(tmp_path)]
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITES, *args], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for_rows(tmp_path / "phase1", 1, proc)
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        seconds = time.monotonic() - start
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert seconds < 15, f"{seconds:.1f} s from SIGTERM to exit\n{stderr}"
    found = checkpoint_files.latest(tmp_path / "phase1")
    assert f"checkpoint of step {found.step} saved" in stderr
    assert [d for d in tags(tmp_path / "phase1") if not (checkpoint_files.checkpoint_dir(tmp_path / "phase1") / d /
                                                         checkpoint_files.META).is_file()] == []
    resumed = pretrain(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert [row["step"] for row in metrics(tmp_path / "phase1")] == list(range(1, 31))


@pytest.mark.slow
def test_two_ranks_write_in_the_background_and_rank_0_completes_once_both_have(data, tmp_path):
    done = run_ranks(2, "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(tmp_path), *TINY,
                     "--set", "steps=4", "--set", "checkpoint_every=1", "--set", "keep_checkpoints=2",
                     "--set", "zero_stage=2")
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "phase1" / "train.log").read_text()
    assert [int(s) for s in re.findall(r"checkpoint of step (\d+) complete: .* in the background", log)] == [1, 2, 3]
    assert tags(tmp_path / "phase1") == ["step00000003", "step00000004"]
    written = checkpoint_files.by_tag(tmp_path / "phase1", "step00000003")  # the last one written in the background
    assert sorted(written.meta["files"]) == [MODEL_STATES, "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                             "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    checkpoint_files.verify(written)
