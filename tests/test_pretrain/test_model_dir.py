"""The model directory (pretrain/model/model_dir.py): `pretrain eval`, `--init`, `pretrain finetune` and `pretrain
export` take the same kinds of directory (a phase directory, our export, a BERT saved by transformers, one saved in
shards) and refuse one of neither kind with the same line; weights that do not belong to their config.json, and
models other than BERT-family encoders, are one line from each."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import transformers

from model_dirs import write_hugging_face_dir, write_phase_dir
from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.wordpiece import SPECIAL_TOKENS
from pretrain.cli import main
from pretrain.config import load_train_config, model_config
from pretrain.finetune.run import finetune
from pretrain.model.bert.model import BertForPreTraining
from pretrain.model.hf_config import hf_config
from pretrain.model.hf_weights import load_matching
from pretrain.run.prepare import prepare
from pretrain.tools.export import export_hf

TOKENS = [*SPECIAL_TOKENS, *(f"w{i}" for i in range(60 - len(SPECIAL_TOKENS)))]  # write_vocab_dir's 60 tokens
KINDS = ["phase dir", "our export", "transformers", "sharded"]
ENCODER_WEIGHT = "bert.encoder.layer.1.output.dense.weight"  # a weight every kind holds, compared after loading
TINY = ["--preset", "tiny", "--set", "global_batch=8", "--set", "micro_batch=4", "--set", "loader_workers=0"]


@pytest.fixture(scope="module")
def data(tmp_path_factory, write_dataset) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"), [40, 40], seq_len=32)


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> dict[str, tuple[Path, dict[str, torch.Tensor]]]:
    """Each kind of model directory, of the tiny preset's shape and the data's vocabulary, with the state dict it was
    made from (our names)."""
    root = tmp_path_factory.mktemp("kinds")
    torch.manual_seed(0)
    ours = BertForPreTraining(model_config("tiny", len(TOKENS))).eval()
    phase = write_phase_dir(root / "run" / "phase1", ours, TOKENS)
    masked_lm = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=len(TOKENS), hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512))
    pretraining = transformers.BertForPreTraining(hf_config(model_config("tiny", len(TOKENS)), len(TOKENS), 0))
    return {"phase dir": (phase, ours.state_dict()),
            "our export": (export_hf(phase, root / "export"), ours.state_dict()),
            "transformers": (write_hugging_face_dir(root / "transformers", masked_lm, TOKENS), masked_lm.state_dict()),
            "sharded": (write_hugging_face_dir(root / "sharded", pretraining, TOKENS, max_shard_size="300KB"),
                        pretraining.state_dict())}


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    """A single-sentence task as HuLU writes one: train.json and dev.json."""
    directory = tmp_path_factory.mktemp("task") / "has-w0"
    directory.mkdir()
    for split, count in (("train", 8), ("dev", 4)):
        rows = [{"id": f"{split}{i}", "Sent": "w0 w1 w2" if i % 2 else "w3 w4", "label": str(i % 2)}
                for i in range(count)]
        (directory / f"{split}.json").write_text(json.dumps(rows), encoding="utf-8")
    return directory


def cli(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["pretrain", *map(str, args)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main()
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


def assert_same_encoder(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    torch.testing.assert_close(state[ENCODER_WEIGHT].float(), reference[ENCODER_WEIGHT].float(), rtol=0, atol=0)


def renamed_copy(source: Path, target: Path, rename) -> Path:
    """A copy of a Hugging Face directory (its weights in one model.safetensors) whose tensors `rename` renames."""
    from safetensors.torch import load_file, save_file

    target.mkdir()
    for path in source.iterdir():
        if path.name != "model.safetensors":
            (target / path.name).write_bytes(path.read_bytes())
    save_file({rename(name): value for name, value in load_file(source / "model.safetensors").items()},
              str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


@pytest.mark.parametrize("kind", KINDS)
def test_eval_takes_every_kind(kinds, data, kind, monkeypatch, capsys):
    path, _ = kinds[kind]
    code, out, err = cli(monkeypatch, capsys, "eval", path, "--data", data / "training", "--samples", "8")
    assert code == 0, err
    figures = dict(line.split() for line in out.splitlines())
    assert 0 <= float(figures["eval_mlm_accuracy"]) <= 1
    assert ("eval_nsp_accuracy" in figures) == (kind != "transformers")  # a BertForMaskedLM has no NSP head


@pytest.mark.parametrize("kind", KINDS)
def test_init_takes_every_kind(kinds, data, kind, tmp_path):
    from pretrain.model.arch import spec
    from pretrain.model.model_dir import encoder_weights

    path, reference = kinds[kind]
    run = prepare("phase1", data, tmp_path / "out", load_train_config("phase1"), init_dir=path)
    assert run.init.hugging_face == (kind != "phase dir") and run.model.vocab_size == 64
    model = BertForPreTraining(run.model)  # as the training loop loads --init (train.py _load_init)
    fresh, _ = load_matching(model, run.init.weights(), run.init.path)
    assert encoder_weights(fresh, spec("bert").encoder) == []
    assert_same_encoder(model.state_dict(), reference)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_finetune_takes_every_kind(kinds, task_dir, kind, tmp_path):
    path, _ = kinds[kind]
    out = tmp_path / "ft"
    finetune([path], [task_dir], out, seeds=1, overrides=["epochs=1", "batch=4"])
    name = "run-phase1" if kind == "phase dir" else path.name
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [row["model"] for row in results["results"]] == [name, "majority baseline"]
    assert results["results"][0]["model_path"] == str(path.resolve())
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    fingerprinted = set(settings["models"][name]["files"])
    if kind == "phase dir":  # exported into --out: the same bytes as `pretrain export` of the same checkpoint
        export = out / "models" / name
        assert fingerprinted == {"model_config.json", "meta.json"}
        assert (export / "model.safetensors").read_bytes() == (kinds["our export"][0] / "model.safetensors").read_bytes()
        before = (export / "model.safetensors").stat().st_mtime_ns
        finetune([path], [task_dir], out, seeds=1, overrides=["epochs=1", "batch=4"])  # all done: nothing redone
        assert (export / "model.safetensors").stat().st_mtime_ns == before
    else:  # every file the weights are in, each shard of a sharded model
        assert fingerprinted == {"config.json", *(p.name for p in path.glob("model*.safetensors*"))}
        assert kind != "sharded" or len(fingerprinted) > 3


@pytest.mark.parametrize("kind", KINDS)
def test_export_takes_every_kind(kinds, kind, tmp_path):
    path, reference = kinds[kind]
    out = export_hf(path, tmp_path / "hf")
    architecture = json.loads((out / "config.json").read_text())["architectures"][0]
    assert architecture == ("BertForMaskedLM" if kind == "transformers" else "BertForPreTraining")
    model, loading = getattr(transformers, architecture).from_pretrained(out, output_loading_info=True)
    assert not loading["missing_keys"] and not loading["unexpected_keys"]
    assert_same_encoder(model.state_dict(), reference)
    assert sorted(p.name for p in out.glob("model*")) == ["model.safetensors"]  # one file, also from shards
    if kind == "our export":  # the same model gives the same bytes
        assert (out / "model.safetensors").read_bytes() == (path / "model.safetensors").read_bytes()


def test_a_directory_of_neither_kind_is_the_same_line_from_every_command(data, task_dir, kinds, tmp_path,
                                                                         monkeypatch, capsys):
    neither = tmp_path / "neither"
    neither.mkdir()
    (neither / "notes.txt").write_text("not a model")
    run_dir = kinds["phase dir"][0].parent
    for model, hint in ((neither, ""), (run_dir, "; it is a run directory: name one of its phases (phase1)")):
        line = (f"error: {model}: neither a pretraining phase directory (model_config.json) nor a Hugging Face "
                f"model directory (config.json){hint}\n")
        for args in (["eval", model, "--data", data / "training"],
                     ["phase1", "--data", data, "--init", model, "--out", tmp_path / "run", *TINY],
                     ["export", model, "--out", tmp_path / "hf"]):
            assert cli(monkeypatch, capsys, *args)[::2] == (2, line), args
        with pytest.raises(ConfigError) as refused:
            finetune([model], [task_dir], tmp_path / "ft")
        assert f"error: {refused.value}\n" == line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["neither"]


def test_finetune_refuses_weights_that_do_not_belong_to_their_config(kinds, task_dir, tmp_path):
    """A config.json of model_type roberta over BERT's weights: transformers would initialise every weight of the
    encoder fresh, and the run would report random weights under the model's name."""
    path, _ = kinds["transformers"]
    other = renamed_copy(path, tmp_path / "roberta", lambda name: name)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    with pytest.raises(DataError) as refused:
        finetune([other], [task_dir], tmp_path / "ft", seeds=1)
    message = str(refused.value)
    assert message.startswith(f"{other}: ") and "\n" not in message, message
    assert " of the model's weights are not in its weight files and would start from random values " \
           "(roberta.embeddings.word_embeddings.weight, " in message, message
    assert message.endswith("; the weights do not belong to the model its config.json describes")
    assert not (tmp_path / "ft").exists()


