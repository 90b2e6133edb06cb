"""`pretrain tune`: the search over micro-batches, kernels and activation checkpointing (with made-up trials: which
it tries, what it answers, its budget), and end to end on CPU under a memory cap that makes the answer known."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from wiki2bert_core.errors import ConfigError
from pretrain.run import tune
from pretrain.cli import app, main
from pretrain.config import load_train_config
from pretrain.run.tune import Candidate, Trial, estimated_peak, make_setup
from pretrain_cli import ENV

PINNED = ["--set", "attention=mask", "--set", "model.activation_checkpointing=false"]


def setup_of(cap_gib: float | None = 0.2, overrides: list[str] = ()):
    return make_setup("tiny", 128, 0, "fp32", cap_gib, list(overrides), None)


def fake_trials(fits_up_to: dict[tuple[str, bool], int], speed=lambda c: c.micro_batch, seconds: float = 0.0,
                clock: list[float] | None = None):
    """run_trial for tune.tune: a candidate fits up to the micro-batch given for its (kernel, checkpointing); each
    trial takes `seconds` on `clock`."""
    tried = []

    def run(setup, candidate: Candidate, timeout: float) -> Trial:
        tried.append(candidate)
        if clock is not None:
            if seconds > timeout:
                clock[0] += timeout
                return Trial(candidate, "stopped at the budget")
            clock[0] += seconds
        if candidate.micro_batch <= fits_up_to[candidate.attention, candidate.activation_checkpointing]:
            return Trial(candidate, "fits", sequences_per_s=speed(candidate), peak_bytes=candidate.micro_batch)
        return Trial(candidate, "over the memory cap", peak_bytes=candidate.micro_batch)
    return run, tried


def test_the_search_finds_the_largest_micro_batch_that_fits_from_the_estimates_start():
    setup, pinned = setup_of(overrides=PINNED[1::2])
    assert pinned == {"attention": "mask", "model.activation_checkpointing": False}
    start = tune.micro_batches(setup, pinned)[tune.start_index(setup, tune.micro_batches(setup, pinned), False)]
    assert estimated_peak(setup.estimate(Candidate(start, "mask", False))) <= setup.memory_limit
    assert estimated_peak(setup.estimate(Candidate(2 * start, "mask", False))) > setup.memory_limit
    run, tried = fake_trials({("mask", False): 2 * start})  # the estimate is conservative: one more fits
    result = tune.tune(setup, pinned, 100, run)
    # up from the estimate's start while it fits, then one below the smallest that fit, which is slower
    assert [c.micro_batch for c in tried] == [start, 2 * start, 4 * start, start // 2]
    assert result.best.candidate == result.largest.candidate == Candidate(2 * start, "mask", False)
    assert not result.not_tried and not result.budget_spent

    run, tried = fake_trials({("mask", False): start // 4})  # the estimate is too low: down until one fits
    result = tune.tune(setup, pinned, 100, run)
    assert [c.micro_batch for c in tried] == [start, start // 2, start // 4, start // 8]
    assert result.largest.candidate.micro_batch == start // 4


def test_larger_micro_batches_are_tried_while_they_are_faster_and_checkpointing_only_where_memory_ran_out():
    setup, pinned = setup_of(overrides=["attention=mask"])
    start = tune.micro_batches(setup, pinned)[tune.start_index(setup, tune.micro_batches(setup, pinned), False)]
    run, tried = fake_trials({("mask", False): 1024, ("mask", True): 1024},
                             speed=lambda c: min(c.micro_batch, 2 * start))  # no faster above 2 x start
    result = tune.tune(setup, pinned, 100, run)
    assert [c.micro_batch for c in tried] == [start, 2 * start, 4 * start, start // 2]
    assert not any(c.activation_checkpointing for c in tried)
    assert result.best.candidate == Candidate(2 * start, "mask", False)


def test_the_search_starts_at_the_recipes_micro_batch_when_the_estimate_allows_more():
    setup, pinned = setup_of(cap_gib=None)
    sizes = tune.micro_batches(setup, pinned)
    assert sizes[tune.start_index(setup, sizes, False)] == setup.micro_batch == 64


def test_checkpointing_is_tried_only_above_what_fits_without_it_and_the_fastest_is_the_answer():
    setup, pinned = setup_of(overrides=["attention=mask"])
    run, tried = fake_trials({("mask", False): 8, ("mask", True): 32},
                             speed=lambda c: c.micro_batch / (2 if c.activation_checkpointing else 1))
    result = tune.tune(setup, pinned, 100, run)
    with_checkpointing = [c.micro_batch for c in tried if c.activation_checkpointing]
    assert with_checkpointing == [16, 32, 64]
    assert result.largest.candidate == Candidate(32, "mask", True)
    assert result.best.candidate == Candidate(32, "mask", True)  # 16 sequences/s against 8 without

    run, tried = fake_trials({("mask", False): 8, ("mask", True): 32},
                             speed=lambda c: c.micro_batch / (8 if c.activation_checkpointing else 1))
    assert tune.tune(setup, pinned, 100, run).best.candidate == Candidate(8, "mask", False)


def test_the_budget_stops_the_search_with_the_best_so_far_and_names_what_was_not_tried():
    setup, pinned = setup_of(overrides=["attention=mask"])
    clock = [0.0]
    run, tried = fake_trials({("mask", False): 1024, ("mask", True): 4096}, seconds=10, clock=clock)
    result = tune.tune(setup, pinned, 25, run, clock=lambda: clock[0])
    assert clock[0] == 25  # the third trial was stopped when the budget ran out
    assert len(tried) == 3 and result.trials[-1].outcome == "stopped at the budget"
    assert result.budget_spent and result.best is result.trials[1]
    assert result.not_tried == ["attention mask, activation checkpointing off (cut short)",
                                "attention mask, activation checkpointing on"]
    lines = tune.format_answer(result, 25)
    assert lines[0] == ("not tried (budget of 25 s spent): attention mask, activation checkpointing off (cut "
                        "short); attention mask, activation checkpointing on")


def test_the_answer_is_set_lines_that_pretrain_reads():
    setup, pinned = setup_of()
    best = Trial(Candidate(16, "nested", True), "fits", 12.5, 3 << 20, setup.estimate(Candidate(16, "nested", True)))
    lines = tune.format_answer(tune.Result([best], [], False), 60)
    sets = [line.removeprefix("--set ") for line in lines if line.startswith("--set ")]
    config = load_train_config("phase1", overrides=sets)
    assert (config.micro_batch, config.attention, config.model) == (16, "nested", {"activation_checkpointing": True})
    assert any(line.startswith("pretrain estimate of the same setting: ") for line in lines)


@pytest.mark.slow
def test_tune_on_cpu_finds_the_largest_micro_batch_under_a_memory_cap(monkeypatch):
    """The cap lies between the estimates of micro-batches 8 and 16 (their geometric mean); the measured peaks are
    within 15% of the estimates (docs/performance.md, memory estimate), so 8 fits and 16 does not."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    setup, _ = setup_of()
    eight, sixteen = (estimated_peak(setup.estimate(Candidate(m, "mask", False))) for m in (8, 16))
    cap = math.sqrt(eight * sixteen) / tune.GIB
    result = CliRunner().invoke(app, ["tune", "--preset", "tiny", "--zero-stage", "0", "--precision", "fp32",
                                      "--memory-cap", f"{cap:.4f}", "--budget", "600", *PINNED])
    assert result.exit_code == 0, result.output
    rows = {int(line.split()[0]): line.split() for line in result.stdout.splitlines()
            if line.strip()[:1].isdigit()}
    assert rows[8][-1] == "fits" and " ".join(rows[16][6:]) == "over the memory cap", result.stdout
    assert not any(m > 16 for m in rows)
    assert max(m for m, row in rows.items() if row[-1] == "fits") == 8
    assert float(rows[8][5].replace(",", "")) == round(eight / tune.MIB)  # the estimate beside the measurement
    sets = [line.removeprefix("--set ") for line in result.stdout.splitlines() if line.startswith("--set ")]
    assert load_train_config("phase1", overrides=sets).attention == "mask"
    answer = int(sets[0].removeprefix("micro_batch="))
    assert rows[answer][-1] == "fits"
    assert f"fastest that fits: micro_batch {answer}, attention mask, activation checkpointing off" in result.stdout


