"""The two text formats passed between pipeline stages.

Formats between stages:
- JSONL parts (`part-00000.jsonl`): one article per line, {"id", "title", "url", "text"}.
- document text (`*.txt`): one sentence per line, one blank line after each document.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Iterable, Iterator

from core.errors import PipelineError


def part_name(index: int, suffix: str) -> str:
    return f"part-{index:05d}{suffix}"


def list_parts(directory: Path, suffix: str) -> list[Path]:
    """The stage's part files in order; PipelineError if there are none."""
    parts = sorted(Path(directory).glob(f"part-*{suffix}"))
    if not parts:
        raise PipelineError(f"{directory}: no part-*{suffix} files (is the previous stage complete?)")
    return parts


def iter_jsonl(path: Path) -> Iterator[dict]:
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                yield json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise PipelineError(f"{path}: line {line_no}: not UTF-8 (byte {e.start} of the line)") from None
            except json.JSONDecodeError as e:
                raise PipelineError(f"{path}: line {line_no}: invalid JSON ({e.msg})") from None


def iter_documents(path: Path) -> Iterator[list[str]]:
    """Documents of a sentence-per-line file: runs of non-empty lines separated by blank lines."""
    doc: list[str] = []
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as e:
                raise PipelineError(f"{path}: line {line_no}: not UTF-8 (byte {e.start} of the line)") from None
            if line:
                doc.append(line)
            elif doc:
                yield doc
                doc = []
    if doc:
        yield doc


def write_document(f: IO[str], sentences: Iterable[str]) -> None:
    f.write("\n".join(sentences))
    f.write("\n\n")
