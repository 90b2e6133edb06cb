"""Objective mlm: MLM-only training (no NSP head, loss or figures), its export as a BertForMaskedLM that
transformers' AutoModelForMaskedLM and fill-mask take, `pretrain eval` of it, phase 2 keeping it, and next-sentence
prediction refused on data without sentence pairs."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from wiki2bert_core.errors import ConfigError
from wiki2bert_core.files import write_json
from wiki2bert_core.variant_dir import DOC_SENTENCES, PARAMS_FILE, SEGMENT_PAIR, VariantParams, read_params
from wiki2bert_core.wordpiece import SPECIAL_TOKENS
from pretrain.cli import app, main
from pretrain.config import load_train_config, model_config
from pretrain.run.evaluate import EVAL_KEYS, NSP_KEYS
from pretrain.tools.export import fill_mask
from pretrain.model.bert.model import BertForPreTraining
from pretrain.run.prepare import prepare
from pretrain_cli import metrics, pretrain

TINY = ["--preset", "tiny", "--set", "global_batch=8", "--set", "micro_batch=4", "--set", "log_every=1",
        "--set", "loader_workers=0"]
VOCAB_SIZE = 60  # write_vocab_dir's


def eval_figures(*args: str) -> dict[str, float]:
    result = CliRunner().invoke(app, ["eval", *args])
    assert result.exit_code == 0, result.output
    return {key: float(value) for key, value in (line.split() for line in result.stdout.splitlines())}


@pytest.fixture(scope="module")
def variants(tmp_path_factory, run_hdf5_stage, write_corpus, write_vocab) -> dict[str, Path]:
    """The doc-sentences variant (whole sentences of one document, no pairs) and the segment-pair variant of one
    corpus, as the hdf5 stage writes them, test split included."""
    from pipeline.stages.hdf5.stage import Hdf5Config, Variant

    build = tmp_path_factory.mktemp("build")
    (build / "shard").mkdir()
    write_corpus(build / "shard" / "training_0000.txt", 120, seed=1)
    write_corpus(build / "shard" / "test_0000.txt", 40, seed=2)
    write_vocab(build / "vocab.txt")
    out = run_hdf5_stage(build, build / "shard", build / "vocab.txt",
                         Hdf5Config(variants=[Variant(32, 5, DOC_SENTENCES), Variant(32, 5)], dupe_factor=2))
    made = {read_params(d).sequence_kind: d for d in out.iterdir() if d.is_dir()}
    assert made[DOC_SENTENCES].name.endswith("_doc_sentences") and (made[DOC_SENTENCES] / "test").is_dir()
    return made


@pytest.fixture(scope="module")
def data(variants) -> Path:
    return variants[DOC_SENTENCES]


@pytest.fixture(scope="module")
def mlm_run(data, tmp_path_factory) -> Path:
    """A 30-step MLM-only phase 1 with held-out evaluation."""
    out = tmp_path_factory.mktemp("mlm")
    done = pretrain("phase1", "--data", str(data), "--out", str(out), *TINY, "--set", "objective=mlm",
                    "--set", "steps=30", "--set", "eval_every=15", "--set", "eval_samples=30")
    assert done.returncode == 0, done.stderr
    return out / "phase1"


@pytest.mark.slow
def test_a_doc_sentences_variant_of_the_hdf5_stage_is_refused_next_sentence_prediction(data, tmp_path, monkeypatch,
                                                                                        capsys):
    monkeypatch.setattr(sys, "argv", ["pretrain", "phase1", "--data", str(data), "--out", str(tmp_path), *TINY])
    with pytest.raises(SystemExit) as e:
        main()
    assert e.value.code == 2 and "sequence_kind doc-sentences, no sentence pairs" in capsys.readouterr().err


@pytest.mark.slow
def test_an_mlm_only_run_learns_and_reports_no_nsp_figures(mlm_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = metrics(mlm_run)
    train = [row for row in rows if "loss" in row]
    held_out = [row for row in rows if "eval_mlm_accuracy" in row]
    assert len(train) == 30 and [row["step"] for row in held_out] == [15, 30]
    assert not [key for row in rows for key in row if "nsp" in key]
    assert all(row["loss"] == row["mlm_loss"] for row in train)
    first, last = (sum(row["loss"] for row in part) / 5 for part in (train[:5], train[-5:]))
    assert last < first - 0.1, (first, last)
    assert held_out[-1]["eval_mlm_loss"] < held_out[0]["eval_mlm_loss"]
    tb = EventAccumulator(str(mlm_run / "tb"))
    tb.Reload()
    tags = tb.Tags()["scalars"]
    assert "train/mlm_loss" in tags and "eval/mlm_accuracy" in tags and not [t for t in tags if "nsp" in t]
    hparams = json.loads((mlm_run / "hparams.json").read_text())
    assert hparams["config"]["objective"] == "mlm"
    log = (mlm_run / "train.log").read_text()
    assert "step 30: eval_mlm_accuracy" in log and "nsp" not in log


@pytest.mark.slow
def test_the_export_is_a_masked_lm_that_transformers_loads_and_fill_mask_answers(mlm_run, data, tmp_path):
    import transformers

    out = tmp_path / "hf"
    result = CliRunner().invoke(app, ["export", str(mlm_run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForMaskedLM"] and config["vocab_size"] == len(
        (data / "vocab.txt").read_text().splitlines())
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(str(out), output_loading_info=True)
    assert type(model).__name__ == "BertForMaskedLM"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    pipe = transformers.pipeline("fill-mask", model=str(out), tokenizer=str(out), device="cpu")
    answers = pipe("w1 w2 [MASK] w3 .", top_k=3)
    assert len(answers) == 3 and all(0 < a["score"] <= 1 and a["token_str"].strip() for a in answers)
    ours = fill_mask(out, "w1 w2 [MASK] w3 .", top_k=3)
    assert [token for token, _ in ours] == [a["token_str"] for a in answers]
    assert [p for _, p in ours] == pytest.approx([a["score"] for a in answers], rel=1e-5)

    mlm_keys = [key for key in EVAL_KEYS if key not in NSP_KEYS]
    from_checkpoint = eval_figures(str(mlm_run), "--data", str(data), "--samples", "30")
    from_export = eval_figures(str(out), "--data", str(data), "--samples", "30")
    assert list(from_checkpoint) == list(from_export) == mlm_keys
    assert from_export == pytest.approx(from_checkpoint, abs=1e-5)
    last = [row for row in metrics(mlm_run) if "eval_mlm_accuracy" in row][-1]
    assert from_checkpoint == pytest.approx({key: last[key] for key in mlm_keys}, abs=1e-5)


@pytest.mark.slow
def test_a_resumed_mlm_only_run_keeps_its_objective(mlm_run, data):
    settings = ["preset=tiny", "global_batch=8", "micro_batch=4", "steps=30"]
    run = prepare("phase1", data, mlm_run.parent, load_train_config("phase1", overrides=settings))
    assert run.config.objective == "mlm" and run.complete
    with pytest.raises(ConfigError, match="resuming a run started with objective='mlm', now 'mlm\\+nsp'"):
        prepare("phase1", data, mlm_run.parent, load_train_config("phase1", overrides=[*settings, "objective=mlm+nsp"]))


@pytest.mark.slow
def test_phase2_continues_an_mlm_only_model_mlm_only_unless_told(mlm_run, data, variants, tmp_path):
    run = prepare("phase2", data, tmp_path / "out", load_train_config("phase2"), init_dir=mlm_run)
    assert run.config.objective == "mlm"
    run = prepare("phase2", variants[SEGMENT_PAIR], tmp_path / "out",
                  load_train_config("phase2", overrides=["objective=mlm+nsp"]), init_dir=mlm_run)
    assert run.config.objective == "mlm+nsp"
    done = pretrain("phase2", "--data", str(data), "--out", str(tmp_path), "--init", str(mlm_run),
                    "--set", "global_batch=4", "--set", "micro_batch=4", "--set", "steps=1", "--set", "log_every=1",
                    "--set", "loader_workers=0")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "phase2" / "hparams.json").read_text())["config"]["objective"] == "mlm"
    assert "nsp_loss" not in metrics(tmp_path / "phase2")[0]
    assert "initialised fresh" not in (tmp_path / "phase2" / "train.log").read_text()


def test_a_model_without_nsp_head_has_the_parameters_of_a_masked_lm():
    import transformers

    from pretrain.model.hf_config import hf_config

    config = model_config("tiny", VOCAB_SIZE)
    ours = BertForPreTraining(config, nsp_head=False)
    theirs = transformers.BertForMaskedLM(hf_config(config, config.vocab_size, 0, "BertForMaskedLM"))
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    theirs.load_state_dict(ours.state_dict())
    ours.eval()
    theirs.eval()
    input_ids = torch.tensor([[2, 10, 11, 4, 12, 3]])
    with torch.no_grad():
        mlm, nsp = ours.logits(input_ids, torch.zeros_like(input_ids), torch.ones_like(input_ids),
                               torch.tensor([[3]]))
        expected = theirs(input_ids=input_ids).logits[0, 3]
    assert nsp is None
    torch.testing.assert_close(mlm[0, 0], expected, atol=1e-5, rtol=1e-5)
    out = ours(input_ids, torch.zeros_like(input_ids), torch.ones_like(input_ids), torch.tensor([[3]]),
               torch.tensor([[12]]), torch.tensor([1]))
    assert out.loss == out.mlm_loss and out.nsp_loss is None
    assert ours.training_flops(6, 36, 1, 1) < BertForPreTraining(config).training_flops(6, 36, 1, 1)  # no pooler, NSP


def test_next_sentence_prediction_on_a_variant_without_sentence_pairs_is_refused(tmp_path, write_dataset, monkeypatch,
                                                                                 capsys):
    variant = write_dataset(tmp_path, [40, 40], seq_len=32)
    specials = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    params = VariantParams(max_seq_length=32, max_predictions_per_seq=5, masked_lm_prob=0.15, dupe_factor=1,
                           short_seq_prob=0.1, random_seed=1, whole_word_masking=False, lower_case=False,
                           vocab_size=VOCAB_SIZE, special_token_ids=specials, sequence_kind=DOC_SENTENCES)
    write_json(variant / PARAMS_FILE, dataclasses.asdict(params))
    monkeypatch.setattr(sys, "argv", ["pretrain", "phase1", "--data", str(variant), "--out", str(tmp_path / "r"),
                                      *TINY])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert (e.value.code, err) == (2, f"error: {variant / PARAMS_FILE}: sequence_kind doc-sentences, no sentence "
                                      f"pairs for next-sentence prediction (objective mlm+nsp); train it with "
                                      f"--set objective=mlm\n")
    assert not (tmp_path / "r").exists()
    run = prepare("phase1", variant, tmp_path / "r", load_train_config("phase1", overrides=["objective=mlm"]))
    assert run.config.objective == "mlm"
