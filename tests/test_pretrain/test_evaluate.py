"""Held-out evaluation: during training (eval_* rows, training unchanged), `pretrain eval` on a phase directory and
on its Hugging Face export (the same figures), and its errors."""
from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from wiki2bert_core.errors import DataError
from wiki2bert_core.variant_dir import held_out_files
from pretrain.cli import app, main
from pretrain.config import load_train_config
from pretrain.run.evaluate import EVAL_KEYS, HeldOut
from pretrain.run.time_plan import EVAL_INSTANCE_COST, EVAL_SHARE, MOST_EVALUATIONS, eval_cadence
from pretrain_cli import metrics, pretrain, run_ranks

TINY = ["--preset", "tiny", "--set", "seq_len=32", "--set", "global_batch=8", "--set", "micro_batch=4",
        "--set", "log_every=1", "--set", "steps=4", "--set", "loader_workers=0"]
VOCAB_SIZE = 60  # write_vocab_dir's, the ids write_hdf5 draws from


def eval_cli(*args: str) -> dict[str, float]:
    result = CliRunner().invoke(app, ["eval", *args])
    assert result.exit_code == 0, result.output
    return {key: float(value) for key, value in (line.split() for line in result.stdout.splitlines())}


@pytest.fixture(scope="module")
def data(tmp_path_factory, write_dataset, write_hdf5) -> Path:
    variant = write_dataset(tmp_path_factory.mktemp("data"), [40, 40], seq_len=32)
    write_hdf5(variant / "test" / "test_0000.hdf5", 30, 32, 5, seed=7)
    write_hdf5(variant / "test" / "test_0001.hdf5", 30, 32, 5, seed=8)
    return variant


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("runs")
    on = pretrain("phase1", "--data", str(data), "--out", str(out / "on"), *TINY, "--set", "eval_every=2",
                  "--set", "eval_samples=50")
    assert on.returncode == 0, on.stderr
    assert "eval_mlm_accuracy" in on.stderr  # in the log too
    off = pretrain("phase1", "--data", str(data), "--out", str(out / "off"), *TINY, "--set", "eval_every=0")
    assert off.returncode == 0, off.stderr
    return out / "on" / "phase1", out / "off" / "phase1"


@pytest.mark.slow
def test_training_evaluates_on_the_test_split_without_changing_the_losses(runs):
    on, off = runs
    evals = [r for r in metrics(on) if "eval_mlm_accuracy" in r]
    assert [r["step"] for r in evals] == [2, 4]
    assert all(set(EVAL_KEYS) <= set(r) and 0 <= r["eval_mlm_accuracy"] <= 1 for r in evals)
    assert evals[0]["eval_mlm_loss"] != evals[1]["eval_mlm_loss"]  # the model changed between them
    train_on = [(r["step"], r["loss"]) for r in metrics(on) if "loss" in r]
    train_off = [(r["step"], r["loss"]) for r in metrics(off)]
    assert train_on == train_off and len(train_on) == 4
    assert not any("eval_mlm_accuracy" in r for r in metrics(off))
    assert any(p.name.startswith("events") for p in (on / "tb").iterdir())


