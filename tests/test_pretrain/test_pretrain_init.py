"""`--init` from an export or another Hugging Face BERT directory: the weights a phase starts from, the heads it
initialises fresh, the objective it keeps, the vocabulary check, resuming such a run, and the one-line refusals."""
from __future__ import annotations

import json
import sys
import shutil
from pathlib import Path

import pytest
import torch

from pretrain.model import checkpoint_files
from pretrain.cli import main
from pretrain.config import load_train_config, model_config
from pretrain.model.hf_weights import load_matching, module_names
from pretrain.model.model_dir import HuggingFaceDir
from pretrain.model.bert.model import BertForPreTraining
from pretrain.run.prepare import prepare
from pretrain_cli import metrics, pretrain

TINY = ["--preset", "tiny", "--set", "global_batch=8", "--set", "micro_batch=4", "--set", "log_every=1",
        "--set", "loader_workers=0"]
VOCAB_SIZE = 60  # write_vocab_dir's


def exit_code(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["pretrain", *args])
    capsys.readouterr()  # what came before (transformers' progress bars)
    with pytest.raises(SystemExit) as e:
        main()
    return e.value.code, capsys.readouterr().err


def transformers_bert(path: Path, architecture: str, vocab_dir: Path, **config) -> Path:
    """A directory as transformers saves a BERT of the tiny preset's shape (and the data's vocab.txt beside it)."""
    import transformers

    torch.manual_seed(1)
    settings = dict(vocab_size=VOCAB_SIZE, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=512) | config
    getattr(transformers, architecture)(transformers.BertConfig(**settings)).save_pretrained(path)
    shutil.copy(vocab_dir / "vocab.txt", path / "vocab.txt")
    return path


def assert_rows_equal(loaded: dict[str, torch.Tensor], source: dict[str, torch.Tensor]) -> None:
    """Every tensor of `source` is in `loaded`, equal on its rows (the padded vocabulary has more)."""
    for name, value in source.items():
        torch.testing.assert_close(loaded[name][:len(value)], value.float(), atol=1e-6, rtol=0, msg=name)


@pytest.fixture(scope="module")
def data(tmp_path_factory, write_dataset) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"), [40, 40], seq_len=32)


@pytest.fixture(scope="module")
def exported(data, tmp_path_factory) -> Path:
    """The export of a 2-step phase 1."""
    out = tmp_path_factory.mktemp("source")
    done = pretrain("phase1", "--data", str(data), "--out", str(out / "run"), *TINY, "--set", "steps=2")
    assert done.returncode == 0, done.stderr
    done = pretrain("export", str(out / "run" / "phase1"), "--out", str(out / "hf"))
    assert done.returncode == 0, done.stderr
    return out / "hf"


