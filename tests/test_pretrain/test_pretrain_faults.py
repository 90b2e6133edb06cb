"""Pretraining under faults, injected by the tests: SIGTERM in the middle of a large gradient accumulation (stop
within a micro-batch, resume exactly), a signal to one rank of two, a full disk while saving a checkpoint, a
truncated or damaged checkpoint on resume and export, damaged or out-of-range data met during training, a
misspelled key in --deepspeed-config, a second run on a phase directory another run holds. Each gets one `error:`
line naming the file, a non-zero exit and nothing that looks complete."""
from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import psutil
import pytest

from wiki2bert_core.errors import ConfigError, DataError
from pretrain.model import checkpoint_files
from pretrain.config import load_train_config
from pretrain.run.prepare import prepare
from hdf5_edits import rechunk
from checkpoint_states import assert_same, checkpoint_states
from pretrain_cli import ENV, TINY, metrics, pretrain, run_ranks, start_pretrain, start_ranks, torchrun, wait_for_rows

REPO = Path(__file__).resolve().parents[2]

ACCUMULATION = 64
LARGE_ACCUMULATION = ["--set", f"global_batch={4 * ACCUMULATION}"]  # micro_batch 4 (TINY)
ABANDONED = re.compile(r"step (\d+) abandoned after (\d+) of (\d+) micro-batches")


@pytest.fixture(scope="module")
def data(tmp_path_factory, write_dataset) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"), [40, 40, 40], seq_len=32)


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage", [0, 2])
def test_sigterm_mid_accumulation_stops_within_a_micro_batch_and_resumes_exactly(data, tmp_path, zero_stage):
    args = ["phase1", "--data", str(data), *TINY, *LARGE_ACCUMULATION, "--set", "steps=3",
            "--set", f"zero_stage={zero_stage}"]
    full = pretrain(*args, "--out", str(tmp_path / "full"), "--set", "checkpoint_every=1",
                    "--set", "keep_checkpoints=3")
    assert full.returncode == 0, full.stderr

    stopped = [*args, "--out", str(tmp_path / "stopped"), "--set", "checkpoint_every=100"]
    proc = start_pretrain(*stopped)
    try:
        first = wait_for_rows(tmp_path / "stopped" / "phase1", 1, proc)[0]
        time.sleep(4 * ACCUMULATION / first["samples_per_s"] / 3)  # a third into step 2
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    abandoned = ABANDONED.search(stderr)
    assert abandoned and int(abandoned[3]) == ACCUMULATION, stderr
    completed = int(abandoned[1]) - 1
    found = checkpoint_files.latest(tmp_path / "stopped" / "phase1")
    assert found.step == completed and f"checkpoint of step {completed} saved" in stderr
    # what the stopped run saved is what the uninterrupted run saved at that step: no accumulated gradient in it
    assert_same(checkpoint_states(found.path),
                checkpoint_states(checkpoint_files.checkpoint_dir(tmp_path / "full" / "phase1") / found.tag))

    resumed = pretrain(*stopped)  # the same command
    assert resumed.returncode == 0, resumed.stderr
    expected, got = metrics(tmp_path / "full" / "phase1"), metrics(tmp_path / "stopped" / "phase1")
    assert [row["step"] for row in got] == [1, 2, 3]
    for a, b in zip(expected, got):
        for key in ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "lr", "grad_norm"):
            assert a[key] == b[key], (a["step"], key)  # bit for bit
    assert len({row["loss"] for row in expected}) == 3