def test_init_refuses_weights_that_do_not_belong_to_their_config(kinds, data, tmp_path):
    """BERT's config.json over weights of other names fills none of our encoder; a head the directory lacks may
    start fresh (the transformers kind is a BertForMaskedLM: no NSP head, accepted above)."""
    path, _ = kinds["transformers"]
    other = renamed_copy(path, tmp_path / "renamed", lambda name: name.replace("bert.", "roberta."))
    with pytest.raises(DataError, match=rf"^{other}: \d+ of the model's weights are not in its weight files and "
                                        rf"would start from random values \(bert\.embeddings\.word_embeddings\.weight, "
                                        rf".*; the weights do not belong to the model its config\.json describes$"):
        prepare("phase1", data, tmp_path / "out", load_train_config("phase1"), init_dir=other)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("model_type", ["electra", "gpt2"])
def test_a_model_type_a_command_cannot_read_is_one_line(kinds, data, task_dir, tmp_path, monkeypatch, capsys,
                                                        model_type):
    """Our models compute BERT, ModernBERT and XLM-R/RoBERTa (eval, --init, export); fine-tuning takes BERT-family
    encoders, not GPT-2."""
    path, _ = kinds["transformers"]
    other = renamed_copy(path, tmp_path / model_type, lambda name: name)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    ours = ("error: {other}/config.json: model_type '{model_type}', but {command} takes only BERT-family encoders "
            "(model_type bert, modernbert, xlm-roberta, roberta)\n")
    for command, args in (("pretrain eval", ["eval", other, "--data", data / "training"]),
                          ("--init", ["phase1", "--data", data, "--init", other, "--out", tmp_path / "run", *TINY]),
                          ("pretrain export", ["export", other, "--out", tmp_path / "hf"])):
        code, _, err = cli(monkeypatch, capsys, *args)
        assert (code, err) == (2, ours.format(other=other, model_type=model_type, command=command)), err
    if model_type == "gpt2":
        with pytest.raises(ConfigError, match=rf"^{other}/config\.json: model_type 'gpt2', but pretrain finetune "
                                              rf"takes only BERT-family encoders \(model_type bert, modernbert, "
                                              rf"xlm-roberta, roberta, camembert, "):
            finetune([other], [task_dir], tmp_path / "ft")
    assert sorted(p.name for p in tmp_path.iterdir()) == [model_type]


