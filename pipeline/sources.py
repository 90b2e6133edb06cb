"""The sources of a run: the Wikipedia dump and text corpora, what the `--corpus` flag means, which stages have work
(each source's counts through the stages: pipeline/funnel.py).

- `--corpus [NAME=]PATH[:WEIGHT]` (repeatable) adds a corpus: `corpus.sources.NAME.path` = PATH made absolute, and
  `shard.weights.NAME` = WEIGHT when given. NAME defaults to the file's or directory's name without its extensions
  (a glob: its last directory without wildcards); PATH is a file, a directory or a glob. Its other settings are
  `--set corpus.sources.NAME.KEY=VALUE` (e.g. `text_field=content`).
- A corpus its publisher cleaned and deduplicated (`corpus.sources.NAME.publisher`, or told by its first file's
  columns: pipeline/stages/corpus/readers.py) gets the filter's `published` rule set unless `filter.rules` names it
  (`published_rules`): `--corpus fw2=PATH` alone, or `--set filter.rules.NAME=published` for a cleaned corpus of
  no known publisher, `--set filter.rules.NAME=web` to clean a published one again.
- The Wikipedia dump is read when `download.source` is set (`--dump`), or when there are no corpora (then, as
  before, the newest dump on Wikimedia): with `--corpus` and no `--dump`, download and extract have no work. A run
  without corpora leaves the corpus stage out, so its outputs are those of a Wikipedia-only pipeline.
"""
from __future__ import annotations

import glob
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping

from wiki2bert_core.errors import ConfigError
from pipeline.text_files import WIKIPEDIA_SOURCE as WIKIPEDIA

SOURCE_NAME = re.compile(r"[a-z][a-z0-9_-]*")  # a corpus's name: in records, file names and settings
SOURCE_NAME_RULE = (f"a source name is a lowercase letter, then lowercase letters, digits, '_' or '-', and not "
                    f"{WIKIPEDIA!r} (the dump's)")


def corpus_flag_values(flags: list[str]) -> dict[str, dict[str, Any]]:
    """The settings `--corpus` flags give: {"corpus": {"sources": {NAME: {"path": ...}}}, "shard": {"weights": ...}}
    ({} without flags). ConfigError for a flag that names no source or repeats a name."""
    sources: dict[str, dict] = {}
    weights: dict[str, float] = {}
    for flag in flags:
        name, path, weight = parse_corpus_flag(flag)
        if name in sources:
            raise ConfigError(f"--corpus {flag}: a second source named {name!r}: name each one (--corpus NAME=PATH)")
        sources[name] = {"path": path}
        if weight is not None:
            weights[name] = weight
    values: dict[str, dict[str, Any]] = {"corpus": {"sources": sources}} if sources else {}
    if weights:
        values["shard"] = {"weights": weights}
    return values


def flag_values(dump: str | None, corpus: list[str] | None, tokenizer: Path | None = None
                ) -> dict[str, dict[str, Any]]:
    """The settings --dump, --corpus and --tokenizer give a language: download.source from --dump (a local path made
    absolute: the same file whatever directory later commands run in; without --dump the download stage resolves
    the dump from Wikimedia), those of corpus_flag_values, and vocab.tokenizer (tokenizer_flag_values)."""
    if dump is not None and "://" not in dump:
        dump = str(Path(dump).resolve())
    return {**({"download": {"source": dump}} if dump else {}), **corpus_flag_values(corpus or []),
            **tokenizer_flag_values(tokenizer)}


def tokenizer_flag_values(tokenizer: Path | None) -> dict[str, dict[str, Any]]:
    """vocab.tokenizer from --tokenizer, made absolute; ConfigError for a path that does not exist."""
    if tokenizer is None:
        return {}
    if not Path(tokenizer).exists():
        raise ConfigError(f"--tokenizer {tokenizer}: does not exist; give a Hugging Face tokenizer folder, a "
                          "tokenizer.json, a SentencePiece .model or a vocab.txt")
    return {"vocab": {"tokenizer": str(Path(tokenizer).expanduser().resolve())}}


