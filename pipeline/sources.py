"""The sources of a run: the Wikipedia dump and text corpora, what the `--corpus` flag means, which stages have work,
and each source's counts for `pipeline status` and the report.

- `--corpus [NAME=]PATH[:WEIGHT]` (repeatable) adds a corpus: `corpus.sources.NAME.path` = PATH made absolute, and
  `shard.weights.NAME` = WEIGHT when given. NAME defaults to the file's or directory's name without its extensions
  (a glob: its last directory without wildcards); PATH is a file, a directory or a glob. Its other settings are
  `--set corpus.sources.NAME.KEY=VALUE` (e.g. `text_field=content`).
- The Wikipedia dump is read when `download.source` is set (`--dump`), or when there are no corpora (then, as
  before, the newest dump on Wikimedia): with `--corpus` and no `--dump`, download and extract have no work. A run
  without corpora leaves the corpus stage out, so its outputs are those of a Wikipedia-only pipeline.
"""
from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Any

from wiki2bert_core.errors import ConfigError
from pipeline.text_files import WIKIPEDIA_SOURCE as WIKIPEDIA

SOURCE_NAME = re.compile(r"[a-z][a-z0-9_-]*")  # a corpus's name: in records, file names and settings
_WEIGHT = re.compile(r":(\d+(?:\.\d*)?|\.\d+)$")


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


def flag_values(dump: str | None, corpus: list[str] | None) -> dict[str, dict[str, Any]]:
    """The settings --dump and --corpus give a language: download.source from --dump (a local path made absolute:
    the same file whatever directory later commands run in; without --dump the download stage resolves the dump
    from Wikimedia), and those of corpus_flag_values."""
    if dump is not None and "://" not in dump:
        dump = str(Path(dump).resolve())
    return {**({"download": {"source": dump}} if dump else {}), **corpus_flag_values(corpus or [])}


def parse_corpus_flag(flag: str) -> tuple[str, str, float | None]:
    """(name, absolute path or glob, weight or None) of `[NAME=]PATH[:WEIGHT]`."""
    name, sep, rest = flag.partition("=")
    if not sep or not SOURCE_NAME.fullmatch(name):
        name, rest = "", flag
    weight = None
    if match := _WEIGHT.search(rest):
        weight, rest = float(match.group(1)), rest[:match.start()]
    if not rest:
        raise ConfigError(f"--corpus {flag}: no path (--corpus [NAME=]PATH[:WEIGHT])")
    path = str(Path(rest).expanduser().absolute())
    name = name or default_name(path)
    if name == WIKIPEDIA:
        raise ConfigError(f"--corpus {flag}: {WIKIPEDIA!r} is the dump's source name: name the corpus "
                          "(--corpus NAME=PATH)")
    return name, path, weight


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


def check_weights(configs: dict[str, Any]) -> None:
    """ConfigError for a shard weight that names no source of the run."""
    shard = configs.get("shard")
    known = source_names(configs)
    for name in sorted(getattr(shard, "weights", {}) or {}):
        if name not in known:
            raise ConfigError(f"shard.weights.{name}: no such source (this run's sources: {', '.join(known)})")


# --- each source's counts ----------------------------------------------------------------------------------

def source_counts(manifests: dict[str, dict]) -> list[dict[str, Any]]:
    """One row per source from the counts of the finished stages' manifests ({stage: manifest}): documents read
    (extract's articles, the corpus stage's documents), documents with text (sentences), after the filter (the
    documents it wrote: a long one cut into pieces counts once a piece), duplicates (removed by dedup), kept (what
    the shard stage took in) and their tokens, weight, and the training split's tokens and share (None where a
    stage is not done, or made before it counted per source). Empty when no stage recorded per-source counts (a
    work directory made before sources existed)."""
    if not any(_per_source(manifests, stage) for stage in ("corpus", "sentences", "shard")):
        return []
    read: dict[str, int] = {}
    sentences_inputs = (manifests.get("sentences") or {}).get("inputs", {"extract": None})
    if "extract" in manifests and "extract" in sentences_inputs:
        read[WIKIPEDIA] = manifests["extract"]["counts"].get("articles", 0)
    read.update({name: c["documents"] for name, c in _per_source(manifests, "corpus").items()})
    split = {name: c["documents"] for name, c in _per_source(manifests, "sentences").items()}
    filtered = {name: c["documents_written"] for name, c in _per_source(manifests, "filter").items()}
    duplicates = {name: c["removed"] for name, c in _per_source(manifests, "dedup").items()}
    shard = _per_source(manifests, "shard")
    return [{"source": name, "read": read.get(name), "with text": split.get(name), "after filter": filtered.get(name),
             "duplicates": duplicates.get(name),
             "kept": shard.get(name, {}).get("documents"), "kept tokens": shard.get(name, {}).get("tokens"),
             "weight": shard.get(name, {}).get("weight"),
             "training tokens": shard.get(name, {}).get("training_tokens"),
             "training share": shard.get(name, {}).get("training_share")}
            for name in sorted(set(read) | set(split) | set(shard), key=lambda n: (n != WIKIPEDIA, n))]


def source_table(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """source_counts' rows as text: counts with thousands separators, the share in percent, blanks for None."""
    def text(key: str, value) -> str:
        if value is None:
            return ""
        if key == "training share":
            return f"{value:.1%}"
        return f"{value:g}" if key == "weight" else f"{value:,}" if isinstance(value, int) else str(value)

    return [{key: text(key, value) for key, value in row.items()} for row in rows]


def _per_source(manifests: dict[str, dict], stage: str) -> dict[str, dict]:
    return ((manifests.get(stage) or {}).get("counts") or {}).get("sources") or {}


def language_table(shard_manifest: dict | None) -> list[dict[str, str]]:
    """The languages of the mix's shard stage (a run of several languages) as text: documents, tokens (each
    document once), weight, the share aimed at, the training tokens and their share; [] for a one-language run."""
    languages = ((shard_manifest or {}).get("counts") or {}).get("languages") or {}
    return [{"language": lang, "documents": f"{c['documents']:,}", "tokens": f"{c['tokens']:,}",
             "weight": f"{c['weight']:g}", "target share": f"{c['target_share']:.1%}",
             "training tokens": f"{c['training_tokens']:,}", "training share": f"{c['training_share']:.1%}"}
            for lang, c in languages.items()]