@pytest.mark.slow
def test_phase1_starts_from_an_export_and_such_a_run_resumes_exactly(data, exported, tmp_path, monkeypatch, capsys):
    args = ["phase1", "--data", str(data), "--init", str(exported), *TINY, "--set", "steps=4", "--set", "lr=1e-12"]
    whole = pretrain(*args, "--out", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    phase = tmp_path / "whole" / "phase1"
    hparams = json.loads((phase / "hparams.json").read_text())
    assert hparams["init"] == {"model_dir": str(exported.resolve())}
    assert (hparams["config"]["objective"], hparams["config"]["preset"]) == ("mlm+nsp", "tiny")
    log = (phase / "train.log").read_text()
    assert f"phase1 starts from {exported.resolve()} (Hugging Face)" in log and "initialised fresh" not in log
    trained = checkpoint_files.load_weights(checkpoint_files.latest(phase))
    assert_rows_equal(trained, HuggingFaceDir(exported).weights())  # lr ~0

    parts = tmp_path / "parts" / "phase1"
    assert pretrain(*args, "--out", str(parts.parent), "--set", "steps_this_run=2").returncode == 0
    resumed = pretrain(*args, "--out", str(parts.parent))
    assert resumed.returncode == 0 and "resumed from" in resumed.stderr, resumed.stderr
    assert json.loads((parts / "hparams.json").read_text())["init"] == hparams["init"]
    assert [row["loss"] for row in metrics(parts)] == pytest.approx([row["loss"] for row in metrics(phase)],
                                                                     rel=1e-6)
    other = tmp_path / "whole" / "phase1"
    code, err = exit_code(monkeypatch, capsys, *args, "--out", str(parts.parent), "--init", str(other))
    assert code == 2 and err.count("\n") == 1 and \
        f"--init {other}: {parts} holds a run started from {exported.resolve()}, which this command would resume" \
        in err, err


@pytest.mark.slow
def test_a_transformers_masked_lm_starts_phase1_with_fresh_nsp_head_when_asked_for(data, tmp_path):
    model_dir = transformers_bert(tmp_path / "mlm", "BertForMaskedLM", data)
    done = pretrain("phase1", "--data", str(data), "--init", str(model_dir), "--out", str(tmp_path / "run"), *TINY,
                    "--set", "steps=1", "--set", "lr=1e-12", "--set", "objective=mlm+nsp")
    assert done.returncode == 0, done.stderr
    phase = tmp_path / "run" / "phase1"
    log = (phase / "train.log").read_text()
    assert f"not in {model_dir.resolve()}, initialised fresh: bert.pooler.dense, cls.seq_relationship" in log
    loaded = checkpoint_files.load_weights(checkpoint_files.latest(phase))
    assert_rows_equal(loaded, HuggingFaceDir(model_dir).weights())
    assert "cls.seq_relationship.weight" in loaded and "nsp_loss" in metrics(phase)[0]


@pytest.mark.parametrize("architecture, nsp_head, fresh, unused", [
    ("BertForPreTraining", True, [], []),
    ("BertForMaskedLM", True, ["bert.pooler.dense", "cls.seq_relationship"], []),
    ("BertModel", False, ["cls.predictions", "cls.predictions.transform.LayerNorm", "cls.predictions.transform.dense"],
     ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]),
    ("BertForPreTraining", False, [], ["bert.pooler.dense.bias", "bert.pooler.dense.weight",
                                       "cls.seq_relationship.bias", "cls.seq_relationship.weight"]),
])
def test_heads_the_directory_lacks_keep_their_fresh_weights(tmp_path, write_vocab_dir, architecture, nsp_head, fresh,
                                                            unused):
    model_dir = transformers_bert(tmp_path / "hf", architecture, write_vocab_dir(tmp_path / "vocab"))
    model = BertForPreTraining(model_config("tiny", VOCAB_SIZE), nsp_head=nsp_head)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    state = HuggingFaceDir(model_dir).weights()
    missing, left_out = load_matching(model, state, model_dir)
    assert (module_names(missing), left_out) == (fresh, unused)
    after = model.state_dict()
    assert all(torch.equal(after[name], before[name]) for name in missing)
    assert_rows_equal(after, {name: value for name, value in state.items() if name not in unused})
    # the tied decoder is the word embeddings, padded rows included
    assert torch.equal(after["cls.predictions.decoder.weight"], after["bert.embeddings.word_embeddings.weight"])
    assert torch.equal(after["bert.embeddings.word_embeddings.weight"][VOCAB_SIZE:],
                       before["bert.embeddings.word_embeddings.weight"][VOCAB_SIZE:])


