"""`--recipe NAME`: the anchors' published settings (pretrain/recipes/<name>/<phase>.yaml) layered over the arch's
recipe and under --config and --set, a size's own values under `presets:`, and a short run of one on CPU."""
from __future__ import annotations

import json

import pytest
import yaml

from wiki2bert_core.errors import ConfigError
from pretrain.config import PHASES, RECIPES_DIR, load_train_config, recipe_names
from pretrain.model.arch import spec
from pretrain_cli import TINY, metrics, pretrain

ANCHORS = ["bert-nvidia", "mmbert", "modernbert", "neobert"]


def test_every_anchor_has_both_phases_and_each_loads_with_its_file_s_values():
    assert recipe_names() == ANCHORS
    for name in ANCHORS:
        for phase in PHASES:
            written = yaml.safe_load((RECIPES_DIR / name / f"{phase}.yaml").read_text())
            by_preset = written.pop("presets", {})
            config = load_train_config(phase, recipe=name)
            for key, value in written.items():
                got = getattr(config, key)
                assert (got == value or {**got, **value} == got) if key == "model" else got == value, (name, key)
            for preset, values in by_preset.items():
                assert preset in spec(config.arch).presets
                sized = load_train_config(phase, recipe=name, values={"preset": preset})
                assert all(getattr(sized, key) == value for key, value in values.items()), (name, preset)


def test_the_anchors_signature_settings():
    mmbert = [load_train_config(phase, recipe="mmbert") for phase in PHASES]
    decay = load_train_config("phase1", RECIPES_DIR / "mmbert" / "decay.yaml", ["arch=modernbert"])
    assert [c.mask_rate for c in (*mmbert, decay)] == [0.3, 0.15, 0.05]
    assert [c.language_alpha for c in (*mmbert, decay)] == [0.7, 0.5, 0.3]
    assert (decay.schedule, decay.warmup, decay.cooldown) == ("wsd", 0.0, 1.0)
    modernbert = load_train_config("phase2", recipe="modernbert")
    assert modernbert.optimizer == "stableadamw" and modernbert.model["global_rope_theta"] == 160000.0
    assert load_train_config("phase1", recipe="modernbert", values={"preset": "large"}).lr == 5e-4
    assert load_train_config("phase1", recipe="modernbert").lr == 8e-4
    neobert = [load_train_config(phase, recipe="neobert") for phase in ("phase1", "phase2")]
    assert [(c.mask_rate, c.mask_replace, c.mask_random) for c in neobert] == [(0.2, 1.0, 0.0)] * 2
    # NVIDIA's recipe is the TrainConfig defaults (the objective written out: null means BERT's mlm+nsp there)
    defaults = load_train_config("phase1", values={"arch": "bert", "objective": "mlm+nsp"})
    assert load_train_config("phase1", recipe="bert-nvidia") == defaults


def test_config_and_set_go_over_the_recipe_and_a_bad_name_is_one_line(tmp_path):
    own = tmp_path / "own.yaml"
    own.write_text("mask_rate: 0.25\nsteps: 100\n")
    config = load_train_config("phase1", own, ["steps=50"], recipe="mmbert")
    assert (config.mask_rate, config.steps, config.language_alpha) == (0.25, 50, 0.7)
    with pytest.raises(ConfigError, match=r"^--recipe roberta: unknown recipe \(known: bert-nvidia, mmbert, "):
        load_train_config("phase1", recipe="roberta")


@pytest.mark.slow
def test_a_recipe_trains_on_cpu_with_its_settings_and_stableadamw(tmp_path, write_dataset):
    data = write_dataset(tmp_path / "work", [40, 40], seq_len=32)
    out = tmp_path / "run"
    done = pretrain("phase1", "--data", str(data), "--out", str(out), "--recipe", "modernbert", *TINY,
                    "--set", "steps=4", "--set", "model.local_attention=16", "--set", "loader_workers=0",
                    "--set", "eval_every=0", "--set", "warmup=0.25")
    assert done.returncode == 0, done.stderr[-3000:]
    hparams = json.loads((out / "phase1" / "hparams.json").read_text())
    settings = hparams.get("config", hparams)
    assert (settings["optimizer"], settings["mask_rate"], settings["grad_clip"]) == ("stableadamw", 0.3, 0.0)
    rows = metrics(out / "phase1")
    assert len(rows) == 4 and rows[-1]["loss"] < rows[0]["loss"] + 1.0
