"""A corpus's files as documents (id, title, text): JSON Lines, Parquet and plain text, found by path, directory or
glob, and cut into read tasks (a file, or one Parquet row group) that run in any process.

- JSON Lines (`.jsonl`, `.ndjson`, `.json`: one object per line, as FineWeb, HPLT, OSCAR and C4 publish them),
  plain or compressed (`.gz`, `.zst`/`.zstd`, `.bz2`, `.xz`): the text field must be a string; the id and title
  fields are optional.
- Parquet (`.parquet`, FineWeb-2 and CulturaX as published): read one row group per task, in batches of
  `BATCH_ROWS` rows of the needed columns only (pyarrow), so memory is bounded by a batch, not by the file.
- plain text (`.txt`, `.text`, compressed as above): a blank line between documents, each line a paragraph.
A UTF-8 byte-order mark at the start of a JSON Lines or plain-text file is dropped.
Corpora their publishers cleaned and deduplicated (`PUBLISHERS`: FineWeb-2, HPLT v2, CulturaX) are told by their
columns (`detect_publisher`: those of a source's first file); a document of a task with a publisher carries its
metadata (`Document.published`: url, language_score, cluster_size) from the publisher's columns.
Each document is named by where it is, `<file>:<line>` (`<file>:<row>` in Parquet, rows counted from 1; a plain
text document by its first line), the file named relative to the source's directory (or glob root): unique in its
source by construction, where the records' own ids (`Document.record_id`) may repeat. Bad input raises one line
naming the file and the line or row: DataError for data (invalid JSON, not UTF-8, a record without its text, damaged
compressed data), ConfigError for what a setting decides (no such file, not a regular file, an unknown format, a
Parquet file without a text column of a string type).
"""
from __future__ import annotations

import bz2
import dataclasses
import functools
import glob
import gzip
import io
import json
import lzma
import math
import os
import zlib
from pathlib import Path
from typing import IO, Iterator, NamedTuple

from wiki2bert_core.errors import ConfigError, DataError, not_utf8
from wiki2bert_core.utf8_paths import utf8_names

FORMATS = ("jsonl", "parquet", "text")
EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".txt": "text",
              ".text": "text"}
COMPRESSIONS = (".gz", ".zst", ".zstd", ".bz2", ".xz")
BATCH_ROWS = 1024  # Parquet rows decoded at a time
UTF8_BOM = b"\xef\xbb\xbf"


@dataclasses.dataclass(frozen=True)
class Fields:
    """Which fields (JSON keys, Parquet columns) hold a document's text, id and title."""
    text: str = "text"
    id: str = "id"
    title: str = "title"


@dataclasses.dataclass(frozen=True)
class Publisher:
    """A publisher of cleaned and deduplicated corpora: the columns (JSON keys) that tell its files, and the ones of
    each document's metadata (None: it publishes none)."""
    name: str  # as corpus.sources.NAME.publisher names it
    title: str  # in log lines and docs
    signature: frozenset[str]  # a file holding all of these columns is the publisher's
    url: str | None
    language_score: str | None  # a number, or a list of them whose first is the first language's (HPLT's prob)
    cluster_size: str | None  # the document's copies before the publisher's deduplication (itself included)

    @functools.cached_property
    def columns(self) -> dict[str, str]:
        """{metadata key: the publisher's column} of the metadata it publishes (read for every document: built once)."""
        return {key: column for key, column in (("url", self.url), ("language_score", self.language_score),
                                                ("cluster_size", self.cluster_size)) if column}


PUBLISHERS = {p.name: p for p in (
    Publisher("fineweb-2", "FineWeb-2", frozenset({"text", "url", "language_score", "minhash_cluster_size"}), "url",
              "language_score", "minhash_cluster_size"),
    Publisher("hplt", "HPLT v2", frozenset({"text", "u", "lang", "prob", "seg_langs"}), "u", "prob", None),
    Publisher("culturax", "CulturaX", frozenset({"text", "timestamp", "url", "source"}), "url", None, None),
)}


