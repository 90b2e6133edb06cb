"""Read a MediaWiki XML dump: its layout, encoding, <siteinfo> and stream table, and its pages.

Layouts: a multistream `.bz2` with its index (the index gives the byte range of every bz2 stream, 100 pages each, so
streams can be read independently by workers), a single-stream `.bz2`, `.xz` or `.gz`, or plain `.xml` (UTF-8 or
UTF-16), read sequentially (streaming: memory does not grow with the dump). `DumpFile(path, index)` reads everything it knows about the dump in its constructor; its methods and
`read_stream` only read pages.
"""
from __future__ import annotations

import bz2
import codecs
import contextlib
import dataclasses
import gzip
import html
import io
import lzma
import re
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator

from wiki2bert_core.errors import ConfigError, DataError

TEMPLATE_NS = 10
READ_CHUNK = 1 << 20
_TIMESTAMP_RE = re.compile(r"<timestamp>(\d{4})-(\d\d)-(\d\d)T")
# suffix -> (name, a streaming reader over a binary file object)
COMPRESSIONS = {".bz2": ("bz2", bz2.BZ2File), ".xz": ("xz", lzma.LZMAFile),
                ".gz": ("gzip", lambda raw: gzip.GzipFile(fileobj=raw))}
BZ2_CHECK_AHEAD = 4 << 20  # a bz2 block is at most 900 kB of text: its CRC check comes within this many bytes
BZ2_STREAM_START = re.compile(rb"BZh[1-9]1AY&SY")  # a bz2 stream's header and the magic of its first block
BZ2_END_BYTES = 4 << 20  # bz2_end_problem reads this much of the end of a file (a page stream is ~100-500 kB)
CLOSING_TAG = "</mediawiki>"
INDEX_OFFSETS_CHECKED = 64  # stream offsets of the index checked against the dump (evenly spread, and the last)


@dataclasses.dataclass(frozen=True)
class SiteInfo:
    namespaces: dict[int, str]  # key -> localized name ("" for the main namespace)
    urlbase: str  # e.g. https://hu.wikipedia.org/wiki; article urls are urlbase?curid=ID, as wikiextractor writes them
    # the language codes the dump says it is in: <mediawiki xml:lang="hu">, and the wiki of <dbname>huwiki</dbname>
    # (simplewiki's xml:lang is en; zh_min_nanwiki is zh-min-nan)
    languages: tuple[str, ...] = ()

    @property
    def template_prefix(self) -> str:
        return self.namespaces.get(TEMPLATE_NS, "Template") + ":"


@dataclasses.dataclass(frozen=True)
class RawPage:
    title: str  # as in the XML, entities not decoded (wikiextractor's template keys are these)
    ns: int
    id: str
    redirect: bool  # has a <redirect> element
    text: str  # wikitext, XML entities not decoded (wikiextractor decodes them while cleaning)


@dataclasses.dataclass(frozen=True)
class Stream:
    """One page stream of a multistream dump, as its index lists it."""
    start: int  # byte range in the dump; the last stream runs to the end of the file, taking in the closing stream
    end: int
    pages: int  # pages the index lists in it
    has_templates: bool  # holds a page of the template namespace
    last: bool


