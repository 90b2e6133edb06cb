"""stages.yaml `defaults` and the stage config dataclasses agree, and each parameter is described on its field."""
from __future__ import annotations

import dataclasses
import typing

from typer.testing import CliRunner

from wiki2bert_core.config import field_descriptions, nested_dataclass, read_yaml
from wiki2bert_core.errors import ConfigError
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
    classes = [stage_by_name(name).config_cls for name in read_yaml(DEFAULT_CONFIG_PATH)["stages"]]
    classes += [nested for cls in classes for hint in typing.get_type_hints(cls).values()
                if (nested := nested_dataclass(hint)) is not None]  # the filter's rule sets
    for cls in classes:
        missing = [k for k, text in field_descriptions(cls).items() if not text]
        assert not missing, f"{cls.__name__}: no description for {missing}"


def test_config_command_shows_effective_values_and_descriptions():
    result = CliRunner().invoke(app, ["config", "--lang", "hu", "--set", "shard.num_shards=7"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "shard.num_shards: 7  # training shards, balanced by size, whole documents only" in lines
    assert any(line.startswith('extract.redirect_words: ["ÁTIRÁNYÍTÁS", "REDIRECT"]  # localized') for line in lines)
    assert any(line.startswith("filter.rule_sets.web.max_duplicate_line_share: 0.322  # Gopher: lines equal to an "
                               "earlier one / lines  [from ") and line.endswith("stages.yaml: languages.hu.filter]")
               for line in lines)  # where each filter value came from
    assert any(line.startswith("filter.rule_sets.web.min_language_score: 0.9  # ")
               and line.endswith("stages.yaml: defaults.filter]") for line in lines)


NEGATIVE_OR_OUT_OF_RANGE = [
    "download.retries=-1", "download.backoff_s=-1", "download.timeout_s=-1", "download.timeout_s=0",
    "download.chunk_bytes=0",
    "extract.articles_per_part=0",
    "filter.rule_sets.wikipedia.min_avg_words=-1", "filter.rule_sets.wikipedia.min_sentences=-1",
    "filter.rule_sets.wikipedia.max_sentences=-1", "filter.rule_sets.wikipedia.min_tokens=-1",
    "filter.rule_sets.wikipedia.max_tokens=-1", "filter.rule_sets.wikipedia.max_no_word_ratio=-0.1",
    "filter.rule_sets.wikipedia.max_punct_ratio=-0.1", "filter.rule_sets.wikipedia.max_upper_ratio=1.5",
    "filter.rule_sets.wikipedia.max_digit_ratio=-0.1", "filter.rule_sets.wikipedia.max_foreign_ratio=-0.1",
    "filter.rule_sets.wikipedia.min_words=-1", "filter.langid_chars=0", "filter.examples=-1",
    "filter.rule_sets.web.max_duplicate_paragraph_share=1.5", "filter.rule_sets.web.max_duplicate_line_share=-0.1",
    "filter.rule_sets.web.max_duplicate_paragraph_char_share=2", "filter.rule_sets.web.max_duplicate_line_char_share=2",
    "filter.rule_sets.web.max_top_ngram_share.2=1.5", "filter.rule_sets.web.max_duplicate_ngram_share.5=-1",
    "filter.rule_sets.web.min_mean_word_length=-1", "filter.rule_sets.web.max_mean_word_length=-1",
    "filter.rule_sets.web.min_stop_words=-1", "filter.rule_sets.web.min_language_score=1.5",
    "dedup.ngram=0", "dedup.bands=0", "dedup.rows=0", "dedup.min_jaccard=1.5", "dedup.min_jaccard=-0.1",
    "dedup.seed=-1", "dedup.partition_mib=0", "dedup.examples=-1",
    "vocab.vocab_size=0", "vocab.unused_tokens=-1", "vocab.character_coverage=-0.5", "vocab.input_sentence_size=-1",
    "vocab.seed=-1", "vocab.min_frequency=-1", "vocab.limit_alphabet=0",
    "shard.num_shards=0", "shard.test_fraction=-0.1", "shard.num_test_shards=-1", "shard.seed=-1",
    "shard.min_documents_per_shard=0",
    "hdf5.masked_lm_prob=-0.1", "hdf5.dupe_factor=0", "hdf5.short_seq_prob=-0.1", "hdf5.random_seed=-1",
    "hdf5.gzip_level=-1", "hdf5.window_tokens=0",
]


def test_negative_counts_sizes_timeouts_and_probabilities_are_refused():
    accepted, unnamed = [], []
    for setting in NEGATIVE_OR_OUT_OF_RANGE:
        key = setting.partition("=")[0]
        try:
            load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", [setting])
        except ConfigError as e:
            if not str(e).startswith(f"--set {setting}: {key}: ") or "\n" in str(e):  # the layer, then the key
                unnamed.append(str(e))
        else:
            accepted.append(setting)
    assert accepted == [] and unnamed == []
