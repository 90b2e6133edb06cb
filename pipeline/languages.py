"""A run of several languages for one model: `pipeline run --lang hu,fi,et`.

Layout:
- each language's own stages, those before `vocab` (download, extract, corpus, sentences, filter, dedup), run in
  <workdir>/<lang>/ with the language's profile, as `pipeline run --lang <lang>` runs them: the same configs,
  directories and manifests, so either kind of run reuses the other's finished stages;
- the stages from `vocab` on (vocab, shard, hdf5) run once, for the mix, in <workdir>/<mix>/, where <mix> is the
  language codes sorted and joined by `+` (hu,fi,et -> et+fi+hu: the same languages in any order make the same
  directory and the same bytes). Their configs are stages.yaml's `defaults` and --set, no language's profile. The
  mix's vocab and shard stages read each language's dedup output (ctx.by_language) and mix the languages by
  size^alpha (wiki2bert_core/mixture.py; `vocab.alpha`, `shard.alpha`, `shard.language_weights`).

Flags: `--dump LANG=PATH` and `--corpus LANG=[NAME=]PATH[:WEIGHT]` give one language its dump and corpora (a
language without either reads its newest dump from Wikimedia, as a one-language run does; a corpus's weight is
`shard.weights.NAME`, for that source name in every language); `--set STAGE.KEY=VALUE` sets a language stage's KEY
for every language and a mix stage's for the mix; `--set LANG:STAGE.KEY=VALUE` sets a language stage's for one
language.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

from wiki2bert_core.errors import ConfigError
from pipeline.config import (LANG_CODE, PipelineConfig, check_language_code, load_mix_config, load_pipeline_config,
                             read_stages_yaml)
from pipeline.executors.local import Executor
from pipeline.runner import run_stages
from pipeline.sources import check_source_weights, flag_values, source_names, tokenizer_flag_values

MIX_FROM = "vocab"  # the first stage that runs once for all languages
_LANGUAGE_PREFIX = re.compile(r"([a-z][a-z0-9-]*):(.+)", re.S)  # --set LANG:STAGE.KEY=VALUE


def language_list(flag: str) -> list[str]:
    """The languages --lang names: one code, or several separated by commas. ConfigError for a code that is not
    one, or a language listed twice."""
    codes = [code.strip() for code in flag.split(",")]
    for code in codes:
        check_language_code(code, "--lang")
    twice = next((code for i, code in enumerate(codes) if code in codes[:i]), None)
    if twice:
        raise ConfigError(f"--lang {flag}: {twice} is listed twice")
    return codes


def mix_name(languages: list[str]) -> str:
    """The mix's directory under the work directory: the codes sorted, joined by `+`."""
    return "+".join(sorted(languages))


def mix_stages(order: list[str]) -> list[str]:
    """The stages of `order` that run once for the mix: MIX_FROM and those after it."""
    return order[order.index(MIX_FROM):] if MIX_FROM in order else []


def load_languages_config(path: Path, languages: list[str], overrides: list[str], dumps: list[str],
                          corpora: list[str], tokenizer: Path | None = None) -> PipelineConfig:
    """The mix's config, with each language's own (`languages`, in code order). ConfigError for a flag that names
    no language of the run, a second --dump for one, a source weight given two values, or a language weight for a
    language not in the run."""
    languages = sorted(languages)
    dump_of = _by_language("--dump", dumps, languages)
    corpora_of = _by_language("--corpus", corpora, languages)
    for lang, given in dump_of.items():
        if len(given) > 1:
            raise ConfigError(f"--dump {lang}={given[1]}: a second dump for {lang} (--dump {lang}={given[0]})")
    overrides_of, mix_overrides = _split_overrides(path, overrides, languages)
    configs, source_weights = {}, {}
    for lang in languages:
        values = flag_values(dump_of.get(lang, [None])[0], corpora_of.get(lang))
        for name, weight in values.pop("shard", {}).get("weights", {}).items():
            if source_weights.setdefault(name, weight) != weight:
                raise ConfigError(f"--corpus {lang}={name}=...:{weight:g}: source {name} has weight "
                                  f"{source_weights[name]:g} in another language; a source weight holds in every "
                                  "language (give the corpora different names)")
        configs[lang] = load_pipeline_config(path, lang, overrides_of[lang], values)
    order = configs[languages[0]].stage_order
    mix_values = {**({"shard": {"weights": source_weights}} if source_weights else {}),
                  **tokenizer_flag_values(tokenizer)}
    mix = load_mix_config(path, mix_name(languages), mix_stages(order), configs, mix_overrides, mix_values or None)
    _check_mix_weights(mix)
    return mix


