"""Effective stage configs: dataclass defaults <- stages.yaml `defaults` <- language profile <- --set.

The layers are merged and type-checked against each stage's config dataclass by `wiki2bert_core.config.layered`;
any mistake raises ConfigError with one line that names the file and the key.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wiki2bert_core.config import check_keys, layer_origins, layered, parse_setting, read_yaml, require_mapping
from wiki2bert_core.errors import ConfigError
from pipeline.sources import check_source_weights, idle_stages, published_rules, source_names

if TYPE_CHECKING:
    from pipeline.stages import InputLabel

# the bundled config: in a checkout a symlink to the repository's stages.yaml, in a wheel a copy of it
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent / "stages.yaml"
LANG_CODE = re.compile(r"^[a-z][a-z0-9]{1,11}(-[a-z0-9]{1,11})*$")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    path: Path
    lang: str  # the language; the mix's name in the mix's config of a run of several languages
    stage_order: list[str]
    stage_configs: dict[str, Any]  # stage name -> its config dataclass instance
    # stage name -> why it has no work with these flags (no --corpus; --corpus without --dump: no dump to read)
    idle: dict[str, str] = dataclasses.field(default_factory=dict)
    profile: str = "default"  # the stages.yaml profile it took: the language's, or `default` for one without
    # the mix's config of a run of several languages (pipeline/languages.py): each language's own config
    languages: dict[str, PipelineConfig] = dataclasses.field(default_factory=dict)
    # stage name -> dotted key -> the layer that set it (a key no layer set has the dataclass default)
    origins: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)

    def inputs_of(self, name: str) -> list[InputLabel]:
        """The upstream stages `name` reads in this run: its inputs that are in the stage list and have work; in the
        mix, those of each language's directory (InputLabel(stage, language): <workdir>/<language>/<stage>)."""
        from pipeline.stages import InputLabel, stage_by_name

        stage = stage_by_name(name)
        labels = []
        for up in stage.inputs + (stage.mix_inputs if self.languages else ()):
            if up in self.stage_configs:
                labels += [] if up in self.idle else [InputLabel(up)]
            else:
                labels += [InputLabel(up, lang) for lang, config in self.languages.items()
                           if up in config.stage_configs and up not in config.idle]
        return labels


def default_config_path() -> Path:
    local = Path("stages.yaml")
    return local if local.is_file() else DEFAULT_CONFIG_PATH


def load_pipeline_config(path: Path, lang: str, overrides: list[str] = (),
                         values: dict[str, dict[str, Any]] | None = None) -> PipelineConfig:
    """`overrides` are --set STAGE.KEY=VALUE strings; `values` are {stage: {key: value}} set by other flags."""
    check_language_code(lang, "--lang")
    order, stages, defaults, languages = read_stages_yaml(path)
    profile = lang if lang in languages else "default"
    sections = [(defaults, "defaults"),
                (require_mapping(languages[profile] or {}, path, f"languages.{lang}"), f"languages.{profile}")]
    origins: dict[str, dict[str, str]] = {}
    configs = _stage_configs(path, order, stages, sections, overrides, values, lang=lang, origins=origins)
    if detected := published_rules(configs):
        configs = _stage_configs(path, order, stages, sections, overrides, values, detected=detected, lang=lang,
                                 origins=origins)
    check_source_weights(getattr(configs.get("shard"), "weights", {}), source_names(configs))
    return PipelineConfig(path=path, lang=lang, stage_order=order, stage_configs=configs,
                          idle=idle_stages(order, stages, configs), profile=profile, origins=origins)


def load_mix_config(path: Path, name: str, mix_stages: list[str], languages: dict[str, PipelineConfig],
                    overrides: list[str] = (), values: dict[str, dict[str, Any]] | None = None) -> PipelineConfig:
    """The config of the mix of a run of several languages (pipeline/languages.py): its stages `mix_stages` from
    stages.yaml's `defaults` and `overrides` (no language profile: the mix is of every language), each language's
    own config in `languages`."""
    order, stages, defaults, _ = read_stages_yaml(path)
    configs = _stage_configs(path, order, stages, [(defaults, "defaults")], overrides, values, build=mix_stages)
    return PipelineConfig(path=path, lang=name, stage_order=mix_stages, stage_configs=configs,
                          languages=languages)


def check_language_code(lang: str, flag: str) -> None:
    if not LANG_CODE.match(lang):
        raise ConfigError(f"{flag} {lang!r}: not a Wikipedia language code (e.g. hu, en, zh-min-nan)")


