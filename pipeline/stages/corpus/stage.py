"""Stage `corpus`: text corpora beside (or instead of) the Wikipedia dump -> JSONL parts as extract writes them.

Each source of `sources` (the CLI's `--corpus [NAME=]PATH[:WEIGHT]`) is a file, a directory or a glob of JSON
Lines, Parquet or plain text files (`readers.py`). Its documents become `part-<source>-<task>-00000.jsonl`, ... of
`documents_per_part` lines {"id", "title", "text", "source"}, the extract stage's format with the source's name, which
the `sentences` stage reads beside extract's parts; documents whose text is only whitespace (`empty`), or longer than
`max_document_bytes` (`too_long`), are counted, not written.
A document's "id" is where it is, `<file>:<line>` (or row): unique in its source by construction, so every choice
made by a hash of (source, id) later (the shard stage's fractional weights) is the document's own, and every record
that names a document (dedup's removed.jsonl, the shards' docs.jsonl) names one. The record's own id (`id_field`),
which corpora repeat (a constant column, files that each number from 0), is kept as "record_id"; the documents
whose record_id repeats an earlier one of their source are counted (`duplicate_ids`, one warning for the run),
from 8-byte hashes of the ids: 8 bytes per document with an id in the main process.
A source its publisher cleaned and deduplicated (`publisher`: FineWeb-2, HPLT v2, CulturaX; by default told by the
columns of its first file, readers.py) is said so in one line per source; its documents carry the publisher's
metadata as PUBLISHED ({"url", "language_score", "cluster_size"}), and pipeline/sources.py gives it the filter's
`published` rule set unless `filter.rules` names it.
Sources are read in name order, each file (or run of consecutive Parquet row groups of up to `documents_per_part` rows)
a task of `ctx.executor.map`, so the bytes do not depend on the number of workers, the executor or the order of
the flags. A run without corpora has no work here: the runner leaves the stage out (pipeline/sources.py). The files
read are fingerprinted (`sources`: size, mtime and the first and last MiB), so a corpus file replaced at the same
path makes the stage stale.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Literal

import numpy as np

from wiki2bert_core.config import SettingError, added_later, check_minimum
from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import file_fingerprint
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext, StageCounts
from pipeline.stages.corpus.readers import (PUBLISHERS, Fields, Publisher, ReadTask, detect_publisher, find_files,
                                            read_documents, read_tasks)
from pipeline.text_files import PUBLISHED, RECORD_ID, WIKIPEDIA_SOURCE, PartWriter
from pipeline.sources import SOURCE_NAME, SOURCE_NAME_RULE, corpus_idle


@dataclasses.dataclass(frozen=True)
class CorpusSource:
    # a file, a directory (every file under it) or a glob of corpus files (--corpus makes it absolute)
    path: str = ""
    # jsonl, parquet or text (a blank line between documents); auto: by each file's name (.jsonl, .json, .ndjson,
    # .parquet, .txt, .text; plain or .gz, .zst, .bz2, .xz)
    format: Literal["auto", "jsonl", "parquet", "text"] = "auto"
    text_field: str = "text"  # the JSON key or Parquet column of a document's text
    # the key or column of its own id, kept as the document's "record_id" (documents are named by <file>:<line>, or
    # <file>:<row> in Parquet, which is unique where ids may repeat); missing or null: none
    id_field: str = "id"
    title_field: str = "title"  # the key or column of its title (for examples in reports); missing: none (e.g. url)
    # who cleaned and deduplicated it already: fineweb-2, hplt (v2) or culturax: its metadata columns are read (url,
    # language score, cluster size) and the filter gives it rule set `published` unless filter.rules names it; auto:
    # the publisher whose columns its first file has (none if no publisher's); none: a raw corpus
    publisher: Literal["auto", "fineweb-2", "hplt", "culturax", "none"] = added_later("auto")

    def __post_init__(self):
        if not self.path:
            raise SettingError("path", "required: the corpus's file, directory or glob (--corpus NAME=PATH)")


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    # the corpora, by source name: {NAME: {path: ..., format: ..., text_field: ...}}; --corpus NAME=PATH adds one,
    # --set corpus.sources.NAME.KEY=VALUE sets one of its keys; a source's weight is shard.weights.NAME
    sources: dict[str, CorpusSource] = dataclasses.field(default_factory=dict)
    documents_per_part: int = 2000  # documents per part-<source>-*.jsonl (the parts later stages parallelize over)
    # a document whose text is longer (UTF-8 bytes) is left out, counted (`too_long`) and warned of once: the filter
    # stage holds ~40 times a document's bytes at once, sentences ~10 (bench/document_memory.py, docs/pipeline.md),
    # and web dumps hold lines of hundreds of MB (tables, logs, encoded data), rarely prose. 8 MiB keeps every
    # Wikipedia article (the longest hold ~1 MB of text) and whole books, and bounds a filter worker's peak at ~0.5
    # GiB; cutting such a text instead would keep the head of what is at that size mostly not prose.
    max_document_bytes: int = 8 << 20

    def __post_init__(self):
        for name in self.sources:
            if not SOURCE_NAME.fullmatch(name) or name == WIKIPEDIA_SOURCE:
                raise SettingError(f"sources.{name}", SOURCE_NAME_RULE)
        check_minimum(self, 1, "documents_per_part", "max_document_bytes")


def run(config: CorpusConfig, ctx: StageContext) -> StageCounts:
    if not config.sources:
        raise ConfigError("corpus: no sources to read (--corpus PATH)")
    # (source, task number, task, out_dir, documents per part, max document bytes)
    tasks: list[tuple[str, int, ReadTask, str, int, int]] = []
    for name, source in sorted(config.sources.items()):
        for number, task in enumerate(source_tasks(name, source, ctx, config.documents_per_part)):
            tasks.append((name, number, task, str(ctx.out_dir), config.documents_per_part, config.max_document_bytes))
    publishers = {name: next((t[2].publisher.name for t in tasks if t[0] == name and t[2].publisher), None)
                  for name in config.sources}
    totals = {name: {"files": len({t[2].path for t in tasks if t[0] == name}), "documents": 0, "empty": 0,
                     "too_long": 0, "longest_left_out": 0, "bytes": 0, "parts": 0, "duplicate_ids": 0,
                     **({"publisher": publishers[name]} if publishers[name] else {})}
              for name in config.sources}
    id_hashes: dict[str, list[np.ndarray]] = {name: [] for name in config.sources}
    with progress(sum(t[2].size for t in tasks), "corpus", unit="B", quiet=ctx.quiet) as bar:
        for (name, _, task, *_), (counts, hashes) in zip(tasks, ctx.executor.map(_read_task, tasks)):
            for key, value in counts.items():
                totals[name][key] = max(totals[name][key], value) if key == "longest_left_out" else \
                    totals[name][key] + value
            id_hashes[name].append(hashes)
            bar.update(task.size)
    for name, source in config.sources.items():
        if totals[name]["documents"] == 0:
            raise DataError(f"{source.path}: no documents (corpus source {name!r}: {totals[name]['files']} file(s), "
                            f"{totals[name]['empty']} empty texts, {totals[name]['too_long']} over "
                            f"corpus.max_document_bytes)")
        everyone = np.sort(np.concatenate(id_hashes.pop(name)))
        totals[name]["duplicate_ids"] += int(np.count_nonzero(everyone[1:] == everyone[:-1]))
    if too_long := {name: t for name, t in sorted(totals.items()) if t["too_long"]}:
        ctx.log.warning("corpus: documents longer than corpus.max_document_bytes (%s bytes) left out: %s",
                        f"{config.max_document_bytes:,}", ", ".join(
                            f"{name} {t['too_long']:,} (the longest {t['longest_left_out']:,} bytes)"
                            for name, t in too_long.items()))
    if repeated := {name: t for name, t in sorted(totals.items()) if t["duplicate_ids"]}:
        ctx.log.warning("corpus: documents whose id repeats an earlier one of their source: %s; each document is "
                        "named by its file and line (or row) instead, and keeps its own id as record_id",
                        ", ".join(f"{name} {t['duplicate_ids']:,} of {t['documents']:,} "
                                  f"(id_field {config.sources[name].id_field!r})" for name, t in repeated.items()))
    ctx.log.info("corpus: %s", ", ".join(f"{name} {t['documents']:,} documents" for name, t in sorted(totals.items())))
    return StageCounts({"documents": sum(t["documents"] for t in totals.values()),
                        "files": sum(t["files"] for t in totals.values()),
                        "parts": sum(t["parts"] for t in totals.values())},
                       sources=dict(sorted(totals.items())))


def source_tasks(name: str, source: CorpusSource, ctx: StageContext, documents_per_part: int) -> list[ReadTask]:
    """The read tasks of one source (small Parquet row groups joined into tasks of up to a part's documents);
    ConfigError naming the source's setting when it names no corpus file."""
    try:
        files, root = find_files(source.path)
        publisher = source_publisher(source, files)
        tasks, unknown = read_tasks(files, root, Fields(source.text_field, source.id_field, source.title_field),
                                    source.format, publisher, documents_per_part)
    except ConfigError as e:
        raise ConfigError(f"corpus.sources.{name}: {e}") from None
    if publisher is not None:
        found = (f"{publisher.title}'s columns ({', '.join(sorted(publisher.signature))}) found in {files[0].name}"
                 if source.publisher == "auto" else f"corpus.sources.{name}.publisher is {publisher.name}")
        read = ", ".join(f"{key} from {column!r}" for key, column in publisher.columns.items())
        ctx.log.info("corpus: %s: %s: read as cleaned and deduplicated by %s: the filter checks only its language "
                     "and cuts long documents (rule set `published`, unless filter.rules.%s names another), each "
                     "document keeps %s, and dedup still compares it with the other sources", name, found,
                     publisher.title, name, read)
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


def source_publisher(source: CorpusSource, files: list[Path]) -> Publisher | None:
    """The publisher of a source: its `publisher` setting, or (auto) the one its first file's columns tell."""
    if source.publisher == "auto":
        return detect_publisher(files, source.format)
    return PUBLISHERS.get(source.publisher)


def _read_task(task) -> tuple[dict, np.ndarray]:
    """Write the documents of one read task as JSONL parts; (their counts, the distinct hashes of their record ids,
    sorted: `duplicate_ids` counts the repeats within the task)."""
    name, number, read, out_dir, per_part, max_bytes = task
    counts = {"documents": 0, "empty": 0, "too_long": 0, "longest_left_out": 0, "bytes": 0, "parts": 0}
    hashes = []
    with PartWriter(Path(out_dir), per_part, f"part-{name}-{number:05d}-") as writer:
        for document in read_documents(read):
            if not document.text.strip():
                counts["empty"] += 1
                continue
            size = len(document.text.encode("utf-8", "surrogatepass"))
            if size > max_bytes:
                counts["too_long"] += 1
                counts["longest_left_out"] = max(counts["longest_left_out"], size)
                continue
            record = {"id": document.location, "title": document.title, "text": document.text, "source": name}
            if document.record_id is not None:
                record[RECORD_ID] = document.record_id
                hashes.append(_id_hash(document.record_id))
            if document.published is not None:
                record[PUBLISHED] = document.published
            writer.write(json.dumps(record, ensure_ascii=False))
            counts["documents"] += 1
            counts["bytes"] += size
        counts["parts"] = writer.parts
    distinct = np.unique(np.array(hashes, dtype=np.uint64))
    counts["duplicate_ids"] = len(hashes) - len(distinct)
    return counts, distinct


def _id_hash(record_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(record_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little")


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
              idle=corpus_idle, output_format=3)  # 2: documents named by file and line, their own ids record_id;
# 3: a published corpus's metadata (PUBLISHED)
