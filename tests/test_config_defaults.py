"""stages.yaml `defaults` and the stage config dataclasses agree, and each parameter is described on its field."""
from __future__ import annotations

import dataclasses

from typer.testing import CliRunner

from wiki2bert_core.config import field_descriptions, read_yaml
from pipeline.cli import app
from pipeline.config import DEFAULT_CONFIG_PATH, load_pipeline_config
from pipeline.stages import stage_by_name


def test_yaml_defaults_are_the_dataclass_defaults():
    defaults = read_yaml(DEFAULT_CONFIG_PATH)["defaults"]
    pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "xx")  # languages.default is empty: the yaml defaults alone
    for name in pcfg.stage_order:
        cls = stage_by_name(name).config_cls
        fields = {f.name for f in dataclasses.fields(cls)}
        assert set(defaults[name]) == fields, name  # every parameter listed, and nothing the stage does not have
        assert pcfg.stage_configs[name] == cls(), name


def test_every_parameter_is_described_on_its_field():
    for name in read_yaml(DEFAULT_CONFIG_PATH)["stages"]:
        missing = [k for k, text in field_descriptions(stage_by_name(name).config_cls).items() if not text]
        assert not missing, f"{name}: no description for {missing}"


def test_config_command_shows_effective_values_and_descriptions():
    result = CliRunner().invoke(app, ["config", "--lang", "hu", "--set", "shard.num_shards=7"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "shard.num_shards: 7  # training shards, balanced by size, whole documents only" in lines
    assert any(line.startswith('extract.redirect_words: ["ÁTIRÁNYÍTÁS", "REDIRECT"]  # localized') for line in lines)