@dataclasses.dataclass(frozen=True)
class ReadTask:
    """One unit of parallel reading: a whole file, or consecutive row groups of a Parquet file. Plain data (it
    pickles)."""
    path: str
    name: str  # the file as ids name it: relative to the source's directory or glob root
    format: str
    fields: Fields
    row_groups: tuple[int, ...] = ()  # Parquet only
    first_row: int = 0  # Parquet: rows of the file before these row groups
    size: int = 0  # bytes of input this task reads (for progress)
    publisher: Publisher | None = None  # whose metadata columns are read (None: none are)


class Document(NamedTuple):
    location: str  # "<file>:<line>" ("<file>:<row>" in Parquet): unique in its source
    record_id: str | None  # the value of the record's id field; None where it has none (plain text, a null)
    title: str
    text: str
    published: dict | None = None  # the publisher's metadata of it (Publisher.columns' keys it has values for)


def find_files(pattern: str) -> tuple[list[Path], Path]:
    """(the files `pattern` names, sorted; the directory their ids are relative to): a file, a directory (every file
    under it, hidden ones left out) or a glob (`**` crosses directories). ConfigError when it names nothing, or names
    something that is neither a regular file nor a directory (a FIFO, a device: its bytes cannot be read twice)."""
    path = Path(pattern)
    if glob.has_magic(pattern):
        files = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if _regular_file(Path(p)))
        root = Path(*[part for part in _until_magic(path.parts)]) if path.parts else Path(".")
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if not any(part.startswith(".") for part in p.relative_to(path).parts)
                       and _regular_file(p))
        root = path
    elif _regular_file(path):
        files, root = [path], path.parent
    else:
        raise ConfigError(f"{pattern}: no such file or directory")
    if not files:
        raise ConfigError(f"{pattern}: no files")
    return utf8_names(files), root


def _regular_file(path: Path) -> bool:
    """True for a regular file (or a link to one), False for a directory or a dangling link; ConfigError for anything
    else."""
    if path.is_file():
        return True
    if path.is_dir() or not path.exists():
        return False
    raise ConfigError(f"{path}: not a regular file (a FIFO, socket or device); give a file, a directory or a glob")


def _until_magic(parts: tuple[str, ...]) -> Iterator[str]:
    for part in parts[:-1]:
        if glob.has_magic(part):
            return
        yield part


def file_format(path: Path, setting: str) -> str | None:
    """jsonl, parquet or text: `setting` unless it is auto, else by the name (a compression suffix looked through);
    None for a name of no known format."""
    if setting != "auto":
        return setting
    name = path.name.lower()
    for suffix in COMPRESSIONS:
        if name.endswith(suffix):
            name = name[:-len(suffix)]
            break
    return EXTENSIONS.get(os.path.splitext(name)[1])


def detect_publisher(files: list[Path], setting: str) -> Publisher | None:
    """The publisher whose columns the first file of `files` with a known format has (a Parquet file's schema, a
    JSON Lines file's first record), or None; the first of PUBLISHERS that fits. What cannot be read is left to the
    corpus stage's reading to report (None here)."""
    for path in files:
        kind = file_format(path, setting)
        if kind is None:
            continue
        try:
            if kind == "parquet":
                columns = set(_parquet_file(path).schema_arrow.names)
            elif kind == "jsonl":
                lines = _lines(path)
                try:
                    first = next((line for _, line in lines if line.strip()), "{}")
                finally:
                    lines.close()
                columns = set(record) if isinstance(record := json.loads(first), dict) else set()
            else:
                return None
        except (ConfigError, DataError, OSError, ValueError):
            return None
        return next((p for p in PUBLISHERS.values() if p.signature <= columns), None)
    return None