@pytest.mark.slow
def test_a_trial_running_when_the_budget_ends_is_stopped(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    setup, pinned = setup_of(None, PINNED[1::2])
    started = time.monotonic()
    result = tune.tune(setup, pinned, 2, tune.run_trial)
    assert time.monotonic() - started < 10  # a trial's process alone takes longer to start here
    assert [t.outcome for t in result.trials] == ["stopped at the budget"] and result.budget_spent


def _tune_main(monkeypatch, capsys, outcomes: list[str], *flags: str) -> tuple[int, str]:
    """`pretrain tune --preset tiny --precision fp32 --set attention=mask FLAGS` whose trials end in `outcomes` in
    turn (the last one repeated), each with a peak of 100 MiB + its micro-batch; (exit code, stderr)."""
    def run(setup, candidate: Candidate, timeout: float) -> Trial:
        outcome = outcomes.pop(0) if len(outcomes) > 1 else outcomes[0]
        return Trial(candidate, outcome, peak_bytes=(100 + candidate.micro_batch) * tune.MIB)

    monkeypatch.setattr(tune, "run_trial", run)
    monkeypatch.setattr(sys, "argv", ["pretrain", "tune", "--preset", "tiny", "--precision", "fp32", "--set",
                                      "attention=mask", *flags])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize("outcomes, flags, message", [
    (["over the memory cap", "stopped at the budget"], ["--memory-cap", "0.001"],
     "tune: no setting fits under --memory-cap 0.001 GiB: every trial's peak was above it (the lowest, 101 MiB at "
     "micro_batch 1, attention mask, activation checkpointing off); raise --memory-cap; the budget of 600 s left "
     "untried: attention mask, activation checkpointing on (cut short)"),
    (["out of memory"], [], "tune: no setting fits in the memory of CPU; lower --seq-len or use a higher "
                            "--zero-stage"),
    (["failed: RuntimeError: no kernel image"], [], "tune: every trial failed; the first: RuntimeError: no kernel "
                                                     "image"),
    (["stopped at the budget"], [], "tune: no setting finished within the budget of 600 s; raise --budget"),
])
def test_when_nothing_fits_the_message_names_the_cause(monkeypatch, capsys, outcomes, flags, message):
    """Every trial over --memory-cap was reported as "raise --budget" once the budget had stopped one."""
    code, err = _tune_main(monkeypatch, capsys, outcomes, "--budget", "600", *flags)
    assert (code, err) == (2, f"error: {message}\n")


def test_the_budget_bounds_the_whole_command(monkeypatch, capsys):
    """The budget counted from the first trial, so that loading torch and the setup (12.6 s under load) came on top:
    72.6 s on a budget of 60 s. Here the setup takes 2 s of a budget of 3 s, and trials last until stopped."""
    make_setup_ = tune.make_setup

    def slow_setup(*args):
        time.sleep(2)
        return make_setup_(*args)

    def run_until_stopped(setup, candidate: Candidate, timeout: float) -> Trial:
        time.sleep(timeout)
        return Trial(candidate, "stopped at the budget")

    monkeypatch.setattr(tune, "make_setup", slow_setup)
    monkeypatch.setattr(tune, "run_trial", run_until_stopped)
    monkeypatch.setattr(sys, "argv", ["pretrain", "tune", "--preset", "tiny", "--precision", "fp32", "--budget", "3",
                                      *PINNED])
    started = time.monotonic()
    with pytest.raises(SystemExit):
        main()
    assert time.monotonic() - started < 4.5
    assert "no setting finished within the budget of 3 s" in capsys.readouterr().err


def test_data_that_does_not_exist_is_named_as_such(tmp_path):
    with pytest.raises(ConfigError, match=r"missing: does not exist$"):
        make_setup("tiny", 128, 0, "fp32", None, [], tmp_path / "missing")


def test_a_kernel_that_fails_for_another_reason_than_memory_is_left_at_its_first_trial():
    setup, pinned = setup_of(overrides=["model.activation_checkpointing=false"])
    tried = []

    def run(setup, candidate: Candidate, timeout: float) -> Trial:
        tried.append(candidate)
        if candidate.attention == "nested":
            return Trial(candidate, "failed: RuntimeError: not supported")
        return Trial(candidate, "fits" if candidate.micro_batch <= 8 else "out of memory", candidate.micro_batch, 1)

    result = tune.tune(setup, pinned, 100, run)
    assert [c.attention for c in tried].count("nested") == 1
    assert result.best.candidate == Candidate(8, "mask", False)


@pytest.mark.slow
def test_tune_takes_its_micro_batches_from_data(monkeypatch, tmp_path, write_dataset):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data = write_dataset(tmp_path, [40], seq_len=32)
    result = CliRunner().invoke(app, ["tune", "--preset", "tiny", "--precision", "fp32", "--data", str(data),
                                      "--set", "micro_batch=4", *PINNED])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("tune bert tiny, seq 32, ZeRO 0, fp32") and lines[0].endswith(f"data {data}")
    assert lines[2].split()[:3] == ["4", "mask", "off"] and lines[2].endswith("fits") and len(lines) == 8
    assert lines[-3:] == ["--set micro_batch=4", "--set attention=mask", "--set model.activation_checkpointing=false"]


@pytest.mark.parametrize("returncode, stdout, stderr, outcome, speed", [
    (0, 'deepspeed says hello\n{"outcome": "fits", "peak_bytes": 5, "micro_batch_s": 0.5, "optimizer_step_s": 2.0}\n',
     "", "fits", 8 / (0.5 + 2.0 / (65536 // 8))),  # the optimizer step once every global_batch / micro_batch
    (0, '{"outcome": "out of memory", "peak_bytes": 5}\n', "", "out of memory", None),
    (-9, "", "", "killed", None),  # the kernel's out-of-memory killer
    (1, "", "Traceback ...\nRuntimeError: no kernel image\n", "failed: RuntimeError: no kernel image", None),
])
def test_a_trials_process_is_read_as_its_outcome(monkeypatch, returncode, stdout, stderr, outcome, speed):
    setup, _ = setup_of()
    monkeypatch.setattr(tune, "_run_dying_with_us", lambda args, env, timeout: subprocess.CompletedProcess(
        args, returncode, stdout, stderr))
    trial = tune.run_trial(setup, Candidate(8, "mask", False), 10)
    assert (trial.outcome, trial.sequences_per_s) == (outcome, speed)
    assert trial.failed == outcome.startswith("failed")


def _running(pid: int) -> bool:
    """Whether the process runs: a zombie no one reaps (an orphan, where PID 1 reaps none) does not."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_trial_ends_with_tune_whatever_signal_stops_it(signum):
    """A trial left running would keep its memory (a GPU's) until it ended: it goes within seconds of its
    `pretrain tune`, stopped by SIGTERM (exit 143) or killed by SIGKILL."""
    import psutil

    command = [sys.executable, "-m", "pretrain.cli", "tune", "--preset", "tiny", "--precision", "fp32", "--budget",
               "600", "--set", "micro_batch=64", *PINNED]  # a trial of micro-batch 64 takes a minute here
    tuner = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=ENV)
    trial = None
    try:
        deadline = time.monotonic() + 60
        while trial is None:
            assert tuner.poll() is None and time.monotonic() < deadline, "no trial started"
            trial = next((p.pid for p in psutil.Process(tuner.pid).children()
                          if "pretrain.run.tune" in " ".join(p.cmdline())), None)
            time.sleep(0.05)
        os.kill(tuner.pid, signum)
        returncode = tuner.wait(30)
        deadline = time.monotonic() + 5
        while _running(trial) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(trial), f"the trial is still running after its tune got signal {signum}"
        assert returncode == (143 if signum == signal.SIGTERM else -signal.SIGKILL)
    finally:
        tuner.kill()
        tuner.wait()
        if trial is not None and _running(trial):
            os.kill(trial, signal.SIGKILL)
