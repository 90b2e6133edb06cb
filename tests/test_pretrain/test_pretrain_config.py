"""The pretraining settings: the phase recipes hold only what differs from the TrainConfig defaults (phase 1's
recipe), give today's values, and agree with the dataclasses; `pretrain config` prints every setting with its one
description (the comment on its field) and runs without torch."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wiki2bert_core.config import read_yaml
from wiki2bert_core.errors import ConfigError
from pretrain.cli import app
from pretrain.config import PHASES, ModelConfig, TrainConfig, load_train_config, model_config
from pretrain.model.arch import names, spec

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^(?P<key>[\w.]+): (?P<value>.+?)  # (?P<description>.+)$")

# the recipes as they were written out in full (BERT's phase{1,2}.yaml before they held only differences);
# seq_len is left out: the data decides it
PHASE1 = dict(arch="bert", preset="base", model={}, objective=None, global_batch=65536, micro_batch=64, pack_sequences=True, steps=7038,
              steps_this_run=None, lr=6.0e-3, warmup=0.2843, schedule="poly", decay_power=0.5, cooldown=0.0, budget=None, optimizer="lamb", betas=[0.9, 0.999],
              eps=1.0e-6, weight_decay=0.01, grad_clip=1.0, attention="auto", precision="auto", zero_stage=None,
              seed=12345, loader_workers=2, checkpoint_every=200, keep_checkpoints=3, checkpoint_writes="background",
              log_every=10, eval_every=None, eval_samples=10000, eval_data=None, flops_profiler_step=None,
              torch_profiler_steps=[],
              masking="static", mask_rate=0.15, whole_word_masking=False, max_predictions=None,
              language_alpha=None, language_weights={}, mask_replace=0.8, mask_random=0.1, eval_mask_rate=None)
PHASE2 = {**PHASE1, "global_batch": 32768, "micro_batch": 16, "steps": 1563, "lr": 4.0e-3, "warmup": 0.128}


def show(*args: str) -> dict[str, tuple]:
    result = CliRunner().invoke(app, ["config", *args])
    assert result.exit_code == 0, result.output
    lines = [LINE.match(line) for line in result.output.splitlines()]
    assert all(lines), result.output
    return {m["key"]: (json.loads(m["value"]), m["description"]) for m in lines}


def test_each_phase_gives_the_recipe_values():
    for phase, expected in (("phase1", PHASE1), ("phase2", PHASE2)):
        effective = dataclasses.asdict(load_train_config(phase))
        del effective["seq_len"]
        assert effective == expected, phase


def test_recipes_hold_only_what_differs_from_the_defaults():
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    defaults = dataclasses.asdict(TrainConfig())
    for phase, arch in ((phase, arch) for phase in PHASES for arch in names()):
        recipe = spec(arch).recipe(phase)
        for key, value in read_yaml(recipe).items():
            assert key in fields, f"{recipe.name}: {key} is not a TrainConfig field"
            assert value != defaults[key], f"{recipe.name}: {key} repeats the default"
        assert "seq_len" not in read_yaml(recipe)  # the data decides
    assert read_yaml(spec("bert").recipe("phase1")) == {}  # the defaults are phase 1's recipe


def test_config_command_prints_every_setting_with_its_description():
    printed = show()
    model_keys = [f"model.{f.name}" for f in dataclasses.fields(ModelConfig)
                  if f.name != "vocab_size" and f.name not in spec("modernbert").own_settings]
    assert list(printed) == [f.name for f in dataclasses.fields(TrainConfig)] + model_keys
    assert all(description.strip() for _, description in printed.values())
    assert printed["global_batch"][0] == 65536
    assert printed["global_batch"][1].startswith("sequences per optimizer step, all ranks together; or a schedule")
    assert printed["log_every"][1].endswith("[may change on resume]")
    assert not printed["lr"][1].endswith("]")
    assert printed["model.hidden_dropout_prob"][1].endswith("[phase 2 may change]")
    assert printed["model.hidden_size"][0] == 768 and not printed["model.hidden_size"][1].endswith("]")


def test_config_command_applies_phase_preset_file_and_set(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("micro_batch: 8\nmodel: {activation_checkpointing: true}\n")
    printed = show("--phase", "phase2", "--preset", "mini", "--config", str(mine), "--set", "log_every=1",
                   "--set", "model.hidden_dropout_prob=0")
    assert {k: v for k, (v, _) in printed.items() if k in PHASE2 and v != PHASE2[k]} == {
        "preset": "mini", "micro_batch": 8, "log_every": 1,
        "model": {"activation_checkpointing": True, "hidden_dropout_prob": 0.0}}
    assert (printed["model.hidden_size"][0], printed["model.hidden_dropout_prob"][0],
            printed["model.activation_checkpointing"][0]) == (256, 0.0, True)
    phase1 = show()
    assert {k for k in PHASE1 if phase1[k][0] != show("--phase", "phase2")[k][0]} == {
        "global_batch", "micro_batch", "steps", "lr", "warmup"}


def test_config_command_errors_are_one_line():
    result = CliRunner().invoke(app, ["config", "--set", "model.hidden=64"])
    assert result.exit_code != 0 and "--set model.hidden=64: phase1.model.hidden: not a model setting" in \
        str(result.exception)
    result = CliRunner().invoke(app, ["config", "--phase", "phase3"])
    assert "unknown phase 'phase3'" in str(result.exception)


def test_config_command_runs_without_torch():
    code = ("import sys; from typer.testing import CliRunner; from pretrain.cli import app; "
            "r = CliRunner().invoke(app, ['config', '--phase', 'phase2']); assert r.exit_code == 0, r.output; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'deepspeed')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_docs_leave_the_settings_to_pretrain_config():
    """docs/pretrain.md's Settings section points to `pretrain config` instead of repeating the keys in a table."""
    text = (REPO / "docs" / "pretrain.md").read_text(encoding="utf-8")
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    assert "pretrain config" in section
    assert not [line for line in section.splitlines() if line.startswith("|")]


