"""Settings scheduled over a phase (pretrain/schedules.py): each takes its scheduled value at the right steps, measured
on what the run reads (the mask rate and the [MASK]/random/kept split of real batches, the sequences of each step,
each language's share of a window of steps), metrics.jsonl records each value under the setting's name, the held-out
masks stay at eval_mask_rate, a run killed mid-ramp resumes bit for bit, and bad schedules are one line."""
from __future__ import annotations

import subprocess
from collections import Counter

import h5py
import numpy as np
import pytest

from wiki2bert_core.masking import predictions_needed
from typer.testing import CliRunner

from pretrain.cli import app
from pretrain.config import load_train_config
from pretrain.data.loader import BatchPlan, make_loader, open_data
from pretrain.model import checkpoint_files
from pretrain.run.evaluate import HeldOut
from pretrain.run.prepare import prepare
from pretrain.schedules import PhaseSchedules
from pretrain.tools.data_plan import data_plan, format_plan
from checkpoint_states import assert_same, checkpoint_states
from language_variants import VOCAB_SIZE, write_language_variant
from pretrain_cli import TINY, assert_refused, metrics, pretrain, start_pretrain, wait_for_rows

MASK_ID = 4  # conftest's vocabulary


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, write_vocab_dir, write_hdf5):
    return write_language_variant(tmp_path_factory.mktemp("data") / "fi+hu" / "hdf5" / "seq_len_32",
                                  write_vocab_dir(tmp_path_factory.mktemp("vocab") / "vocab"), write_hdf5)


def test_a_schedule_gives_each_step_its_value():
    config = load_train_config("phase1", overrides=[
        "steps=8", "micro_batch=4", "global_batch=[[0, 4], [0.25, 8], [0.5, 16]]", "masking=dynamic",
        "mask_rate={linear: [[0, 0.3], [1, 0.1]]}"])
    schedules = PhaseSchedules.of(config)
    assert [schedules.global_batch(step) for step in range(1, 9)] == [4, 4, 8, 8, 16, 16, 16, 16]
    assert [schedules.accumulation(step) for step in range(1, 9)] == [1, 1, 2, 2, 4, 4, 4, 4]
    assert schedules.sequences(1, 8) == 88 and schedules.sequences(3, 4) == 16
    assert [schedules.value("mask_rate", step) for step in (1, 5, 8)] == pytest.approx([0.3, 0.2, 0.125])
    assert schedules.scheduled == ["mask_rate", "global_batch"]
    assert schedules.row(3) == {"mask_rate": pytest.approx(0.25), "global_batch": 8}
    assert [schedules.first_step_at(p) for p in (0, 0.25, 0.3, 0.5, 1)] == [1, 3, 4, 5, 9]
    two_ranks = PhaseSchedules.of(load_train_config("phase1", overrides=[
        "steps=4", "micro_batch=4", "global_batch={linear: [[0, 8], [1, 40]]}"]), world_size=2)
    assert [two_ranks.global_batch(step) for step in range(1, 5)] == [8, 16, 24, 32]  # 8, 16, 24, 32 rounded down
    assert PhaseSchedules.of(load_train_config("phase1", overrides=["global_batch=[[0, 64]]"])).scheduled == []