class DumpFile:
    """A dump in one of the layouts: multistream .bz2 with its index, single-stream .bz2, or plain XML.

    The constructor reads the <siteinfo> (`site`), the text encoding and, for a multistream dump, the index
    (`streams`; empty for the sequential layouts)."""

    def __init__(self, path: Path, index: Path | None):
        self.path = path
        self.compression = COMPRESSIONS.get(path.suffix.lower(), (None, None))[0]
        self.compressed = self.compression is not None
        self.index = index if self.compression == "bz2" else None
        self.layout = "multistream" if self.index else (self.compression or "xml")
        if self.index is None:
            with self._open_sequential() as (lines, where):
                self.site = _read_siteinfo(lines, where)
            self.streams: list[Stream] = []
        else:
            first = self._first_offset()
            self._check_stream_starts([first])
            head = _decompress_stream(self.path, 0, first, _read_range(str(self.path), 0, first))
            self.encoding, bom = _sniff_encoding(head)
            lines = iter(_decode(head[bom:], self.encoding, self.path, 0).split("\n"))
            self.site = _read_siteinfo(lines, lambda: f"{self.path}: siteinfo stream at byte 0")
            self.streams = self._read_index(self.site.template_prefix)

    @property
    def multistream(self) -> bool:
        return bool(self.streams)

    def pages(self, on_truncated: Callable[[str], None] | None = None) -> Iterator[RawPage]:
        """The pages of a sequential (single-stream compressed or plain XML) dump, in order; a dump that does not
        end with </mediawiki> is an error once its last page is read, or, with `on_truncated`, is passed to it as
        where the dump stops."""
        with self._open_sequential() as (lines, where):
            parser = _PageParser(where)
            _read_siteinfo(lines, where)
            yield from parser.pages(lines)
            parser.check_closed(on_truncated)

    def newest_revision_date(self, executor) -> tuple[str, str, str] | None:
        """(YYYY, MM, DD) of the newest <timestamp> in the dump (a full read: for dumps whose name carries no date),
        or None when it has none. A multistream dump is read a stream per task on the executor."""
        if self.multistream:
            tasks = [(str(self.path), self.encoding, stream) for stream in self.streams]
            return max((d for d in executor.map(_newest_date_in_stream, tasks) if d is not None), default=None)
        with self._open_sequential() as (lines, _):
            return max((m.groups() for line in lines if (m := _TIMESTAMP_RE.search(line))), default=None)

    def _index_lines(self) -> Iterator[tuple[int, int, str]]:
        """(line number, stream offset, title) of the index's `offset:page_id:title` lines."""
        try:
            with bz2.open(self.index, "rt", encoding="utf-8") as f:
                for line_no, line in enumerate(f, 1):
                    offset, _, rest = line.partition(":")
                    page_id, _, title = rest.partition(":")
                    if not offset.isdigit() or not page_id.isdigit():
                        raise DataError(f"{self.index}: line {line_no}: expected offset:page_id:title, "
                                            f"got {line[:80]!r}")
                    yield line_no, int(offset), title
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise DataError(f"{self.index}: unreadable index ({e})") from None

    def _first_offset(self) -> int:
        for _, offset, _ in self._index_lines():
            return offset
        raise DataError(f"{self.index}: empty index")

    def _read_index(self, template_prefix: str) -> list[Stream]:
        """The page streams the index lists: byte ranges, pages in each, and which hold templates."""
        size = self.path.stat().st_size
        offsets: list[int] = []
        pages: list[int] = []
        template_streams: set[int] = set()
        for line_no, offset, title in self._index_lines():
            if not offsets or offset != offsets[-1]:
                if offsets and offset < offsets[-1]:
                    raise DataError(f"{self.index}: line {line_no}: stream offsets go backwards")
                offsets.append(offset)
                pages.append(0)
            pages[-1] += 1
            if title.startswith(template_prefix):
                template_streams.add(len(offsets) - 1)
        if offsets[-1] >= size:
            if (problem := bz2_end_problem(self.path, unknown=f"no bz2 stream starts in its last {BZ2_END_BYTES:,} "
                                                             "bytes")) is None:
                raise DataError(f"{self.index}: lists a bz2 stream at byte {offsets[-1]:,}, but {self.path} ends "
                                f"complete at {size:,} bytes: the index of another dump? (use the index of the same "
                                "dump run)")
            raise DataError(f"{self.path}: the index lists a stream at byte {offsets[-1]:,} but the file has "
                            f"{size:,} bytes and {problem}: truncated download?")
        self._check_stream_starts(offsets[::max(1, len(offsets) // INDEX_OFFSETS_CHECKED)] + offsets[-1:])
        ends = offsets[1:] + [size]
        return [Stream(start, end, count, i in template_streams, i == len(offsets) - 1)
                for i, (start, end, count) in enumerate(zip(offsets, ends, pages))]

    def _check_stream_starts(self, offsets: list[int]) -> None:
        """Each offset, listed by the index as a stream's, must start a bz2 stream of the dump (else the index is
        another dump's, whose streams lie elsewhere)."""
        with open(self.path, "rb") as f:
            for offset in offsets:
                f.seek(offset)
                if not BZ2_STREAM_START.fullmatch(f.read(10)):
                    raise DataError(f"{self.index}: lists a bz2 stream at byte {offset:,} of {self.path}, which has "
                                    "none there: the index of another dump? (use the index of the same dump run)")

    @contextlib.contextmanager
    def _open_sequential(self):
        """(lines without terminators, where() for error messages) of a single-stream .bz2 or plain XML file;
        sets `encoding` from the file's first bytes."""
        with open(self.path, "rb") as raw:
            def where() -> str:
                return f"{self.path}: near {'compressed ' if self.compressed else ''}byte {raw.tell():,}"

            def damage() -> str | None:  # for a decoding error: garbage from damaged bz2 data, or really not text?
                return _bz2_damage(self.path, raw.tell() + BZ2_CHECK_AHEAD) if self.compression == "bz2" else None

            binary = COMPRESSIONS[self.path.suffix.lower()][1](raw) if self.compressed else io.BufferedReader(raw)
            with _read_errors(where, damage, self.compression):
                self.encoding, bom = _sniff_encoding(binary.peek(4)[:4])
            text = io.TextIOWrapper(binary, encoding=self.encoding, newline="\n")
            if bom:
                text.read(1)
            yield _split_lines(_read_chunks(text, where, damage, self.compression)), where


def bz2_end_problem(path: Path, xml: bool = True, unknown: str | None = None) -> str | None:
    """Why a bz2 file does not end complete: it ends inside a bz2 stream, or (`xml`) the text of its last complete
    streams does not end with </mediawiki>; None when it ends complete; `unknown` when no stream starts in its last
    BZ2_END_BYTES (one stream over the whole file: only a full read can tell). Reads at most the last BZ2_END_BYTES
    of the file, and decompresses the streams that start there (from the last one back, to the first that is one)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - BZ2_END_BYTES))
        tail = f.read()
    base = size - len(tail)
    for start in reversed([m.start() for m in BZ2_STREAM_START.finditer(tail)]):
        text, data = [], tail[start:]
        try:
            while data:
                decompressor = bz2.BZ2Decompressor()
                text.append(decompressor.decompress(data))
                if not decompressor.eof:
                    return f"ends inside the bz2 stream that starts at byte {base + start:,} of {size:,}: cut short"
                data = decompressor.unused_data
        except (OSError, ValueError):  # those bytes inside compressed data, not a stream start
            continue
        if xml and not _ends_with_closing_tag(b"".join(text)):
            return f"its last bz2 stream (at byte {base + start:,}) does not end with {CLOSING_TAG}: cut short"
        return None
    return unknown


def _ends_with_closing_tag(text: bytes) -> bool:
    end = text.rstrip(b" \t\r\n\x00")
    return any(end.endswith(CLOSING_TAG.encode(codec).rstrip(b"\x00")) for codec in ("utf-8", "utf-16-le", "utf-16-be"))


def _newest_date_in_stream(task) -> tuple[str, str, str] | None:
    path, encoding, stream = task
    data = _decompress_stream(path, stream.start, stream.end, _read_range(path, stream.start, stream.end))
    return max((m.groups() for m in _TIMESTAMP_RE.finditer(_decode(data, encoding, path, stream.start))), default=None)


def read_stream(path: str, encoding: str, stream: Stream, check_pages: bool = True,
                on_truncated: Callable[[str], None] | None = None) -> Iterator[RawPage]:
    """The pages of one stream of a multistream dump (decompressed here, so a worker reads only its own bytes).
    check_pages: the stream must hold as many pages as the index lists, and the last one must close the dump (or,
    with `on_truncated`, pass where the dump stops to it)."""
    where = _stream_where(path, stream.start)
    data = _decompress_stream(path, stream.start, stream.end, _read_range(path, stream.start, stream.end))
    parser = _PageParser(where)
    count = 0
    for page in parser.pages(_decode(data, encoding, path, stream.start).split("\n")):
        count += 1
        yield page
    if not check_pages:
        return
    if count != stream.pages:
        raise DataError(f"{where()}: holds {count} pages but the index lists {stream.pages}: "
                            f"does the index belong to this dump?")
    if stream.last:
        parser.check_closed(on_truncated)


class _PageParser:
    """Pages of a MediaWiki XML export, read line by line (the dumps put each element on its own line and escape
    `<` inside <text>), several times faster than an XML parser. Malformed XML is an error naming the page: a stream
    that ends inside a page, a raw `<` inside <text> (a <text> never closed would swallow the next page), a <page>
    inside a page (a missing </page> would drop one)."""

    def __init__(self, where: Callable[[], str]):
        self.where = where
        self.closed = False  # saw </mediawiki>
        self.last_title: str | None = None

    def pages(self, lines: Iterable[str]) -> Iterator[RawPage]:
        title = page_id = None
        ns = -1
        redirect = in_page = in_text = False
        unfinished = None  # a <text ...> tag that does not end on its line: malformed, unless the input ends there
        text: list[str] = []
        for line in lines:
            if in_text:
                end = line.find("</text>")
                if line.find("<") != end:
                    self._unclosed_text(title, page_id, line)
                if end < 0:
                    text.append(line)
                else:
                    text.append(line[:end])
                    in_text = False
                continue
            if unfinished is not None:
                self._unclosed_text(title, page_id, unfinished)
            s = line.lstrip()
            if not s.startswith("<"):
                continue
            if s.startswith("<page>"):
                if in_page:
                    raise DataError(f"{self.where()}: page {title!r} (id {page_id}) has no </page> before the "
                                        "next <page>: malformed XML")
                title = page_id = None
                ns, redirect, in_page, text = -1, False, True, []
            elif s.startswith("<title>"):
                title = s[7:s.find("</title>")]
            elif s.startswith("<ns>"):
                try:
                    ns = int(s[4:s.find("</ns>")])
                except ValueError:
                    raise DataError(f"{self.where()}: bad namespace {s[:40]!r} after page {self.last_title!r}"
                                        ) from None
            elif s.startswith("<id>") and page_id is None:
                page_id = s[4:s.find("</id>")]
            elif s.startswith("<redirect"):
                redirect = True
            elif s.startswith("<text"):
                close = s.find(">")
                if close < 0:
                    unfinished = s
                elif s[close - 1] != "/":
                    rest = s[close + 1:]
                    end = rest.find("</text>")
                    if rest.find("<") != end:
                        self._unclosed_text(title, page_id, rest)
                    text.append(rest if end < 0 else rest[:end])
                    in_text = end < 0
            elif s.startswith("</page>"):
                if title is None or page_id is None:
                    raise DataError(f"{self.where()}: a <page> without <title> or <id> after {self.last_title!r}")
                in_page = False
                self.last_title = title
                yield RawPage(title, ns if ns >= 0 else self._guess_ns(title), page_id, redirect, "\n".join(text))
            elif s.startswith("</mediawiki>"):
                self.closed = True
        if in_page:
            raise DataError(f"{self.where()}: ends inside page {title!r} (id {page_id}): truncated or corrupt dump")

    def _unclosed_text(self, title: str | None, page_id: str | None, line: str) -> None:
        raise DataError(f"{self.where()}: page {title!r} (id {page_id}): raw markup inside <text> "
                            f"({line.strip()[:40]!r}): a </text> is missing or '<' is not escaped: malformed XML")

    def check_closed(self, on_truncated: Callable[[str], None] | None = None) -> None:
        if self.closed:
            return
        if on_truncated is None:
            raise DataError(f"{self.where()}: ends before </mediawiki> (after page {self.last_title!r}): "
                                f"truncated dump (extract.allow_truncated: true keeps its pages)")
        on_truncated(f"{self.where()}: ends before </mediawiki>, after page {self.last_title!r}")

    @staticmethod
    def _guess_ns(title: str) -> int:
        return 0 if ":" not in title else -1  # old exports without <ns>: only plain titles count as articles


_NAMESPACE_RE = re.compile(r'<namespace key="(-?\d+)"[^>]*?(?:/>|>(.*?)</namespace>)')
_XML_LANG_RE = re.compile(r'\bxml:lang="([^"]+)"')
_DBNAME_RE = re.compile(r"<dbname>([a-z0-9_]+)wiki</dbname>")


def check_dump_language(site: SiteInfo, lang: str, path: Path) -> None:
    """ConfigError when the dump's siteinfo names languages (`SiteInfo.languages`) and `lang` is not one of them."""
    if site.languages and lang not in site.languages:
        raise ConfigError(f"{path}: a dump of language {' / '.join(dict.fromkeys(site.languages))} (its siteinfo), "
                          f"given for --lang {lang}: pass each language its own dump (--dump LANG=PATH)")


def _read_siteinfo(lines: Iterator[str], where: Callable[[], str]) -> SiteInfo:
    namespaces: dict[int, str] = {}
    urlbase = ""
    languages: list[str] = []
    for line in lines:
        s = line.strip()
        if s.startswith("<mediawiki") and (m := _XML_LANG_RE.search(s)):
            languages.append(m.group(1).lower())
        elif s.startswith("<dbname>") and (m := _DBNAME_RE.match(s)):
            languages.append(m.group(1).replace("_", "-"))
        elif s.startswith("<base>"):
            base = html.unescape(s[6:s.find("</base>")])
            urlbase = base[:base.rfind("/")]
        elif s.startswith("<namespace "):
            m = _NAMESPACE_RE.match(s)
            if m:
                namespaces[int(m.group(1))] = html.unescape(m.group(2) or "")
        elif s.startswith("</siteinfo>"):
            return SiteInfo(namespaces, urlbase, tuple(languages))
        elif s.startswith("<page>"):
            break
    raise DataError(f"{where()}: no <siteinfo> with namespaces before the first page: not a MediaWiki dump?")


def _read_range(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def _decompress_stream(path, start: int, end: int, data: bytes) -> bytes:
    """The bz2 streams in data (one page stream, plus the closing stream at the end of the file)."""
    out = []
    offset = start
    while data:
        decompressor = bz2.BZ2Decompressor()
        try:
            out.append(decompressor.decompress(data))
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: corrupt bz2 stream at byte {offset:,} ({e})") from None
        if not decompressor.eof:
            raise DataError(f"{path}: bz2 stream at byte {offset:,} is cut short (ends at byte {end:,}): "
                                f"truncated or corrupt dump")
        offset = end - len(decompressor.unused_data)
        data = decompressor.unused_data
    return b"".join(out)


def _decode(data: bytes, encoding: str, path, start: int) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: stream at byte {start:,}: not {encoding} (byte {e.start:,} of the stream)") \
            from None


def _sniff_encoding(head: bytes) -> tuple[str, int]:
    """(codec, BOM length) of XML that starts with `head`."""
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8", 3
    if head.startswith(codecs.BOM_UTF16_LE):
        return "utf-16-le", 2
    if head.startswith(codecs.BOM_UTF16_BE):
        return "utf-16-be", 2
    if head.startswith(b"<\x00"):
        return "utf-16-le", 0
    if head.startswith(b"\x00<"):
        return "utf-16-be", 0
    return "utf-8", 0


def _read_chunks(text: io.TextIOBase, where: Callable[[], str], damage: Callable[[], str | None],
                 compression: str | None) -> Iterator[str]:
    while True:
        with _read_errors(where, damage, compression):
            chunk = text.read(READ_CHUNK)
        if not chunk:
            return
        yield chunk


@contextlib.contextmanager
def _read_errors(where: Callable[[], str], damage: Callable[[], str | None] = lambda: None,
                 compression: str | None = "bz2"):
    """Decompression and decoding errors of a sequential read as one DataError line. bzip2 checks a block's CRC
    only at its end, after handing out its bytes, so damaged data often first shows as undecodable text: `damage()`
    then tells which it is."""
    try:
        yield
    except EOFError:
        raise DataError(f"{where()}: the compressed data ends before the end of its {compression} stream: "
                            f"truncated dump") from None
    except (OSError, lzma.LZMAError, zlib.error) as e:
        raise DataError(f"{where()}: corrupt compressed data ({e})") from None
    except UnicodeDecodeError as e:
        found = damage()
        raise DataError(found or f"{where()}: not {e.encoding} text") from None


def _bz2_damage(path: Path, until: int) -> str | None:
    """Where the bz2 data of `path` is damaged, read up to byte `until`; None if it decompresses cleanly."""
    decompressor = bz2.BZ2Decompressor()
    position = 0
    with open(path, "rb") as f:
        while position < until and (data := f.read(READ_CHUNK)):
            while data:
                try:
                    decompressor.decompress(data, max_length=0)
                    while not decompressor.eof and not decompressor.needs_input:
                        decompressor.decompress(b"", max_length=READ_CHUNK)
                except OSError as e:
                    return (f"{path}: corrupt bz2 data in compressed bytes {position:,}..{position + len(data):,} "
                            f"({e}): damaged file, download it again")
                data = decompressor.unused_data if decompressor.eof else b""
                if decompressor.eof:
                    decompressor = bz2.BZ2Decompressor()
            position = f.tell()
    return None


def _split_lines(chunks: Iterable[str]) -> Iterator[str]:
    rest = ""
    for chunk in chunks:
        lines = (rest + chunk).split("\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def _stream_where(path: str, start: int) -> Callable[[], str]:
    return lambda: f"{path}: stream at byte {start:,}"