def _by_language(flag: str, items: list[str], languages: list[str]) -> dict[str, list[str]]:
    """{language: the values of its `flag LANG=VALUE` items}."""
    by_language: dict[str, list[str]] = {}
    for item in items:
        lang, sep, value = item.partition("=")
        if not sep or lang not in languages:
            what = f"{lang} is not a language of this run" if sep and LANG_CODE.match(lang) else "no language"
            raise ConfigError(f"{flag} {item}: {what}; in a run of several languages ({', '.join(languages)}) "
                              f"each {flag} names its language: {flag} LANG={'PATH' if flag == '--dump' else '[NAME=]PATH[:WEIGHT]'}")
        by_language.setdefault(lang, []).append(value)
    return by_language


def _split_overrides(path: Path, overrides: list[str], languages: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """({language: its --set items}, the mix's --set items): LANG:STAGE.KEY=VALUE is that language's, a mix stage's
    setting the mix's, any other every language's."""
    mix = set(mix_stages(read_stages_yaml(path)[0]))
    per_language: dict[str, list[str]] = {lang: [] for lang in languages}
    mix_overrides: list[str] = []
    for item in overrides:
        stage = item.partition("=")[0].partition(".")[0].strip()
        if match := _LANGUAGE_PREFIX.fullmatch(item):
            lang, setting = match.groups()
            if lang not in languages:
                raise ConfigError(f"--set {item}: {lang} is not a language of this run ({', '.join(languages)})")
            if setting.partition(".")[0].strip() in mix:
                raise ConfigError(f"--set {item}: {setting.partition('.')[0]} runs once for all languages; set it "
                                  "without a language")
            per_language[lang].append(setting)
        elif stage in mix:
            mix_overrides.append(item)
        else:
            for lang in languages:
                per_language[lang].append(item)
    return per_language, mix_overrides


def _check_mix_weights(mix: PipelineConfig) -> None:
    """ConfigError for a language weight of a language not in the run, or a source weight of no language's source."""
    shard = mix.stage_configs.get("shard")
    if shard is None:
        return
    for lang in sorted(shard.language_weights):
        if lang not in mix.languages:
            raise ConfigError(f"shard.language_weights.{lang}: {lang} is not a language of this run "
                              f"({', '.join(mix.languages)})")
    check_source_weights(shard.weights, sorted({name for config in mix.languages.values()
                                                for name in source_names(config.stage_configs)}))


def check_local_dumps(pcfg: PipelineConfig) -> None:
    """Before anything runs: ConfigError for a local dump whose siteinfo is of another language than the one it is
    given for, in a one-language run or any language's of several (the extract stage checks every dump, also
    downloaded ones, as it reads it)."""
    from pipeline.stages.extract.dump import DumpFile, check_dump_language

    for lang, config in (pcfg.languages or {pcfg.lang: pcfg}).items():
        source = getattr(config.stage_configs.get("download"), "source", None)
        if source and "://" not in source and Path(source).is_file():
            check_dump_language(DumpFile(Path(source), None).site, lang, Path(source))


def run_languages(mix: PipelineConfig, workdir: Path, names: list[str], workers: int = 1, force: bool = False,
                  quiet: bool = False, log: logging.Logger | None = None, verify: bool = False,
                  executor: Executor | None = None, keep: str = "all") -> None:
    """Run the stages `names` (in stages.yaml's order) of a run of several languages: each language's own in its
    directory, one language after another, then the mix's. keep "final" drops, in each directory, the stages read
    by stages of the same directory only (a language's dedup, read by the mix, is kept)."""
    log = log or logging.getLogger("wiki2bert")
    for lang, config in mix.languages.items():
        own = [name for name in names if name not in mix.stage_order]
        if own:
            log.info("%s: %s in %s", lang, ", ".join(own), workdir / lang)
            run_stages(config, workdir / lang, own, workers, force, quiet, log, verify, executor, keep)
    shared = [name for name in names if name in mix.stage_order]
    if shared:
        log.info("%s: %s in %s", mix.lang, ", ".join(shared), workdir / mix.lang)
        run_stages(mix, workdir / mix.lang, shared, workers, force, quiet, log, verify, executor, keep)