@pytest.mark.slow
def test_a_signal_to_one_rank_stops_both_at_the_same_micro_batch(data, tmp_path):
    out = tmp_path / "two"
    args = ["phase1", "--data", str(data), "--out", str(out), *TINY, *LARGE_ACCUMULATION, "--set", "steps=50",
            "--set", "checkpoint_every=100"]
    launch = [*torchrun(2), "-m", "pretrain.cli"]
    proc = subprocess.Popen(launch + args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_for_rows(out / "phase1", 1, proc)
        workers = [p for p in psutil.Process(proc.pid).children() if "pretrain.cli" in " ".join(p.cmdline())]
        assert len(workers) == 2
        workers[1].send_signal(signal.SIGTERM)  # as if one node of a job were preempted first
        _, stderr = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers, whatever happened
    assert stderr.count("abandoning the step in progress") == 1, stderr
    abandoned = ABANDONED.findall(stderr)
    assert len(abandoned) == 2 and abandoned[0] == abandoned[1], stderr  # both ranks, same step and micro-batch
    found = checkpoint_files.latest(out / "phase1")
    assert found.step == int(abandoned[0][0]) - 1 and found.meta["world_size"] == 2


EVALUATING = re.compile(r"step (\d+): held-out evaluation of")
STOP_SECONDS = 15  # from SIGTERM to exit: a batch, a tiny checkpoint and the process's teardown, on a loaded machine


@pytest.fixture(scope="module")
def long_held_out(tmp_path_factory, write_hdf5) -> Path:
    """Held-out files that take a tiny model far longer than STOP_SECONDS to evaluate on CPU."""
    held_out = tmp_path_factory.mktemp("held_out")
    write_hdf5(held_out / "test_0000.hdf5", 60_001, seq_len=32)
    return held_out


def wait_for_evaluation(log_file: Path, proc: subprocess.Popen, timeout: float = 240) -> int:
    """The step whose held-out evaluation the run (its train.log) has started."""
    deadline = time.monotonic() + timeout
    while not (log_file.is_file() and (started := EVALUATING.search(log_file.read_text()))):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1)  # well inside it
    return int(started[1])


@pytest.mark.slow
def test_sigterm_during_held_out_evaluation_stops_within_seconds_and_resumes_exactly(data, long_held_out, tmp_path):
    args = ["phase1", "--data", str(data), *TINY, "--set", "steps=3"]
    full = pretrain(*args, "--out", str(tmp_path / "full"), "--set", "eval_every=0", "--set", "checkpoint_every=1",
                    "--set", "keep_checkpoints=3")
    assert full.returncode == 0, full.stderr

    # a third of long_held_out: the resumed run evaluates them all at the phase's end (all 60,001 were most of this
    # test's time, and at load 12 ran past the 300 s a run is given), and they still take seconds after the signal
    # lands 1 s into the evaluation
    stopped = [*args, "--out", str(tmp_path / "stopped"), "--eval-data", str(long_held_out), "--set", "eval_every=2",
               "--set", "eval_samples=20001", "--set", "checkpoint_every=100"]
    phase_dir = tmp_path / "stopped" / "phase1"
    proc = start_pretrain(*stopped)
    try:
        assert wait_for_evaluation(phase_dir / "train.log", proc) == 2
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
        seconds = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert seconds < STOP_SECONDS, f"{seconds:.1f} s from SIGTERM to exit\n{stderr}"
    assert "held-out evaluation of step 2 abandoned" in stderr and "checkpoint of step 2 saved" in stderr, stderr
    assert [row["step"] for row in metrics(phase_dir)] == [1, 2]  # no eval_* row for the abandoned evaluation
    # the abandoned evaluation changed nothing the training carries on with: the checkpoint is an uninterrupted
    # run's (without evaluation), random states included
    found = checkpoint_files.latest(phase_dir)
    assert found.step == 2
    assert_same(checkpoint_states(found.path),
                checkpoint_states(checkpoint_files.checkpoint_dir(tmp_path / "full" / "phase1") / found.tag))

    start = time.monotonic()
    resumed = pretrain(*stopped)  # the same command: step 3 and, at the phase's end, a whole evaluation
    assert resumed.returncode == 0, resumed.stderr
    assert time.monotonic() - start > 2 * seconds  # the stop came well before the evaluation would have ended
    expected, got = metrics(tmp_path / "full" / "phase1"), metrics(phase_dir)
    assert [row["step"] for row in got] == [1, 2, 3, 3] and "eval_mlm_accuracy" in got[3]
    for a, b in zip(expected, got[:3]):
        for key in ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "lr", "grad_norm"):
            assert a[key] == b[key], (a["step"], key)  # bit for bit