FINETUNE_TYPES = ["bert", "roberta", "xlm-roberta", "camembert", "electra", "deberta-v2", "modernbert"]


@pytest.mark.parametrize("model_type", FINETUNE_TYPES)
def test_every_model_type_finetune_takes_runs_each_task_kind(model_type):
    """model_types("finetune") holds only types whose three task classes take the batches encode.py makes (as
    train.py passes them: token type ids only to a model that takes them)."""
    from pretrain.finetune.encode import Encoded, collate
    from pretrain.finetune.train import AUTO_CLASSES, model_inputs
    from pretrain.model.model_dir import model_types

    assert model_type in model_types("finetune")
    sizes = dict(vocab_size=60, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                 num_labels=2)
    if model_type == "modernbert":  # no token types (and its config takes no unknown keys); [PAD] etc. in the vocab
        sizes.update(pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3)
    else:
        sizes.update(embedding_size=32, type_vocab_size=2)
    config = transformers.AutoConfig.for_model(model_type, **sizes)
    pair = Encoded(((2, 7, 3, 8, 3), (2, 9, 3, 8, 3)), ((0, 0, 0, 1, 1),) * 2, 1)
    for kind, auto_class in AUTO_CLASSES.items():
        model = getattr(transformers, auto_class).from_config(config)
        if kind == "tokens":
            batch = collate([Encoded(pair.rows[:1], pair.segments[:1], (-100, 1, -100, 0, -100))], kind, 0)
        else:
            batch = collate([pair if kind == "choice" else Encoded(pair.rows[:1], pair.segments[:1], 1)], kind, 0)
        assert torch.isfinite(model(**model_inputs(model, batch, torch.device("cpu"))).loss), (model_type, kind)
    assert set(model_types("finetune")) == set(FINETUNE_TYPES)
