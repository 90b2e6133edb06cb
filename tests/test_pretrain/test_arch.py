"""The architecture registry (pretrain/model/arch.py): an architecture registered from here, with no file of the
package changed (BERT's model under another name and model type, two presets of its own, its recipes in a
temporary directory), is a full `arch`: `pretrain config` and `pretrain estimate` take it, its model runs, its
Hugging Face config maps both ways."""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
import torch
import transformers
from typer.testing import CliRunner

from wiki2bert_core.errors import ConfigError
from pretrain.cli import app
from pretrain.config import ModelConfig, load_train_config, model_config
from pretrain.model import arch, bert
from pretrain.model.bert import hf as bert_hf
from pretrain.model.hf_config import hf_config, model_config_of
from pretrain.tools.estimate import activation_bytes, estimate_memory
from pretrain_batches import nvidia_rows

VOCAB = 96
PRESETS = {"pair": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128),
           "quad": dict(num_hidden_layers=4, hidden_size=64, num_attention_heads=4, intermediate_size=256)}


class TwinConfig(transformers.BertConfig):
    model_type = "twin-bert"


def twin_to_hf(config, vocab_size, pad_token_id, architectures, cls_token_id=None, sep_token_id=None):
    return TwinConfig(**bert_hf.config_fields(config, vocab_size, pad_token_id, architectures))


def twin_activations(config, sbh, value_bytes, autocast, attention_ratio):
    return 2 * bert.layer_activation_bytes(config, sbh, value_bytes, autocast, attention_ratio)


@pytest.fixture
def twin(tmp_path, monkeypatch) -> arch.ArchSpec:
    """The arch `twin`, registered for this test only: the registry is swapped for a copy (after the folders' archs
    are in it) for the test's duration."""
    arch.names()
    monkeypatch.setattr(arch, "_registry", dict(arch._registry))
    recipes = tmp_path / "twin"
    recipes.mkdir()
    (recipes / "phase1.yaml").write_text("preset: pair\nobjective: mlm\nmasking: dynamic\nmask_rate: 0.2\n")
    (recipes / "phase2.yaml").write_text("preset: pair\nobjective: mlm\nmasking: dynamic\nmask_rate: 0.25\n"
                                         "micro_batch: 4\n")
    spec = dataclasses.replace(bert.SPEC, name="twin", title="TwinBERT", model_type="twin-bert", presets=PRESETS,
                               phase1_length=64, recipe_dir=recipes, to_hf=twin_to_hf,
                               layer_activation_bytes=twin_activations)
    arch.register(spec)
    return spec


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def settings(*args: str) -> dict:
    """`pretrain config`'s values by key."""
    lines = (re.match(r"^([\w.]+): (.+?)  # ", line) for line in cli("config", *args).splitlines())
    return {m[1]: json.loads(m[2]) for m in lines}


def test_a_registered_arch_is_known_to_the_registry_and_the_settings_and_named_for_an_unknown_one(twin):
    assert arch.names()[-1] == "twin" and arch.spec("twin") is twin and arch.of_model_type("twin-bert") is twin
    assert load_train_config("phase2", overrides=["arch=twin"]).mask_rate == 0.25  # its own recipe
    with pytest.raises(ValueError, match=r"unknown arch 'other' \(known: bert, modernbert, roberta, twin\)"):
        ModelConfig(vocab_size=VOCAB, arch="other")
    for args, error in ((["config", "--set", "arch=other"],
                         "--set arch=other: phase1.arch: 'other' is not one of 'bert', 'modernbert', 'roberta', "
                         "'twin'"),
                        (["estimate", "--arch", "other"],
                         "unknown arch 'other' (known: bert, modernbert, roberta, twin)")):
        result = CliRunner().invoke(app, args)
        assert isinstance(result.exception, ConfigError) and str(result.exception) == error
    with pytest.raises(ValueError, match="already registered"):
        arch.register(dataclasses.replace(twin, name="another"))  # its model type is taken


def test_pretrain_config_takes_a_registered_arch(twin):
    printed = settings("--set", "arch=twin")
    assert (printed["arch"], printed["model.arch"], printed["preset"], printed["mask_rate"]) == ("twin", "twin",
                                                                                                "pair", 0.2)
    assert printed["model.num_hidden_layers"] == 2 and "model.type_vocab_size" in printed
    assert "model.local_attention" not in printed  # ModernBERT's own setting
    assert settings("--set", "arch=twin", "--preset", "quad")["model.num_hidden_layers"] == 4
    assert settings()["arch"] == "bert"
    bad = CliRunner().invoke(app, ["config", "--set", "arch=twin", "--preset", "base"])
    assert isinstance(bad.exception, ConfigError)
    assert str(bad.exception) == "command line: phase1.preset: unknown preset 'base' (known: pair, quad)"


def test_the_memory_estimate_takes_its_recipe_and_activation_formula(twin):
    printed = cli("estimate", "--arch", "twin", "--preset", "quad", "--seq", "100", "--gpus", "1",
                  "--vocab-size", str(VOCAB))
    # seq 100 is beyond its phase 1's 64 tokens: phase 2's recipe gives the micro-batch and the mask rate
    assert printed.startswith("twin preset quad") and f"micro-batch 4 x 100 tokens ({math.ceil(0.25 * 100)} " \
                                                      f"predictions)" in printed
    # bf16 under ZeRO 1 (no autocast), flash (no score matrices): BERT's layer keeps 34 bytes a token and unit
    ours = estimate_memory("quad", VOCAB, 1, 1, 4, 64, arch="twin", max_predictions=10, attention="flash")
    config = model_config("quad", VOCAB, "twin")
    same_as_bert = activation_bytes(dataclasses.replace(config, arch="bert"), 4, 64, 10, "bf16", False, False,
                                    scores=False)
    assert ours["memory"]["activations"] - same_as_bert == config.num_hidden_layers * 34 * (4 * 64 * 64)
    assert ours["parameters"] == arch.pretraining_model(config).num_parameters()


def test_its_model_runs_a_forward_pass_and_its_config_maps_both_ways(twin):
    config = model_config("pair", VOCAB, "twin")
    torch.manual_seed(0)
    model = arch.pretraining_model(config, nsp_head=False)
    output = model(**nvidia_rows([12, 9], 16, 4, VOCAB))
    assert torch.isfinite(output.loss) and output.nsp_loss is None and int(output.mlm_count) > 0
    assert arch.export_class(model) == "BertForMaskedLM"

    hf = hf_config(config, config.vocab_size, 0)
    assert hf.model_type == "twin-bert" and hf.architectures == ["BertForPreTraining"]
    assert model_config_of(hf, Path("config.json")) == config