def test_the_default_cadence_keeps_evaluation_to_a_share_of_the_run_and_explicit_ones_are_kept():
    short = load_train_config("phase1", overrides=["steps=40", "global_batch=64"])
    assert short.eval_every is None
    once = eval_cadence(short, 909)  # one evaluation of 909 instances costs more than 5% of 40 x 64 sequences
    assert (once.every, once.share) == (40, pytest.approx(909 * EVAL_INSTANCE_COST / (40 * 64)))
    assert [step for step in range(1, 41) if once.due(step)] == [40]
    assert once.describe().startswith("1 time (at the end), ~")
    some = eval_cadence(short, 50)  # 5% of 2,560 sequences is 128, worth 5 evaluations of 50 at half the cost
    assert [step for step in range(1, 41) if some.due(step)] == [8, 16, 24, 32, 40] and some.share <= EVAL_SHARE
    recipe = load_train_config("phase1")  # 7,038 steps x 65,536 sequences: as many as MOST_EVALUATIONS
    assert -(-recipe.steps // eval_cadence(recipe, 10000).every) == MOST_EVALUATIONS
    explicit = eval_cadence(load_train_config("phase1", overrides=["steps=40", "eval_every=3"]), 909)
    assert [step for step in range(1, 41) if explicit.due(step)] == [*range(3, 40, 3), 40]
    assert explicit.describe().startswith("14 times (every 3 steps and at the end), ~")


@pytest.mark.slow
def test_a_short_run_with_the_default_cadence_evaluates_at_the_end_and_says_the_share(data, tmp_path):
    """A 40-step tiny run evaluated 909 instances 20 times (eval_every steps // 20) and took several times its
    training time; now a run whose evaluation costs more than its share evaluates once, at its end."""
    done = pretrain("phase1", "--data", str(data), "--out", str(tmp_path / "run"), *TINY, "--set", "steps=6")
    assert done.returncode == 0, done.stderr
    assert [r["step"] for r in metrics(tmp_path / "run" / "phase1") if "eval_mlm_accuracy" in r] == [6]
    share = 60 * EVAL_INSTANCE_COST / (6 * 8)  # the 60 test instances against 6 steps of 8 sequences
    assert f"with held-out evaluation 1 time (at the end), ~{share:.0%} of the training time" in done.stderr


@pytest.mark.slow
def test_two_ranks_with_different_numbers_of_batches_evaluate_as_one(data, tmp_path):
    """9 instances in batches of 4: rank 0 holds 4 (one batch), rank 1 holds 5 (two). Both step through two, checking
    for a stop signal together before each, and their sums give the figures of one process."""
    out = tmp_path / "two"
    two = run_ranks(2, "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(out), *TINY,
                    "--set", "eval_every=2", "--set", "eval_samples=9")
    assert two.returncode == 0, two.stderr
    last = [r for r in metrics(out / "phase1") if "eval_mlm_accuracy" in r][-1]
    assert last["step"] == 4
    one = eval_cli(str(out / "phase1"), "--data", str(data), "--samples", "9", "--batch", "4")
    assert one == pytest.approx({key: last[key] for key in EVAL_KEYS}, abs=1e-5)


@pytest.mark.slow
def test_a_two_rank_run_exits_cleanly_with_the_held_out_figures_of_pretrain_eval_on_one_rank(data, tmp_path):
    """The final evaluation of a 2-rank run (the first 50 instances, 25 a rank) against `pretrain eval` of its last
    checkpoint in one process, to 1e-6: `pretrain eval` prints 6 decimals (up to 5e-7 off), the two sum the same
    per-instance figures in another order and batching (float32 logits, float64 sums)."""
    out = tmp_path / "two"
    two = run_ranks(2, "-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(out), *TINY,
                    "--set", "eval_every=4", "--set", "eval_samples=50")
    assert two.returncode == 0 and "terminate called" not in two.stderr, two.stderr[-3000:]
    last = [r for r in metrics(out / "phase1") if "eval_mlm_accuracy" in r][-1]
    assert last["step"] == 4
    one = eval_cli(str(out / "phase1"), "--data", str(data), "--samples", "50")
    assert one == pytest.approx({key: last[key] for key in EVAL_KEYS}, abs=1e-6, rel=0)


@pytest.mark.slow
def test_pretrain_eval_gives_the_same_figures_for_checkpoint_export_and_training(runs, data, tmp_path):
    on, _ = runs
    first = eval_cli(str(on), "--data", str(data), "--samples", "50")
    assert first == eval_cli(str(on), "--data", str(data), "--samples", "50", "--batch", "7")  # same set
    assert set(first) == set(EVAL_KEYS)
    last = [r for r in metrics(on) if "eval_mlm_accuracy" in r][-1]
    assert all(first[k] == pytest.approx(last[k], abs=1e-5) for k in EVAL_KEYS)
    exported = CliRunner().invoke(app, ["export", str(on), "--out", str(tmp_path / "hf")])
    assert exported.exit_code == 0, exported.output
    hf = eval_cli(str(tmp_path / "hf"), "--data", str(data), "--samples", "50")
    assert all(hf[k] == pytest.approx(first[k], abs=1e-5) for k in EVAL_KEYS)
    older = eval_cli(str(on), "--data", str(data), "--samples", "50", "--tag", "step00000004")
    assert older == first
    fewer = eval_cli(str(on), "--data", str(data), "--samples", "10")
    assert fewer != first


@pytest.mark.parametrize("case, message", [
    ("no model", "neither a pretraining phase directory (model_config.json) nor a Hugging Face model directory"),
    ("no test files", "no HDF5 files (*.hdf5) to evaluate on"),
    ("bad tag", "no complete checkpoint of that tag"),
])
def test_eval_errors_are_one_line(case, message, data, tmp_path, monkeypatch, capsys):
    path, data_dir, extra = tmp_path, data, []
    if case == "no test files":
        (tmp_path / "empty").mkdir()
        path, data_dir = tmp_path / "phase1", tmp_path / "empty"
    if case == "bad tag":
        path = tmp_path / "phase1"
        (path / "checkpoints").mkdir(parents=True)
        (path / "model_config.json").write_text("{}")
        extra = ["--tag", "step00000009"]
    monkeypatch.setattr(sys, "argv", ["pretrain", "eval", str(path), "--data", str(data_dir), *extra])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err, err


def test_held_out_instances_are_the_first_ones_read_by_the_training_reader_and_split_over_ranks(data):
    files = held_out_files(data)
    whole = HeldOut.read(files, 50, VOCAB_SIZE, 512)
    assert whole.total == 50
    with h5py.File(files[0], "r") as first, h5py.File(files[1], "r") as second:
        for key, name in (("input_ids", "input_ids"), ("next_sentence_labels", "next_sentence_labels"),
                          ("segment_ids", "token_type_ids")):
            expected = np.concatenate([first[key][:30], second[key][:20]])
            assert whole.columns[name].dtype == torch.int64 and np.array_equal(whole.columns[name].numpy(), expected)
    parts = [HeldOut.read(files, 50, VOCAB_SIZE, 512, rank, 3) for rank in range(3)]
    assert [len(p.columns["input_ids"]) for p in parts] == [16, 17, 17] and all(p.total == 50 for p in parts)
    for name, column in whole.columns.items():
        assert torch.equal(torch.cat([p.columns[name] for p in parts]), column)


@pytest.mark.parametrize("key, value, message", [
    ("masked_lm_positions", 32, "masked_lm_positions holds a position outside the sequence of 32 tokens"),
    ("masked_lm_ids", VOCAB_SIZE, "masked_lm_ids holds a token id outside the vocabulary of 60 tokens"),
    ("next_sentence_labels", 2, "next_sentence_labels holds a value other than 0 or 1"),
])
def test_held_out_values_the_model_cannot_take_are_refused(tmp_path, write_hdf5, key, value, message):
    path = tmp_path / "variant" / "test" / "test_0000.hdf5"
    write_hdf5(path, 300, 32, 5)
    with h5py.File(path, "a") as f:
        f[key][290] = value  # past the rows checked when the files are opened: found by the reader
    with pytest.raises(DataError, match=rf"test_0000\.hdf5: row 290: {message}$"):
        HeldOut.read(held_out_files(tmp_path / "variant"), 300, VOCAB_SIZE, 512)


@pytest.mark.slow
def test_pretrain_eval_refuses_masked_positions_outside_the_sequence(runs, tmp_path, write_hdf5, monkeypatch,
                                                                     capsys):
    on, _ = runs
    path = tmp_path / "bad" / "test_0000.hdf5"  # a flat directory: evaluated as it is
    write_hdf5(path, 10, 32, 5)
    with h5py.File(path, "a") as f:
        f["masked_lm_positions"][3, 0] = 40  # was accepted, and read past the sequence
    monkeypatch.setattr(sys, "argv", ["pretrain", "eval", str(on), "--data", str(path.parent)])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err.count("\n") == 1, err
    assert err == f"error: {path}: row 3: masked_lm_positions holds a position outside the sequence of 32 tokens (40)\n"


def hugging_face_dir(path: Path, **model_settings) -> Path:
    """A Hugging Face BERT directory (as `pretrain export` writes one) of the tiny preset for write_hdf5's ids."""
    import transformers

    from pretrain.config import model_config
    from pretrain.model.hf_config import hf_config

    config = model_config("tiny", VOCAB_SIZE, **model_settings)
    transformers.BertForPreTraining(hf_config(config, VOCAB_SIZE, 0)).save_pretrained(path)
    return path


def eval_exit(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["pretrain", "eval", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


def test_an_export_with_truncated_weights_is_one_line_naming_the_file(data, tmp_path, monkeypatch, capsys):
    model_dir = hugging_face_dir(tmp_path / "hf")
    assert eval_exit(monkeypatch, capsys, str(model_dir), "--data", str(data), "--samples", "8")[0] == 0
    weights = model_dir / "model.safetensors"
    for size in (weights.stat().st_size // 2, 5):  # cut in the tensors, cut in the header
        with open(weights, "r+b") as f:
            f.truncate(size)
        code, err = eval_exit(monkeypatch, capsys, str(model_dir), "--data", str(data))
        last = err.splitlines()[-1]
        assert code == 1 and "Traceback" not in err, err
        assert last.startswith(f"error: {weights}: cannot load the weights ("), err
        assert last.endswith("; the file is damaged or incomplete, export it again"), err


def test_data_longer_than_the_model_takes_is_one_line(data, tmp_path, monkeypatch, capsys):
    model_dir = hugging_face_dir(tmp_path / "hf", max_position_embeddings=16)
    code, err = eval_exit(monkeypatch, capsys, str(model_dir), "--data", str(data))
    assert code == 2 and "Traceback" not in err and err.splitlines()[-1] == (
        f"error: {data}: sequences of length 32, longer than the model's max_position_embeddings 16"), err


def test_a_mask_rate_outside_0_1_or_data_without_its_vocabulary_is_one_line(data, tmp_path, monkeypatch, capsys):
    model_dir = hugging_face_dir(tmp_path / "hf")
    code, err = eval_exit(monkeypatch, capsys, str(model_dir), "--data", str(data), "--mask-rate", "1")
    assert code == 2 and err.splitlines()[-1] == "error: --mask-rate 1.0: must be in (0, 1)", err
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "test_0000.hdf5").symlink_to(data / "test" / "test_0000.hdf5")
    code, err = eval_exit(monkeypatch, capsys, str(model_dir), "--data", str(flat), "--mask-rate", "0.3")
    assert code == 2 and "Traceback" not in err and err.splitlines()[-1] == (
        f"error: {flat}: no vocab.txt in this data directory, so new masks cannot be drawn; name a variant directory "
        f"of the pipeline or leave --mask-rate out (the files' own masks)"), err


@pytest.fixture
def skewed(tmp_path, write_hdf5) -> tuple[Path, dict[str, np.ndarray]]:
    """Two test files whose masked tokens are mostly 9 in the first file: the first 45 of their 60 instances' targets
    (used slots only) and NSP labels, as a hand count sees them."""
    variant = tmp_path / "skewed"
    for index in range(2):
        path = variant / "test" / f"test_000{index}.hdf5"
        write_hdf5(path, 30, 32, 5, seed=20 + index)
        if index == 0:
            with h5py.File(path, "a") as f:
                ids = f["masked_lm_ids"][:]
                ids[:20, :2] = 9  # slots 0 and 1 are used in every row (at least one prediction, 8+ tokens)
                f["masked_lm_ids"][:] = ids
    files = held_out_files(variant)
    with h5py.File(files[0], "r") as first, h5py.File(files[1], "r") as second:
        first45 = {key: np.concatenate([first[key][:30], second[key][:15]])
                   for key in ("masked_lm_ids", "masked_lm_positions", "next_sentence_labels")}
    return variant, first45


def test_the_baselines_are_the_shares_of_the_most_frequent_target_and_label_on_one_rank_or_two(skewed, tmp_path):
    variant, first45 = skewed
    targets = first45["masked_lm_ids"][first45["masked_lm_positions"] != 0]
    hand = np.bincount(targets, minlength=VOCAB_SIZE)
    labels = np.bincount(first45["next_sentence_labels"].ravel(), minlength=2)
    assert hand.argmax() == 9 and hand[9] >= 40
    files = held_out_files(variant)
    one = HeldOut.read(files, 45, VOCAB_SIZE, 512).target_counts(VOCAB_SIZE)
    two = sum(HeldOut.read(files, 45, VOCAB_SIZE, 512, rank, 2).target_counts(VOCAB_SIZE) for rank in range(2))
    assert torch.equal(one, two) and one.tolist() == [[*hand.tolist(), *labels.tolist()]]  # one row: one language

    figures = eval_cli(str(hugging_face_dir(tmp_path / "hf")), "--data", str(variant), "--samples", "45")
    assert list(figures) == list(EVAL_KEYS)  # the baselines after the model's figures
    assert figures["eval_mlm_unigram_baseline"] == pytest.approx(hand[9] / len(targets), abs=1e-6)
    assert figures["eval_mlm_unigram_token"] == 9
    assert figures["eval_nsp_majority_baseline"] == pytest.approx(labels.max() / 45, abs=1e-6)