@pytest.mark.slow
def test_a_signal_to_one_rank_during_evaluation_stops_both_within_seconds(data, long_held_out, tmp_path):
    out = tmp_path / "two"
    # 60,001 instances: the ranks hold 30,000 and 30,001, a different number of batches of 2
    args = ["phase1", "--data", str(data), "--out", str(out), *TINY, "--set", "micro_batch=2", "--set", "steps=50",
            "--set", "eval_every=1",
            "--eval-data", str(long_held_out), "--set", "eval_samples=60001", "--set", "checkpoint_every=100"]
    ranks = start_ranks(2, "-m", "pretrain.cli", *args)
    try:
        assert wait_for_evaluation(out / "phase1" / "train.log", ranks[0]) == 1
        sent = time.monotonic()
        ranks[1].send_signal(signal.SIGTERM)  # as if one node of a job were preempted first
        stderr = "".join(rank.communicate(timeout=300)[1] for rank in ranks)
        seconds = time.monotonic() - sent
    finally:
        for rank in ranks:
            rank.kill()
    assert seconds < STOP_SECONDS, f"{seconds:.1f} s from SIGTERM to exit\n{stderr}"
    assert [rank.returncode for rank in ranks] == [128 + signal.SIGTERM] * 2, stderr
    assert stderr.count("held-out evaluation of step 1 abandoned") == 2, stderr  # both ranks
    found = checkpoint_files.latest(out / "phase1")
    assert found.step == 1 and found.meta["world_size"] == 2
    assert [row["step"] for row in metrics(out / "phase1")] == [1]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_pretrain_eval_within_seconds(two_checkpoints, long_held_out, signum):
    proc = subprocess.Popen([sys.executable, "-m", "pretrain.cli", "eval", str(two_checkpoints), "--data",
                             str(long_held_out), "--samples", "60001", "--batch", "4"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a suite started in the background (`cmd &`) hands its children SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert "instances of" in proc.stderr.readline()  # the evaluation starts
        time.sleep(1)
        sent = time.monotonic()
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=300)
        seconds = time.monotonic() - sent
    finally:
        proc.kill()
    assert seconds < STOP_SECONDS, f"{seconds:.1f} s from the signal to exit\n{stderr}"
    assert proc.returncode in (128 + signum, -signum) and "Traceback" not in stderr, stderr
    assert stdout == ""  # no figures of a part of the instances


def limited_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.slow
def test_a_full_disk_while_saving_a_checkpoint_is_one_line_and_keeps_latest(data, tmp_path):
    args = ["phase1", "--data", str(data), "--out", str(tmp_path), *TINY, "--set", "steps=3",
            "--set", "checkpoint_every=1"]
    assert pretrain(*args, "--set", "steps_this_run=1").returncode == 0
    # the checkpoint's files are larger than 1 MiB, the run's other files are not: the disk is full for the save
    full = subprocess.run([sys.executable, "-m", "pretrain.cli", *args], env=ENV, capture_output=True, text=True,
                          timeout=300, preexec_fn=limited_file_size(2 ** 20))
    last = full.stderr.strip().splitlines()[-1]
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    step2 = checkpoint_files.checkpoint_dir(tmp_path / "phase1") / "step00000002"
    assert last.startswith(f"error: {step2}: saving the checkpoint failed"), last
    assert "the latest checkpoint is still step00000001" in last
    assert checkpoint_files.latest(tmp_path / "phase1").tag == "step00000001" and not step2.exists()


@pytest.fixture(scope="module")
def two_checkpoints(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    done = pretrain("phase1", "--data", str(data), "--out", str(out), *TINY, "--set", "steps=3",
                    "--set", "checkpoint_every=1", "--set", "steps_this_run=2")
    assert done.returncode == 0, done.stderr
    return out / "phase1"


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "missing", "overwritten", "flipped"])
def test_a_damaged_latest_checkpoint_is_refused_naming_the_previous_good_one(data, two_checkpoints, tmp_path,
                                                                               damage):
    phase = tmp_path / "phase1"
    shutil.copytree(two_checkpoints, phase)
    states = checkpoint_files.checkpoint_dir(phase) / "step00000002" / checkpoint_files.MODEL_STATES
    size = states.stat().st_size
    if damage == "truncated":
        with open(states, "r+b") as f:
            f.truncate(size // 2)
    elif damage == "missing":
        states.unlink()
    elif damage == "overwritten":  # same size, the zip directory at its end destroyed
        with open(states, "r+b") as f:
            f.seek(size - 200)
            f.write(b"\0" * 200)
    else:  # one bit of a weight: torch.load reads it without complaint; only the checksum finds it
        with open(states, "r+b") as f:
            f.seek(size // 2)
            byte = f.read(1)
            f.seek(size // 2)
            f.write(bytes([byte[0] ^ 0x10]))
    previous = checkpoint_files.checkpoint_dir(phase) / "step00000001"
    for command in (["phase1", "--data", str(data), "--out", str(tmp_path), *TINY, "--set", "steps=3",
                     "--set", "checkpoint_every=1"],
                    ["export", str(phase), "--out", str(tmp_path / "hf")]):
        done = pretrain(*command)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert lines[-1].startswith("error: ") and str(states.parent) in lines[-1], lines[-1]
        assert f"the previous complete checkpoint is {previous}" in lines[-1], lines[-1]
    assert not (tmp_path / "hf").exists()
    latest = checkpoint_files.checkpoint_dir(phase) / checkpoint_files.LATEST
    assert latest.read_text() == "step00000002"  # left as it was, for the user to look at
    if damage == "missing":  # doing what the message says works
        latest.write_text("step00000001")
        assert pretrain("export", str(phase), "--out", str(tmp_path / "hf")).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["damaged chunk", "masked position"])
def test_bad_data_met_during_training_is_one_line_and_saves_nothing(tmp_path, fault, write_dataset):
    variant = write_dataset(tmp_path / "data", [400], seq_len=32)
    path = variant / "training" / "training_0000.hdf5"
    if fault == "damaged chunk":
        rechunk(path, 50)
        with h5py.File(path, "r") as f:
            chunk = f["segment_ids"].id.get_chunk_info(7)  # rows past those checked before training
        raw = bytearray(path.read_bytes())
        raw[chunk.byte_offset:chunk.byte_offset + chunk.size] = b"\xff" * chunk.size
        path.write_bytes(bytes(raw))
        message = f"error: {path}: cannot read its datasets ("
    else:
        with h5py.File(path, "a") as f:
            f["masked_lm_positions"][390, 0] = 32
        message = f"error: {path}: row 390: masked_lm_positions holds a position outside the sequence of 32 tokens"
    done = pretrain("phase1", "--data", str(variant), "--out", str(tmp_path / "run"), *TINY, "--set", "steps=60",
                    "--set", "checkpoint_every=1000", "--set", "loader_workers=1")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(message), done.stderr
    assert checkpoint_files.latest(tmp_path / "run" / "phase1") is None


@pytest.mark.parametrize("user, message", [
    ({"gradient_clippping": 0.5}, "ds.json: gradient_clippping: not a DeepSpeed setting"),
    ({"flops_profiler": {"enabled": True, "profile_stepp": 3}}, "ds.json: flops_profiler.profile_stepp: not a "
                                                                "DeepSpeed setting"),
    ({"zero_optimization": {"reduce_bucket_sizee": 1000}}, "ds.json: zero_optimization.reduce_bucket_sizee: not a "
                                                           "DeepSpeed setting"),
    ({"bf16": {"enabled": "maybe"}}, "ds.json: bf16.enabled: "),
])
def test_a_misspelled_deepspeed_setting_is_refused_with_one_line(data, tmp_path, user, message):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(user))
    config = load_train_config("phase1", overrides=["preset=tiny", "seq_len=32", "global_batch=8", "micro_batch=4"])
    with pytest.raises(ConfigError) as e:
        prepare("phase1", data, tmp_path / "r", config, deepspeed_config=path)
    assert str(e.value).startswith(str(tmp_path / message)) and "\n" not in str(e.value), str(e.value)
    path.write_text(json.dumps({"zero_optimization": {"reduce_bucket_size": 1000}, "wall_clock_breakdown": True,
                                "flops_profiler": {"enabled": False, "profile_step": 3}}))
    assert prepare("phase1", data, tmp_path / "r", config, deepspeed_config=path).user_ds_config


@contextlib.contextmanager
def held_lock(directory: Path):
    """A process holding `directory`'s lock as a running phase holds its phase directory, with a forked child (as a
    DataLoader worker, which outlives a SIGKILLed run by seconds); both are SIGKILLed after the block."""
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(REPO)!r})
        from wiki2bert_core.dir_lock import lock_directory
        assert lock_directory({str(directory)!r}) is None
        if os.fork() == 0:
            time.sleep(600)
        print("locked", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


@pytest.mark.slow
def test_a_second_run_on_a_busy_phase_dir_is_refused_and_a_killed_runs_lock_is_free(data, tmp_path):
    phase_dir = tmp_path / "run" / "phase1"
    args = ["phase1", "--data", str(data), "--out", str(tmp_path / "run"), *TINY, "--set", "steps=1"]
    with held_lock(phase_dir) as holder:
        refused = pretrain(*args)
        assert refused.returncode == 1 and refused.stderr == (
            f"error: {phase_dir}: another pretraining run (pid {holder.pid} on {socket.gethostname()}) is using "
            f"this phase directory; wait for it to finish or use another --out\n")
        assert sorted(p.name for p in phase_dir.iterdir()) == [".lock"]  # not even a log line written
        holder.kill()  # its child lives on: the lock must not
        holder.wait()
        done = pretrain(*args)
    assert done.returncode == 0, done.stderr
    assert [row["step"] for row in metrics(phase_dir)] == [1]


@pytest.mark.slow
def test_eval_and_plot_of_a_running_phase_are_not_blocked_by_its_lock(data, two_checkpoints, tmp_path):
    with held_lock(two_checkpoints):
        evaluated = pretrain("eval", str(two_checkpoints), "--data", str(data / "training"), "--samples", "20")
        plotted = pretrain("plot", str(two_checkpoints), "--out", str(tmp_path / "png"))
    assert evaluated.returncode == 0 and "mlm_accuracy" in evaluated.stdout, evaluated.stderr
    assert plotted.returncode == 0 and (tmp_path / "png" / "loss.png").is_file(), plotted.stderr


@pytest.mark.slow
def test_only_global_rank_0_takes_the_lock_and_its_refusal_stops_every_rank(data, tmp_path):
    phase_dir = tmp_path / "run" / "phase1"
    launch = [*torchrun(2), "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(tmp_path / "run"),
              *TINY, "--set", "steps=1"]
    with held_lock(phase_dir) as holder:
        started = time.monotonic()
        refused = subprocess.run(launch, env=ENV, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and time.monotonic() - started < 120
    assert refused.stderr.count(f"another pretraining run (pid {holder.pid} on ") == 1  # rank 0's line alone
    assert sorted(p.name for p in phase_dir.iterdir()) == [".lock"]
    done = subprocess.run(launch, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr  # rank 1 never takes the lock rank 0 holds
    assert [row["step"] for row in metrics(phase_dir)] == [1]


@pytest.mark.slow
def test_ranks_started_without_a_launcher_all_exit_when_rank_0_is_refused_the_lock(data, tmp_path):
    phase_dir = tmp_path / "run" / "phase1"
    with held_lock(phase_dir) as holder:
        ranks = start_ranks(2, "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(tmp_path / "run"),
                            *TINY, "--set", "steps=1")
        errors = [rank.communicate(timeout=120)[1] for rank in ranks]  # they waited for rank 0 for 30 min
    assert [rank.returncode for rank in ranks] == [1, 1]
    assert errors[0].endswith(f"error: {phase_dir}: another pretraining run (pid {holder.pid} on "
                              f"{socket.gethostname()}) is using this phase directory; wait for it to finish or use "
                              f"another --out\n"), errors[0]
    assert "error" not in errors[1], errors[1]  # rank 0's line is the run's one line
    assert sorted(p.name for p in phase_dir.iterdir()) == [".lock"]


def test_a_checkpoint_saved_between_the_checks_and_the_lock_is_refused_not_overwritten(data, two_checkpoints,
                                                                                       tmp_path, monkeypatch):
    from pretrain.run.train import train

    config = load_train_config("phase1", overrides=["preset=tiny", "global_batch=8", "micro_batch=4"])
    run = prepare("phase1", data, tmp_path, config)  # a new phase: no checkpoint yet
    shutil.copytree(two_checkpoints, tmp_path / "phase1")  # meanwhile another run saved step 2 and ended
    log = (tmp_path / "phase1" / "train.log").read_bytes()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(DataError, match=rf"^{tmp_path / 'phase1'}: another run saved a checkpoint since this one "
                                        rf"read the directory; re-run the command to go on from it$"):
        train(run)
    assert (tmp_path / "phase1" / "train.log").read_bytes() == log  # nothing written