def read_tasks(files: list[Path], root: Path, fields: Fields, setting: str, publisher: Publisher | None = None,
               rows_per_task: int = 1) -> tuple[list[ReadTask], list[Path]]:
    """(the read tasks of `files`, the files of no known format); a Parquet file gives a task per run of consecutive
    row groups of up to `rows_per_task` rows together (a larger group is a task alone): writers' row groups range
    from a few rows to millions, and a task per small group made as many parts, each a file and a task in every later
    stage (a 1 GB corpus of 64-row groups: 7,928 parts of 64 documents). ConfigError for a Parquet file without the
    text column, a compressed Parquet name or compressed data given the parquet format; DataError for a file that is
    not Parquet."""
    tasks, unknown = [], []
    for path in files:
        kind = file_format(path, setting)
        if kind is None:
            unknown.append(path)
            continue
        name = str(path.relative_to(root)) if path.is_relative_to(root) else path.name
        if kind != "parquet":
            tasks.append(ReadTask(str(path), name, kind, fields, size=path.stat().st_size, publisher=publisher))
            continue
        parquet = _parquet_file(path)
        metadata, schema = parquet.metadata, parquet.schema_arrow
        if fields.text not in schema.names:
            raise ConfigError(f"{path}: no column {fields.text!r} (columns: {', '.join(schema.names)}); "
                              f"set the source's text_field")
        text_type = schema.field(fields.text).type
        if not _is_text_type(text_type):
            raise ConfigError(f"{path}: column {fields.text!r} is of type {text_type}, not a string; set the "
                              "source's text_field to a string column")
        size, rows = path.stat().st_size, max(1, metadata.num_rows)
        runs: list[tuple[tuple[int, ...], int]] = []  # (consecutive row groups, their rows)
        for group in range(metadata.num_row_groups):
            group_rows = metadata.row_group(group).num_rows
            if runs and runs[-1][1] + group_rows <= rows_per_task:
                runs[-1] = (runs[-1][0] + (group,), runs[-1][1] + group_rows)
            else:
                runs.append(((group,), group_rows))
        first = 0
        for groups, run_rows in runs:
            tasks.append(ReadTask(str(path), name, kind, fields, groups, first, size * run_rows // rows, publisher))
            first += run_rows
    return tasks, unknown


def _parquet_file(path: Path):
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (pyarrow.ArrowInvalid, OSError) as e:
        raise DataError(f"{path}: not a Parquet file ({str(e).splitlines()[0]})") from None


@functools.lru_cache(maxsize=4)
def _parquet_metadata(path: str, size: int, mtime_ns: int):
    """A Parquet file's footer, parsed once per process: a task reads one row group, and a file of 2,000 row groups
    has a 4 MB footer that took 3x as long to parse as its row group to read (a 1 GB corpus: 2/3 of the stage's
    CPU). `size` and `mtime_ns` key it to the file's version."""
    return _parquet_file(Path(path)).metadata


def _is_text_type(arrow_type) -> bool:
    """Whether a Parquet column of this Arrow type holds one text per row (a string or binary, maybe dictionary
    encoded)."""
    import pyarrow

    if pyarrow.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    types = pyarrow.types
    return any(check(arrow_type) for check in (types.is_string, types.is_large_string, types.is_string_view,
                                               types.is_binary, types.is_large_binary, types.is_binary_view))


def read_documents(task: ReadTask) -> Iterator[Document]:
    """The documents of the task, in file order."""
    if task.format == "parquet":
        yield from _parquet_documents(task)
    elif task.format == "jsonl":
        yield from _jsonl_documents(task)
    else:
        yield from _text_documents(task)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a (maybe compressed) file; DataError naming the line if it is not UTF-8,
    or where the compressed data is damaged."""
    line_no = 0
    try:
        with _open_binary(path) as f:
            for line_no, raw in enumerate(f, 1):
                if line_no == 1 and raw.startswith(UTF8_BOM):  # Windows tools start UTF-8 files with one
                    raw = raw[len(UTF8_BOM):]
                try:
                    yield line_no, raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise not_utf8(path, raw, e, line_no) from None
    except (EOFError, OSError, zlib.error, lzma.LZMAError, _ZstdError) as e:
        if isinstance(e, FileNotFoundError | PermissionError | IsADirectoryError):
            raise
        raise DataError(f"{path}: after line {line_no}: damaged or cut compressed data ({e})") from None


def _open_binary(path: Path) -> IO[bytes]:
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith((".zst", ".zstd")):
        import zstandard

        raw = open(path, "rb")
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True,
                                                                            closefd=True))
    if name.endswith(".bz2"):
        return bz2.open(path, "rb")
    if name.endswith(".xz"):
        return lzma.open(path, "rb")
    return open(path, "rb")


try:
    from zstandard import ZstdError as _ZstdError
except ImportError:  # zstandard is a dependency; this keeps the module importable without it
    class _ZstdError(Exception):
        pass


def _jsonl_documents(task: ReadTask) -> Iterator[Document]:
    path, fields = Path(task.path), task.fields
    for line_no, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {line_no}: invalid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {line_no}: expected a JSON object, got {type(record).__name__}")
        text = record.get(fields.text)
        if not isinstance(text, str):
            what = "no field" if fields.text not in record else f"a {type(text).__name__}, not a string, in field"
            raise DataError(f"{path}: line {line_no}: {what} {fields.text!r} (fields: {', '.join(record)}); "
                            f"set the source's text_field")
        published = None if task.publisher is None else _published(
            task.publisher, {c: record.get(c) for c in task.publisher.columns.values()}, path, f"line {line_no}")
        yield Document(f"{task.name}:{line_no}", _id(record.get(fields.id)), _title(record.get(fields.title)), text,
                       published)


def _text_documents(task: ReadTask) -> Iterator[Document]:
    paragraphs: list[str] = []
    first = 0
    for line_no, line in _lines(Path(task.path)):
        line = line.rstrip("\r\n")
        if line.strip():
            if not paragraphs:
                first = line_no
            paragraphs.append(line)
        elif paragraphs:
            yield Document(f"{task.name}:{first}", None, "", "\n".join(paragraphs))
            paragraphs = []
    if paragraphs:
        yield Document(f"{task.name}:{first}", None, "", "\n".join(paragraphs))


def _parquet_documents(task: ReadTask) -> Iterator[Document]:
    import pyarrow.parquet as pq

    path, fields = Path(task.path), task.fields
    stat = path.stat()
    parquet = pq.ParquetFile(path, metadata=_parquet_metadata(str(path), stat.st_size, stat.st_mtime_ns))
    names = parquet.schema_arrow.names
    metadata = list(task.publisher.columns.values()) if task.publisher else []
    columns = [c for c in dict.fromkeys((fields.text, fields.id, fields.title, *metadata)) if c in names]
    row = task.first_row
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=list(task.row_groups), columns=columns):
        values = {c: batch.column(c).to_pylist() for c in columns}
        for i, text in enumerate(values[fields.text]):
            row += 1
            if isinstance(text, bytes):  # a binary column
                try:
                    text = text.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"{path}: row {row}: column {fields.text!r} is not UTF-8 (byte {e.start})") \
                        from None
            if not isinstance(text, str):
                raise DataError(f"{path}: row {row}: column {fields.text!r} is {_describe(text)}, not text")
            ident = values[fields.id][i] if fields.id in values else None
            title = values[fields.title][i] if fields.title in values else None
            published = None if task.publisher is None else _published(
                task.publisher, {c: values[c][i] for c in metadata if c in values}, path, f"row {row}")
            yield Document(f"{task.name}:{row}", _id(ident), _title(title), text, published)


def _published(publisher: Publisher, values: dict, path: Path, where: str) -> dict | None:
    """A document's metadata from its publisher's `values` ({column: value}): the url (a string), the language
    score (a number, or a list's first), the cluster size (a whole number of at least 1; DataError naming the file,
    `where` and the column otherwise); a null or missing value is left out. None when nothing is left."""
    published = {}
    for key, column in publisher.columns.items():
        value = values.get(column)
        if key == "language_score" and isinstance(value, list):
            value = value[0] if value else None
        if value is None:
            continue
        if key == "cluster_size":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DataError(f"{path}: {where}: column {column!r} is {value!r}, not a whole number of at least 1 "
                                f"({publisher.title}'s cluster size; set the source's publisher to none to read the "
                                "text alone)")
        elif key == "language_score" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                          or not math.isfinite(value)):
            continue
        elif key == "url" and not isinstance(value, str):
            continue
        published[key] = value
    return published or None


def _id(value) -> str | None:
    if value is None or value == "":
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _title(value) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _describe(value) -> str:
    return "null" if value is None else f"a {type(value).__name__}"