def test_a_bare_bert_model_and_older_names_are_read_under_ours(tmp_path, write_vocab_dir):
    """BertModel's names get the `bert.` prefix; LayerNorm gamma/beta (older checkpoints, pytorch_model.bin) become
    weight/bias."""
    model_dir = transformers_bert(tmp_path / "hf", "BertModel", write_vocab_dir(tmp_path / "vocab"))
    state = HuggingFaceDir(model_dir).weights()
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_bytes((model_dir / "config.json").read_bytes())  # the model type names the encoder
    torch.save({name.removeprefix("bert.").replace("LayerNorm.weight", "LayerNorm.gamma")
                .replace("LayerNorm.bias", "LayerNorm.beta"): value for name, value in state.items()},
               old / "pytorch_model.bin")
    assert all(name.startswith("bert.") for name in state)
    assert HuggingFaceDir(old).weights().keys() == state.keys()


def test_the_objective_of_the_model_continued_is_kept_unless_set(data, tmp_path, write_vocab_dir):
    masked_lm = transformers_bert(tmp_path / "mlm", "BertForMaskedLM", data)
    bare = transformers_bert(tmp_path / "bare", "BertModel", data)
    for init, overrides, objective in ((masked_lm, [], "mlm"), (masked_lm, ["objective=mlm+nsp"], "mlm+nsp"),
                                       (bare, [], "mlm+nsp"), (bare, ["objective=mlm"], "mlm")):
        run = prepare("phase1", data, tmp_path / "out", load_train_config("phase1", overrides=overrides),
                      init_dir=init)
        assert (run.config.objective, run.config.preset, run.model.vocab_size) == (objective, "tiny", 64)
        assert run.init.to_dict() == {"model_dir": str(init.resolve())}
    run = prepare("phase2", data, tmp_path / "out", load_train_config("phase2"), init_dir=masked_lm)
    assert (run.config.objective, run.config.preset, run.init.hugging_face) == ("mlm", "tiny", True)
    wide = transformers_bert(tmp_path / "wide", "BertForMaskedLM", data, hidden_size=96, num_attention_heads=3)
    run = prepare("phase1", data, tmp_path / "out", load_train_config("phase1"), init_dir=wide)
    # no preset has its shape: the configured preset is kept, the model (hparams.json's `model`) is the directory's
    assert (run.model.hidden_size, run.model.num_attention_heads, run.config.preset) == (96, 3, "base")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case, message", [
    ("other vocabulary", "vocab.txt: differs from the vocabulary of the model --init starts from ({init}/vocab.txt: "
                         "line 6: 'w0' against 'w1')"),
    ("no vocab.txt", "{init}: no vocab.txt nor tokenizer.json, so its vocabulary cannot be checked against the "
                     "data's"),
    ("relu", "{init}/config.json: hidden_act 'relu', but this BERT computes only hidden_act 'gelu'"),
    ("no weights", "{init}: no weights (model.safetensors, "),
    ("empty", "{init}: neither a pretraining phase directory (model_config.json) nor a Hugging Face model "
              "directory (config.json)"),
    ("other preset", "--preset mini: phase 1 continues the tiny model of {init}"),
])
def test_init_errors_are_one_line_before_anything_is_written(data, tmp_path, monkeypatch, capsys, case, message):
    init = tmp_path / "init"
    settings = [{"tiny": "mini"}.get(arg, arg) for arg in TINY] if case == "other preset" else TINY
    if case == "empty":
        init.mkdir()
    else:
        transformers_bert(init, "BertForMaskedLM", data, **{"relu": {"hidden_act": "relu"}}.get(case, {}))
    if case == "other vocabulary":
        tokens = (init / "vocab.txt").read_text().splitlines()
        tokens[5], tokens[6] = tokens[6], tokens[5]
        (init / "vocab.txt").write_text("\n".join(tokens) + "\n")
    if case == "no vocab.txt":
        (init / "vocab.txt").unlink()
    if case == "no weights":
        (init / "model.safetensors").unlink()
    code, err = exit_code(monkeypatch, capsys, "phase1", "--data", str(data), "--init", str(init),
                          "--out", str(tmp_path / "r"), *settings)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message.format(init=init.resolve() if case == "other vocabulary" else init) in err, err
    assert not (tmp_path / "r").exists()