@pytest.mark.parametrize("extra, message", [
    (["--set", "mask_rate=[[0, 0.3], [0.5, 0.15]]"], "mask_rate: applies to masking dynamic only"),
    (["--set", "global_batch=[[0.1, 8]]"], "global_batch: a schedule starts at progress 0, got [0.1, 8] first"),
    (["--set", "global_batch=[[0, 8], [0.5, 6]]"], "global_batch 6 is not a multiple of micro_batch 4 x 1 rank(s)"),
    (["--set", "global_batch=[[0, 8], [0.5]]"], "global_batch[1]: expected a pair [progress, value] of numbers"),
    (["--set", "masking=dynamic", "--set", "mask_rate={steps: [[0, 0.3]]}"], "a schedule mapping has the one key"),
    (["--set", "masking=dynamic", "--set", "mask_rate=[[0, 0.3], [0.5, 0.3], [0.4, 0.1]]"],
     "progress must increase from 0 to at most 1, got 0.4 after 0.5"),
    (["--set", "masking=dynamic", "--set", "mask_replace=[[0, 0.8], [0.5, 0.95]]"],
     "mask_replace: mask_replace 0.95 + mask_random 0.1 > 1 at progress 0.5"),
    (["--set", "language_alpha={linear: [[0, 0.7], [1, 0.3]]}"], "language_alpha: takes a piecewise schedule"),
])
def test_bad_schedules_exit_2_with_one_line(tmp_path, monkeypatch, capsys, write_dataset, extra, message):
    data = write_dataset(tmp_path / "data", [8, 8])
    assert_refused(monkeypatch, capsys, message, tmp_path / "r", "phase1", "--data", str(data), *TINY, *extra)


def test_each_steps_batches_are_masked_at_its_rate_and_split(tmp_path, write_dataset):
    """mmBERT-shaped rate and NeoBERT's all-[MASK] from the middle on, a batch warm-up: every sequence of a step has
    round(rate * length) positions to predict at that step's rate, and the [MASK] / random / kept shares of each half
    are the scheduled ones within 2%."""
    data_dir = write_dataset(tmp_path / "data", [40, 40, 40])
    config = load_train_config("phase1", overrides=[
        "preset=tiny", "steps=40", "micro_batch=16", "global_batch=[[0, 16], [0.25, 32]]", "masking=dynamic",
        "mask_rate=[[0, 0.4], [0.5, 0.2], [0.75, 0.1]]", "mask_replace=[[0, 0.8], [0.5, 1]]",
        "mask_random=[[0, 0.1], [0.5, 0]]"])
    run = prepare("phase1", data_dir, tmp_path / "out", config)
    assert run.masking.max_predictions == 13  # ceil(0.4 * 32): the highest rate's
    plan = BatchPlan(run.data, 16, seed=config.seed, schedules=run.schedules)
    loader = make_loader(run.data, 16, run.vocab_size, seed=config.seed, workers=0, masking=run.masking,
                         schedules=run.schedules)
    steps, split = Counter(), {half: Counter() for half in (0, 1)}
    for (_, _, step), batch in zip(plan, loader):
        if step > 40:
            break
        steps[step] += 1
        lengths = batch["attention_mask"].sum(1).numpy()
        positions = batch["masked_lm_positions"].numpy()
        predicted = (positions != 0).sum(1)
        rate = 0.4 if step <= 20 else 0.2 if step <= 30 else 0.1
        assert np.array_equal(predicted, predictions_needed(rate, lengths)), step
        ids = batch["input_ids"].numpy()[np.nonzero(positions)[0], positions[positions != 0]]
        labels = batch["masked_lm_ids"].numpy()[positions != 0]
        split[step > 20].update(np.where(ids == MASK_ID, "mask", np.where(ids == labels, "kept", "random")))
    assert [steps[step] for step in range(1, 41)] == [1] * 10 + [2] * 30
    first = {k: v / sum(split[0].values()) for k, v in split[0].items()}
    assert sum(split[0].values()) > 3000 and first == pytest.approx({"mask": 0.8, "random": 0.1, "kept": 0.1},
                                                                    abs=0.02), first
    assert set(split[1]) == {"mask"}


