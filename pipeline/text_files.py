"""The two text formats passed between pipeline stages.

Formats between stages:
- JSONL parts (`part-00000.jsonl`): one article per line, {"id", "title", "url", "text"}.
- document text (`*.txt`): one sentence per line, one blank line after each document.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import IO, Iterable, Iterator

from wiki2bert_core.errors import DataError


def part_name(index: int, suffix: str) -> str:
    return f"part-{index:05d}{suffix}"


def list_parts(directory: Path, suffix: str) -> list[Path]:
    """The stage's part files in order; DataError if there are none."""
    parts = sorted(Path(directory).glob(f"part-*{suffix}"))
    if not parts:
        raise DataError(f"{directory}: no part-*{suffix} files (is the previous stage complete?)")
    return parts


def iter_jsonl(path: Path) -> Iterator[dict]:
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                yield json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise DataError(f"{path}: line {line_no}: not UTF-8 (byte {e.start} of the line)") from None
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: line {line_no}: invalid JSON ({e.msg})") from None


def iter_documents(path: Path) -> Iterator[list[str]]:
    """Documents of a sentence-per-line file: runs of non-empty lines separated by blank lines."""
    doc: list[str] = []
    for _, _, line in _stripped_lines(path):
        if line:
            doc.append(line)
        elif doc:
            yield doc
            doc = []
    if doc:
        yield doc


def _stripped_lines(path: Path) -> Iterator[tuple[int, bytes, str]]:
    """(line number, raw bytes, decoded and stripped text) of each line; DataError naming the line if not UTF-8."""
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                yield line_no, raw, raw.decode("utf-8").strip()
            except UnicodeDecodeError as e:
                raise DataError(f"{path}: line {line_no}: not UTF-8 (byte {e.start} of the line)") from None


def write_document(f: IO[str], sentences: Iterable[str]) -> None:
    f.write("\n".join(sentences))
    f.write("\n\n")


@dataclasses.dataclass
class TextShape:
    """What a document-text file looks like: enough to tell text that would lose data silently."""
    lines: int = 0  # non-blank lines (sentences)
    documents: int = 0
    long_lines: int = 0  # lines longer than the limit given to text_shape
    longest: int = 0  # bytes of the longest line
    longest_at: int = 0  # its line number


def text_shape(path: Path, long_line_bytes: int) -> TextShape:
    """One streaming pass: sentences, documents and over-long lines; DataError naming the line if not UTF-8."""
    shape, in_document = TextShape(), False
    for line_no, raw, line in _stripped_lines(path):
        if not line:
            in_document = False
            continue
        shape.lines += 1
        shape.documents += not in_document
        in_document = True
        if len(raw) > long_line_bytes:
            shape.long_lines += 1
        if len(raw) > shape.longest:
            shape.longest, shape.longest_at = len(raw), line_no
    return shape


def check_text_shape(inputs: Path, files: list[Path], max_tokens: int, log: logging.Logger) -> None:
    """Before making instances from the user's text (`files`, given as `inputs`): DataError naming the input if
    there is no text at all; a warning with counts for text the instance algorithm would silently mangle: lines far
    longer than an instance (all but its first `max_tokens` tokens are dropped) and files without blank lines (one
    document, so no "random next" sentence can come from another document)."""
    long_line_bytes = 16 * max_tokens  # a BERT token averages 4-6 bytes: such a line holds 3 times max_tokens
    sentences = 0
    for path in files:
        shape = text_shape(path, long_line_bytes)
        sentences += shape.lines
        if shape.long_lines:
            log.warning("%s: %d line(s) longer than %d bytes (the longest: line %d, %d bytes); an instance holds at "
                        "most %d tokens, the rest of such a line is dropped: is the text one sentence per line?",
                        path, shape.long_lines, long_line_bytes, shape.longest_at, shape.longest, max_tokens)
        if shape.documents == 1 and shape.lines > 1:
            log.warning("%s: no blank line between its %d sentences, so the whole file is one document and no "
                        "random next sentence can come from another document: put a blank line after each document",
                        path, shape.lines)
    if files and not sentences:
        raise DataError(f"{inputs}: no text to make instances from (only blank lines)")