def read_stages_yaml(path: Path) -> tuple[list[str], dict, dict, dict]:
    """(stage order, {name: Stage}, defaults, language profiles) of a stages.yaml, checked."""
    from pipeline.stages import stage_by_name

    raw = read_yaml(path)
    check_keys(raw, {"stages", "defaults", "languages"}, path, "")
    order = raw.get("stages")
    if not isinstance(order, list) or not order or not all(isinstance(s, str) for s in order):
        raise ConfigError(f"{path}: 'stages' must be a non-empty list of stage names")
    stages = {}
    for name in order:
        try:
            stages[name] = stage_by_name(name)
        except KeyError:
            raise ConfigError(f"{path}: stages: unknown stage {name!r}") from None
    defaults = require_mapping(raw.get("defaults", {}), path, "defaults")
    languages = require_mapping(raw.get("languages", {}), path, "languages")
    if "default" not in languages:
        raise ConfigError(f"{path}: languages: a 'default' profile is required")
    for code in languages:
        if code != "default" and not LANG_CODE.match(str(code)):
            raise ConfigError(f"{path}: languages.{code}: not a language code")
    return order, stages, defaults, languages


def _stage_configs(path: Path, order: list[str], stages: dict, sections: list[tuple[dict, str]], overrides,
                   values: dict | None, build: list[str] | None = None, detected: dict | None = None,
                   lang: str | None = None, origins: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """The config of each stage of `build` (default: all of `order`): the dataclass defaults <- each section of
    stages.yaml (a mapping of stage names, and where it is) <- the FineWeb-2 config filter.thresholds_from names
    (of language `lang`) <- --set `overrides` <- flag `values` <- the `detected` values of the corpus files
    (pipeline/sources.py: published_rules, which sets only what no layer set); `origins` gets which layer set each
    key."""
    layers: dict[str, list[tuple[dict, str]]] = {name: [] for name in order}
    for section, where in sections:
        for stage_name, stage_values in section.items():
            if stage_name not in stages:
                raise ConfigError(f"{path}: {where}.{stage_name}: unknown stage (known: {', '.join(order)})")
            layers[stage_name].append((require_mapping(stage_values or {}, path, f"{where}.{stage_name}"),
                                       f"{path}: {where}.{stage_name}"))
    if lang is not None and "filter" in layers:
        thresholds_from = None
        for layer, _ in layers["filter"] + [({key: value}, "") for stage_name, key, value in
                                            (parse_override(item, stages) for item in overrides)
                                            if stage_name == "filter"]:
            thresholds_from = layer.get("thresholds_from", thresholds_from)
        if thresholds_from is not None:
            from pipeline.stages.filter.thresholds import threshold_layer

            layers["filter"].append(threshold_layer(Path(str(thresholds_from)), lang))
    for item in overrides:
        stage_name, key, value = parse_override(item, stages)
        layers[stage_name].append(({key: value}, f"--set {item}: {stage_name}"))
    for stage_name, stage_values in (values or {}).items():
        if stage_name not in stages:
            raise ConfigError(f"{path}: stage {stage_name!r} is not in 'stages'")
        layers[stage_name].append((stage_values, f"command line: {stage_name}"))
    for stage_name, stage_values in (detected or {}).items():
        layers[stage_name].append((stage_values, f"a publisher's corpus (corpus.sources.*.publisher): {stage_name}"))
    if origins is not None:
        origins.update({name: layer_origins(layers[name]) for name in build or order})
    return {name: layered(stages[name].config_cls, layers[name]) for name in build or order}


def origin(origins: dict[str, str], key: str) -> str:
    """Where the value of dotted `key` came from: the layer that set it or the nearest mapping above it."""
    parts = key.split(".")
    return next((origins[k] for k in (".".join(parts[:n]) for n in range(len(parts), 0, -1)) if k in origins),
                "default")


def parse_override(item: str, stages: dict) -> tuple[str, str, Any]:
    name_and_key, value = parse_setting(item, "STAGE.KEY=VALUE")
    stage_name, dot, key = name_and_key.partition(".")
    if not dot or not key:
        raise ConfigError(f"--set {item}: expected STAGE.KEY=VALUE")
    if stage_name not in stages:
        raise ConfigError(f"--set {item}: unknown stage {stage_name!r} (known: {', '.join(stages)})")
    return stage_name, key, value