def test_a_scheduled_alpha_gives_each_window_of_steps_its_mixture(mixed):
    """alpha 1 (the languages' sizes) then 0 (equal shares) from the middle: each language's share of the masked
    tokens read in each quarter of the steps is that quarter's mixture's within 2%."""
    config = load_train_config("phase1", overrides=["steps=240", "micro_batch=8", "global_batch=8",
                                                    "language_alpha=[[0, 1.0], [0.5, 0.0]]"])
    data = open_data(mixed, 32, VOCAB_SIZE, language_alpha=config.language_alpha)
    (progress, _, later), = data.later_mixtures
    assert progress == 0.5 and data.shares["hu"] > 0.85 and later == pytest.approx({"fi": 0.5, "hu": 0.5})
    masked = []
    for f in data.files:
        with h5py.File(f.path) as h5:
            masked.append(np.count_nonzero(h5["masked_lm_positions"][:], axis=1))
    windows = [Counter() for _ in range(4)]
    for (pieces, _, step), _ in zip(BatchPlan(data, 8, seed=5, schedules=PhaseSchedules.of(config)), range(240)):
        for f, rows, _ in pieces:
            windows[(step - 1) // 60][data.files[f].language] += int(masked[f][rows % data.files[f].samples].sum())
    for window, expected in zip(windows, [data.shares, data.shares, later, later]):
        total = sum(window.values())
        assert {k: v / total for k, v in window.items()} == pytest.approx(expected, abs=0.02), window


def test_held_out_masks_are_at_eval_mask_rate_whatever_the_ranks(mixed):
    """The held-out files hold masks at ~15% (5 positions at most); at eval_mask_rate 0.3 each instance has
    round(0.3 * length) new ones, the same read by one rank or two."""
    config = load_train_config("phase1", overrides=["masking=dynamic", "mask_rate=[[0, 0.5], [0.5, 0.1]]",
                                                    "eval_mask_rate=0.3"])
    run = prepare("phase1", mixed, mixed.parent / "out-eval", config)
    files = sorted((mixed / "test").glob("*.hdf5"))
    whole = HeldOut.read(files, 60, VOCAB_SIZE, 512, masking=run.eval_masking)
    lengths = whole.columns["attention_mask"].sum(1).numpy()
    assert np.array_equal((whole.columns["masked_lm_positions"].numpy() != 0).sum(1), predictions_needed(0.3, lengths))
    halves = [HeldOut.read(files, 60, VOCAB_SIZE, 512, rank, 2, run.eval_masking) for rank in range(2)]
    for key in ("input_ids", "masked_lm_positions", "masked_lm_ids"):
        assert np.array_equal(np.concatenate([h.columns[key].numpy() for h in halves]), whole.columns[key].numpy())
    stored = HeldOut.read(files, 60, VOCAB_SIZE, 512)
    assert (stored.columns["masked_lm_positions"].numpy() != 0).sum(1).max() <= 5


@pytest.mark.slow
def test_a_run_killed_mid_ramp_resumes_bit_for_bit(tmp_path, mixed):
    """Batch warm-up 4 -> 8 -> 12, mask rate 0.4 -> 0.15 (linear), all-[MASK] and alpha 1 -> 0 from the middle,
    held-out figures at 15%: the uninterrupted run reads each step's global batch, switches the mixture at step 5 and
    logs each value; a run SIGKILLed mid-ramp and resumed ends with the uninterrupted run's weights, optimizer,
    schedule, data position and RNG states, bit for bit, and its rows."""
    args = ["phase1", "--data", str(mixed), *TINY, "--set", "steps=8", "--set", "checkpoint_every=1",
            "--set", "keep_checkpoints=10", "--set", "global_batch=[[0, 4], [0.25, 8], [0.5, 12]]",
            "--set", "masking=dynamic", "--set", "mask_rate={linear: [[0, 0.4], [1, 0.15]]}",
            "--set", "mask_replace=[[0, 0.8], [0.5, 1]]", "--set", "mask_random=[[0, 0.1], [0.5, 0]]",
            "--set", "language_alpha=[[0, 1.0], [0.5, 0.0]]", "--set", "eval_samples=40", "--set", "eval_every=4",
            "--set", "eval_mask_rate=0.15"]
    whole = tmp_path / "whole" / "phase1"
    done = pretrain(*args, "--out", str(whole.parent))
    assert done.returncode == 0, done.stderr
    assert "languages from step 5 (language_alpha 0.0" in done.stderr
    rows = [row for row in metrics(whole) if "loss" in row]
    assert [row["global_batch"] for row in rows] == [4, 4, 8, 8, 12, 12, 12, 12]
    assert [row["mask_rate"] for row in rows] == pytest.approx([0.4 - 0.25 * s / 8 for s in range(8)])
    assert [row["mask_replace"] for row in rows] == [0.8] * 4 + [1] * 4
    assert [row["language_alpha"] for row in rows] == [1.0] * 4 + [0.0] * 4
    assert [row["step"] for row in metrics(whole) if "eval_mlm_accuracy" in row] == [4, 8]
    evaluated = CliRunner().invoke(app, ["eval", str(whole), "--data", str(mixed), "--samples", "40",
                                         "--mask-rate", "0.15"])  # afresh, as the run's held-out figures
    assert evaluated.exit_code == 0, evaluated.output
    figures = dict(line.split() for line in evaluated.stdout.splitlines())
    last = [row for row in metrics(whole) if "eval_mlm_accuracy" in row][-1]
    assert {key: float(value) for key, value in figures.items()} == pytest.approx(
        {key: last[key] for key in figures}, abs=1e-6)  # printed to 6 places
    states = [checkpoint_states(checkpoint_files.by_tag(whole, f"step{s:08d}").path)["mp_rank_00_model_states.pt"]
              ["ranks"][0]["data"] for s in range(1, 9)]
    assert [state["epoch"] for state in states] == [0] * 4 + [1] * 4  # the new mixture starts an epoch
    read = [state["row"] for state in states[:4]], [state["row"] for state in states[4:]]  # rows read this epoch
    assert [*np.diff([0, *read[0]]), *np.diff([0, *read[1]])] == [4, 4, 8, 8, 12, 12, 12, 12]

    stopped = tmp_path / "stopped" / "phase1"
    proc = start_pretrain(*args, "--out", str(stopped.parent), stderr=subprocess.DEVNULL)
    try:
        wait_for_rows(stopped, 3, proc)
    finally:
        proc.kill()
        proc.wait()
    assert 1 <= checkpoint_files.latest(stopped).step < 5  # within the ramp, before the mixture changes
    resumed = pretrain(*args, "--out", str(stopped.parent))
    assert resumed.returncode == 0 and f"resumed from {stopped / 'checkpoints'}" in resumed.stderr, resumed.stderr
    assert_same(checkpoint_states(checkpoint_files.latest(stopped).path),
                checkpoint_states(checkpoint_files.latest(whole).path))
    timing = ("samples_per_s", "tokens_per_s", "real_tokens_per_s", "tflops", "data_wait_s", "data_wait_share",
              "max_rss_gb")
    assert [{k: v for k, v in row.items() if k not in timing} for row in metrics(stopped)] == \
        [{k: v for k, v in row.items() if k not in timing} for row in metrics(whole)]


def test_the_data_plan_draws_each_steps_batch_from_each_steps_mixture(mixed):
    config = load_train_config("phase1", overrides=["steps=10", "micro_batch=4", "global_batch=[[0, 4], [0.5, 8]]",
                                                    "language_alpha=[[0, 1.0], [0.5, 0.0]]"])
    plan = data_plan("phase1", mixed, config)
    assert plan.drawn == 5 * 4 + 5 * 8
    assert format_plan(plan)[0].startswith("phase1: 10 steps x global_batch [[0, 4], [0.5, 8]] = 60 sequences")
    data = open_data(mixed, 32, VOCAB_SIZE, language_alpha=config.language_alpha)
    fi = [sum(rows for f, rows in zip(data.files, epoch_rows) if f.language == "fi") / sum(epoch_rows)
          for epoch_rows in (data.epoch_rows, data.later_mixtures[0][1])]
    drawn = {p.language: p.drawn for p in plan.languages}
    assert drawn["fi"] == pytest.approx(20 * fi[0] + 40 * fi[1]) and sum(drawn.values()) == pytest.approx(60)