def parse_corpus_flag(flag: str) -> tuple[str, str, float | None]:
    """(name, absolute path or glob, weight or None) of `[NAME=]PATH[:WEIGHT]`. Text before the first `=` is a
    name unless it holds a `/` or the whole flag names an existing path; text after the last `:` is a weight unless
    it holds a `/` or the path with it names an existing one (a file `a:1`). ConfigError for a name that breaks
    SOURCE_NAME_RULE and a weight that is not a finite number of at least 0."""
    name, sep, rest = flag.partition("=")
    if not sep or "/" in name or _names_a_path(flag):
        name, rest = "", flag
    elif not SOURCE_NAME.fullmatch(name):
        raise ConfigError(f"--corpus {flag}: {name!r}: {SOURCE_NAME_RULE}")
    weight = None
    head, colon, tail = rest.rpartition(":")
    if colon and "/" not in tail and not _names_a_path(rest):
        weight, rest = _weight(flag, tail), head
    if not rest:
        raise ConfigError(f"--corpus {flag}: no path (--corpus [NAME=]PATH[:WEIGHT])")
    path = str(Path(rest).expanduser().absolute())
    name = name or default_name(path)
    if name == WIKIPEDIA:
        raise ConfigError(f"--corpus {flag}: {WIKIPEDIA!r} is the dump's source name: name the corpus "
                          "(--corpus NAME=PATH)")
    return name, path, weight


def _names_a_path(text: str) -> bool:
    """Whether `text` is an existing file or directory (a link too), or a glob that matches one."""
    path = os.path.expanduser(text)
    return os.path.lexists(path) or (glob.has_magic(path) and bool(glob.glob(path, recursive=True)))


def _weight(flag: str, text: str) -> float:
    try:
        weight = float(text)
    except ValueError:
        weight = math.nan
    if not (math.isfinite(weight) and weight >= 0):
        raise ConfigError(f"--corpus {flag}: the weight {text!r} must be a number of at least 0 "
                          "(--corpus [NAME=]PATH[:WEIGHT])")
    return weight


def default_name(path: str) -> str:
    """A source name from a corpus path: /data/hplt/hu_1.jsonl.zst -> hu_1, /data/web/ -> web,
    /data/fineweb/*.parquet -> fineweb."""
    parts = Path(path).parts
    if glob.has_magic(path):
        parts = parts[:next(i for i, part in enumerate(parts) if glob.has_magic(part))]
    stem = parts[-1].split(".")[0].lower() if parts else ""
    name = re.sub(r"[^a-z0-9_-]+", "_", stem).strip("_-")
    if not name:
        raise ConfigError(f"--corpus {path}: cannot make a source name of it: name it (--corpus NAME=PATH)")
    return name if name[0].isalpha() else f"c{name}"


# --- which stages have work -------------------------------------------------------------------------------

def corpora(configs: dict[str, Any]) -> list[str]:
    """The names of the corpora the stage configs read, sorted."""
    corpus = configs.get("corpus")
    return sorted(corpus.sources) if corpus is not None else []


def wikipedia_read(configs: dict[str, Any]) -> bool:
    download = configs.get("download")
    return download is not None and (download.source is not None or not corpora(configs))


def download_idle(configs: dict[str, Any]) -> str | None:
    """Why the download stage has no work (None: it has)."""
    return None if wikipedia_read(configs) else "no --dump: the run reads only its corpora"


def corpus_idle(configs: dict[str, Any]) -> str | None:
    return None if corpora(configs) else "no --corpus"


def source_names(configs: dict[str, Any]) -> list[str]:
    """The sources a run reads: wikipedia (when the dump is read), then the corpora by name."""
    return ([WIKIPEDIA] if wikipedia_read(configs) else []) + corpora(configs)


def idle_stages(order: list[str], stages: dict[str, Any], configs: dict[str, Any]) -> dict[str, str]:
    """{stage: why it has no work in this configuration}: those whose `idle` says so, and those all of whose inputs
    are idle or not in the stage list (extract without the dump)."""
    idle: dict[str, str] = {}
    for name in order:
        stage = stages[name]
        if stage.idle is not None and (why := stage.idle(configs)):
            idle[name] = why
        elif stage.inputs and all(up in idle or up not in stages for up in stage.inputs):
            idle[name] = f"no work upstream ({', '.join(stage.inputs)})"
    return idle


def published_rules(configs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{"filter": {"rules": {NAME: "published"}}} for each corpus of a publisher that filter.rules does not name ({}
    when there is none). A source whose files cannot be read has none here: the corpus stage reports them."""
    from pipeline.stages.corpus.readers import find_files
    from pipeline.stages.corpus.stage import source_publisher

    if "filter" not in configs:
        return {}
    published = {}
    for name in corpora(configs):
        source = configs["corpus"].sources[name]
        if name in configs["filter"].rules or source.publisher == "none":
            continue
        try:
            files, _ = find_files(source.path)
        except (ConfigError, OSError):
            continue
        if source_publisher(source, files) is not None:
            published[name] = "published"
    return {"filter": {"rules": published}} if published else {}


def check_source_weights(weights: Mapping[str, float], known: list[str]) -> None:
    """ConfigError for a shard weight that names no source of the run (`known`: its sources, those of every language
    in a run of several)."""
    for name in sorted(weights):
        if name not in known:
            raise ConfigError(f"shard.weights.{name}: no such source (this run's sources: {', '.join(known)})")