def test_a_resumed_run_may_change_only_the_changeable_settings(tmp_path):
    from pretrain.model.checkpoint_files import Checkpoint
    from pretrain.run.prepare import _check_resumable

    started = load_train_config("phase1", overrides=["preset=tiny"])
    hparams = {"config": json.loads(json.dumps(dataclasses.asdict(started)))}
    resume = Checkpoint(tmp_path, "step00000002", {"step": 2})
    for item in ("log_every=1", "attention=mask", "steps_this_run=1", "eval_data=held_out", "torch_profiler_steps=[3]"):
        _check_resumable(resume, hparams, load_train_config("phase1", overrides=["preset=tiny", item]))
    for item, key in (("lr=1e-3", "lr"), ("seed=1", "seed"), ("model.hidden_dropout_prob=0", "model")):
        with pytest.raises(ConfigError, match=f"resuming a run started with {key}="):
            _check_resumable(resume, hparams, load_train_config("phase1", overrides=["preset=tiny", item]))


def test_phase2_may_change_only_the_training_settings_of_phase1s_model(tmp_path):
    from pretrain.model.checkpoint_files import write_model_config
    from pretrain.model.model_dir import PhaseDir
    from pretrain.run.prepare import _continued_model

    write_model_config(tmp_path, model_config("tiny", 100))
    (tmp_path / "hparams.json").write_text(json.dumps({"config": {"preset": "tiny"}}))
    changed = ["model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0",
               "model.activation_checkpointing=true", "model.initializer_range=0.01"]
    model, config = _continued_model(PhaseDir(tmp_path), load_train_config("phase2", overrides=changed), None)
    assert (model.hidden_dropout_prob, model.activation_checkpointing, model.hidden_size, config.preset) == \
        (0.0, True, 128, "tiny")
    with pytest.raises(ConfigError, match="model.hidden_size: phase 2 cannot change the shape of the model"):
        _continued_model(PhaseDir(tmp_path), load_train_config("phase2", overrides=["model.hidden_size=64"]), None)
