"""Stage `sentences`: JSONL documents (extract's articles, the corpus stage's documents) -> one sentence per line, a
blank line after each document.

Each `part-*.jsonl` of extract and of corpus (those that have work in the run) becomes `part-*.txt` of the same
stem (the format of Google's `create_pretraining_data.py`) and `part-*.docs.jsonl` (each document's record:
source, id, title, and for a document not from the dump the sentences of its lines and paragraphs, which the
filter's line rules read; `pipeline.text_files`). The counts have each source's documents and sentences.
Paragraph ends always end a sentence; whitespace and control characters are normalized
(`pipeline.stages.sentences.splitters.normalize_paragraph`); articles with no text are left out. Hungarian uses quntoken,
every other language the rule splitter (`pipeline.stages.sentences.splitters`, which says why it was chosen).
Parts are split in parallel; the output does not depend on the number of workers.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Literal

from wiki2bert_core.errors import DataError
from wiki2bert_core.files import atomic_write
from pipeline.text_files import (PARAGRAPHS, PUBLISHED, RECORD_ID, WIKIPEDIA_SOURCE, DocumentRecord, iter_jsonl,
                                 list_parts, records_path, write_document, write_record)
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext, StageCounts
from pipeline.stages.sentences.splitters import (blank_line_runs, check_quntoken, make_splitter, normalize_paragraph,
                                                 split_paragraphs)

# Paragraph characters per splitter call: quntoken starts a pipe of binaries per call, so a call gets thousands
# of sentences (its start-up is a small share of the call), and memory stays bounded by the batch.
BATCH_CHARS = 1 << 20


@dataclasses.dataclass(frozen=True)
class SentencesConfig:
    # rules: our rule splitter (pipeline/stages/sentences/splitters.py), any language; quntoken: Hungarian, Linux x86-64
    splitter: Literal["rules", "quntoken"] = "rules"
    language: str | None = None  # abbreviation list of the rule splitter; null: --lang
    # rule splitter: more words that never end a sentence (e.g. [Hauptstr, approx])
    extra_abbreviations: list[str] = dataclasses.field(default_factory=list)


def run(config: SentencesConfig, ctx: StageContext) -> StageCounts:
    if config.splitter == "quntoken":
        check_quntoken()
    language = config.language or ctx.lang
    parts = [part for stage in ("extract", "corpus") if stage in ctx.inputs
             for part in list_parts(ctx.inputs[stage], ".jsonl")]
    ctx.log.info("sentences: %d parts, splitter %s%s", len(parts), config.splitter,
                 "" if config.splitter == "quntoken" else f" (language {language})")
    tasks = [(path, ctx.out_dir, config.splitter, language, tuple(config.extra_abbreviations)) for path in parts]
    totals = {"articles": 0, "documents": 0, "sentences": 0, "empty_articles": 0}
    sources: dict[str, dict[str, int]] = {}
    with progress(sum(p.stat().st_size for p in parts), "sentences", unit="B", quiet=ctx.quiet) as bar:
        for counts in ctx.executor.map(_split_part, tasks):
            for key in totals:
                totals[key] += counts[key]
            for source, source_counts in counts["sources"].items():
                for key, value in source_counts.items():
                    sources.setdefault(source, {"documents": 0, "sentences": 0})[key] += value
            bar.update(counts["bytes"])
    if totals["documents"] == 0:
        raise DataError(f"{', '.join(map(str, ctx.inputs.values()))}: no article text in {len(parts)} part file(s) "
                        f"({totals['articles']} articles, all empty)")
    return StageCounts(totals, sources=dict(sorted(sources.items())))


def _split_part(task) -> dict:
    path, out_dir, splitter_name, language, extra = task
    splitter = _splitter(splitter_name, language, extra)
    stem = path.name[:-len(".jsonl")]
    counts = {"articles": 0, "documents": 0, "sentences": 0, "empty_articles": 0, "bytes": path.stat().st_size,
              "sources": {}}
    batch: list[tuple[DocumentRecord, list[str], list[int] | None]] = []  # (record, paragraphs, blank_line_runs)
    batch_chars = 0
    text_path = Path(out_dir) / f"{stem}.txt"
    with atomic_write(text_path) as text_out, atomic_write(records_path(text_path)) as records_out:
        def flush():
            paragraphs = [p for _, article, _ in batch for p in article]
            split = iter(splitter.split(paragraphs))
            for record, article, runs in batch:
                lines = [next(split) for _ in article]
                sentences = [s for line in lines for s in line]
                if not sentences:  # only characters the splitter drops (a lone zero-width joiner)
                    counts["empty_articles"] += 1
                    continue
                if runs is not None:
                    record = dataclasses.replace(record, extra={**record.extra, PARAGRAPHS: _layout(lines, runs)})
                write_document(text_out, sentences)
                write_record(records_out, record)
                counts["documents"] += 1
                counts["sentences"] += len(sentences)
                source = counts["sources"].setdefault(record.source, {"documents": 0, "sentences": 0})
                source["documents"] += 1
                source["sentences"] += len(sentences)
            batch.clear()

        for line_no, article in enumerate(iter_jsonl(path), 1):
            if not (isinstance(article, dict) and isinstance(article.get("text"), str)
                    and isinstance(article.get("title", ""), str)):
                raise DataError(f"{path}: line {line_no}: expected an object with string 'text' and 'title'")
            counts["articles"] += 1
            paragraphs = split_paragraphs(article["text"])
            if not paragraphs:
                counts["empty_articles"] += 1
                continue
            record = DocumentRecord(str(article.get("source", WIKIPEDIA_SOURCE)), str(article.get("id", line_no)),
                                    normalize_paragraph(article.get("title", "")),
                                    {key: article[key] for key in (RECORD_ID, PUBLISHED) if key in article})
            # the dump's records stay as they were: the Wikipedia rules read no lines
            runs = None if record.source == WIKIPEDIA_SOURCE else blank_line_runs(article["text"])
            batch.append((record, paragraphs, runs))
            batch_chars += sum(map(len, paragraphs))
            if batch_chars >= BATCH_CHARS:
                flush()
                batch_chars = 0
        flush()
    return counts


def _layout(lines: list[list[str]], runs: list[int]) -> list[list[int]]:
    """The PARAGRAPHS field of a document: its sentences per line, lines grouped by `runs`; lines left without a
    sentence (and paragraphs without a line) are left out, as their sentences are."""
    layout, at = [], 0
    for n in runs:
        paragraph = [len(line) for line in lines[at:at + n] if line]
        at += n
        if paragraph:
            layout.append(paragraph)
    return layout


@functools.cache
def _splitter(name: str, language: str, extra: tuple[str, ...]):
    return make_splitter(name, language, list(extra))


STAGE = Stage("sentences", SentencesConfig, run, inputs=("extract", "corpus"), tools=("quntoken",))
