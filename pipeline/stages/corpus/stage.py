"""Stage `corpus`: text corpora beside (or instead of) the Wikipedia dump -> JSONL parts as extract writes them.

Each source of `sources` (the CLI's `--corpus [NAME=]PATH[:WEIGHT]`) is a file, a directory or a glob of JSON
Lines, Parquet or plain text files (`readers.py`). Its documents become `part-<source>-<task>-00000.jsonl`, ... of
`documents_per_part` lines {"id", "title", "text", "source"}, the extract stage's format with the source's name, which
the `sentences` stage reads beside extract's parts; documents whose text is only whitespace are counted, not written.
Sources are read in name order, each file (or Parquet row group) a task of `ctx.executor.map`, so the bytes do not
depend on the number of workers, the executor or the order of the flags. A run without corpora has no work here:
the runner leaves the stage out (pipeline/sources.py). The files read are fingerprinted (`sources`: size, mtime and
the first and last MiB), so a corpus file replaced at the same path makes the stage stale.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Literal

from wiki2bert_core.config import SettingError, check_minimum
from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import file_fingerprint
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext
from pipeline.stages.corpus.readers import Fields, ReadTask, find_files, read_documents, read_tasks
from pipeline.text_files import WIKIPEDIA_SOURCE, PartWriter
from pipeline.sources import SOURCE_NAME, corpus_idle


@dataclasses.dataclass(frozen=True)
class CorpusSource:
    # a file, a directory (every file under it) or a glob of corpus files (--corpus makes it absolute)
    path: str = ""
    # jsonl, parquet or text (a blank line between documents); auto: by each file's name (.jsonl, .json, .ndjson,
    # .parquet, .txt, .text; plain or .gz, .zst, .bz2, .xz)
    format: Literal["auto", "jsonl", "parquet", "text"] = "auto"
    text_field: str = "text"  # the JSON key or Parquet column of a document's text
    id_field: str = "id"  # the key or column of its id; missing or null: <file>:<line> (<file>:<row> in Parquet)
    title_field: str = "title"  # the key or column of its title (for examples in reports); missing: none (e.g. url)

    def __post_init__(self):
        if not self.path:
            raise SettingError("path", "required: the corpus's file, directory or glob (--corpus NAME=PATH)")


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    # the corpora, by source name: {NAME: {path: ..., format: ..., text_field: ...}}; --corpus NAME=PATH adds one,
    # --set corpus.sources.NAME.KEY=VALUE sets one of its keys; a source's weight is shard.weights.NAME
    sources: dict[str, CorpusSource] = dataclasses.field(default_factory=dict)
    documents_per_part: int = 2000  # documents per part-<source>-*.jsonl (the parts later stages parallelize over)

    def __post_init__(self):
        for name in self.sources:
            if not SOURCE_NAME.fullmatch(name) or name == WIKIPEDIA_SOURCE:
                raise SettingError(f"sources.{name}", "a source name is a lowercase letter, then lowercase letters, "
                                   f"digits, '_' or '-', and not {WIKIPEDIA_SOURCE!r} (the dump's)")
        check_minimum(self, 1, "documents_per_part")


def run(config: CorpusConfig, ctx: StageContext) -> dict:
    if not config.sources:
        raise ConfigError("corpus: no sources to read (--corpus PATH)")
    tasks: list[tuple[str, int, ReadTask, str, int]] = []  # (source, task number, task, out_dir, per_part)
    for name, source in sorted(config.sources.items()):
        for number, task in enumerate(source_tasks(name, source, ctx)):
            tasks.append((name, number, task, str(ctx.out_dir), config.documents_per_part))
    totals = {name: {"files": len({t.path for n, _, t, _, _ in tasks if n == name}), "documents": 0, "empty": 0,
                     "bytes": 0, "parts": 0} for name in config.sources}
    with progress(sum(t.size for _, _, t, _, _ in tasks), "corpus", unit="B", quiet=ctx.quiet) as bar:
        for (name, _, task, _, _), counts in zip(tasks, ctx.executor.map(_read_task, tasks)):
            for key, value in counts.items():
                totals[name][key] += value
            bar.update(task.size)
    for name, source in config.sources.items():
        if totals[name]["documents"] == 0:
            raise DataError(f"{source.path}: no documents (corpus source {name!r}: {totals[name]['files']} file(s), "
                            f"{totals[name]['empty']} empty texts)")
    ctx.log.info("corpus: %s", ", ".join(f"{name} {t['documents']:,} documents" for name, t in sorted(totals.items())))
    return {"documents": sum(t["documents"] for t in totals.values()),
            "files": sum(t["files"] for t in totals.values()),
            "parts": sum(t["parts"] for t in totals.values()),
            "sources": dict(sorted(totals.items()))}


def source_tasks(name: str, source: CorpusSource, ctx: StageContext) -> list[ReadTask]:
    """The read tasks of one source; ConfigError naming the source's setting when it names no corpus file."""
    try:
        files, root = find_files(source.path)
        tasks, unknown = read_tasks(files, root, Fields(source.text_field, source.id_field, source.title_field),
                                    source.format)
    except ConfigError as e:
        raise ConfigError(f"corpus.sources.{name}: {e}") from None
    if unknown and (len(files) == 1 or not Path(source.path).is_dir()):
        raise ConfigError(f"corpus.sources.{name}: {unknown[0]}: unknown corpus format (known: .jsonl, .json, "
                          ".ndjson, .parquet, .txt, .text, plain or .gz/.zst/.bz2/.xz); set "
                          f"corpus.sources.{name}.format")
    if unknown:
        ctx.log.warning("corpus: %s: %d file(s) of no corpus format left out (e.g. %s)", source.path, len(unknown),
                        unknown[0].name)
    if not tasks:
        raise ConfigError(f"corpus.sources.{name}: {source.path}: no corpus files (.jsonl, .parquet, .txt, ...)")
    return tasks


def _read_task(task) -> dict:
    """Write the documents of one read task as JSONL parts; their counts."""
    name, number, read, out_dir, per_part = task
    counts = {"documents": 0, "empty": 0, "bytes": 0, "parts": 0}
    with PartWriter(Path(out_dir), per_part, f"part-{name}-{number:05d}-") as writer:
        for ident, title, text in read_documents(read):
            if not text.strip():
                counts["empty"] += 1
                continue
            line = json.dumps({"id": ident, "title": title, "text": text, "source": name}, ensure_ascii=False)
            writer.write(line)
            counts["documents"] += 1
            counts["bytes"] += len(text.encode("utf-8", "surrogatepass"))
        counts["parts"] = writer.parts
    return counts


def corpus_fingerprints(config: CorpusConfig) -> dict:
    """Fingerprints of every corpus file (the runner compares them with the done stage's); a source that names no
    file, or cannot be read, is recorded as such (the stage's run says what is wrong)."""
    fingerprints: dict = {}
    for name, source in sorted(config.sources.items()):
        try:
            files, _ = find_files(source.path)
            for path in files:
                fingerprints[f"{name}:{path}"] = {"path": str(path), **file_fingerprint(path)}
        except (ConfigError, DataError, OSError) as e:
            fingerprints[name] = f"{source.path}: {e}"
    return fingerprints


STAGE = Stage("corpus", CorpusConfig, run, tools=("pyarrow", "zstandard"), sources=corpus_fingerprints,
              idle=corpus_idle)
