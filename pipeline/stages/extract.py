"""Stage `extract`: a MediaWiki XML dump -> `part-00000.jsonl`, ... one article per line {"id", "title", "url", "text"}.

wikiextractor is the wikitext-to-text engine (its `Extractor.clean_text`), with the templates of the dump's own
template namespace (siteinfo key 10, e.g. "Sablon" for hu) collected first, so they expand as wikiextractor expands
them. We read the dump ourselves instead of running wikiextractor's `process_dump`, because that one re-reads the
whole dump to find templates, funnels every page through one parsing process and queues, cannot split a multistream
dump by its index, and keeps disambiguation pages and text-only redirects:
- multistream dump + index: the index gives the byte offset of every bz2 stream (100 pages each); each task is one
  stream, decompressed by the worker that owns it, so workers parse in parallel and never read the same bytes.
  The template pass decompresses only the streams whose index titles are in the template namespace.
- single-stream `.bz2` or plain `.xml` (UTF-8 or UTF-16): read sequentially; batches of pages go to the workers.
Cheap checks run before the expensive cleaning: namespace 0 only, no redirects (the `<redirect>` element or a
localized `#REDIRECT` text), no disambiguation pages (per-language templates, `__DISAMBIG__`); pages that clean to
nothing are counted as empty. Templates live in shared memory (wikiextractor's `template_blob`), so a worker's memory
does not grow with the template namespace. Output is in dump order, parts of `articles_per_part` articles, so the
bytes do not depend on the number of workers.
"""
from __future__ import annotations

import bz2
import codecs
import collections
import contextlib
import dataclasses
import html
import io
import json
import re
from pathlib import Path
from typing import Callable, Iterable, Iterator

from wikiextractor import template_blob
from wikiextractor.extract import (_DEFAULT_IGNORED_TAG_PATTERNS, Extractor, MagicWords, ignoreTag,
                                   resolve_template_page)

from core.errors import ConfigError
from core.errors import PipelineError
from pipeline.fileio import part_name
from core.log import progress
from pipeline.parallel import Executor
from pipeline.stages import Stage, StageContext

TEMPLATE_NS = 10
PAGES_PER_BATCH = 200  # sequential dumps: pages per worker task
BATCHES_PER_WINDOW = 8  # sequential dumps: tasks in flight per worker, bounds memory while the reader runs ahead
READ_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class ExtractConfig:
    redirect_words: list[str] = dataclasses.field(default_factory=lambda: ["REDIRECT"])
    disambiguation_templates: list[str] = dataclasses.field(
        default_factory=lambda: ["disambiguation", "disambig", "dab"])
    expand_templates: bool = True
    keep_sections: bool = True
    articles_per_part: int = 2000

    def __post_init__(self):
        if self.articles_per_part < 1:
            raise ConfigError(f"extract.articles_per_part: must be at least 1, got {self.articles_per_part}")


@dataclasses.dataclass(frozen=True)
class SiteInfo:
    namespaces: dict[int, str]  # key -> localized name ("" for the main namespace)
    urlbase: str  # e.g. https://hu.wikipedia.org/wiki; article urls are urlbase?curid=ID, as wikiextractor writes them

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
class _Setup:
    """Everything a worker needs, sent with each task (no state inherited from the parent)."""
    path: str
    encoding: str
    site: SiteInfo
    templates: tuple | None  # shared-memory names of the compacted templates; None: do not expand
    template_redirects: tuple | None
    redirect_re: str
    disambiguation_re: str
    keep_sections: bool
    dump_date: tuple[str, str, str]  # YYYY, MM, DD that {{CURRENTYEAR}} & co. expand to


@dataclasses.dataclass
class _Result:
    lines: list[str]  # JSON lines of the articles, in dump order
    counts: collections.Counter


def run(config: ExtractConfig, ctx: StageContext) -> dict:
    dump, index = read_download_manifest(ctx.inputs["download"])
    dump_file = DumpFile(dump, index)
    site = dump_file.siteinfo()
    if not site.urlbase:
        site = dataclasses.replace(site, urlbase=f"https://{ctx.lang}.wikipedia.org/wiki")
    ctx.log.info("extract: %s (%s), template namespace %r", dump.name, dump_file.layout, site.template_prefix[:-1])
    redirect_re = _redirect_pattern(config.redirect_words)
    counts: collections.Counter = collections.Counter()
    with contextlib.ExitStack() as stack:
        template_names = redirect_names = None
        if config.expand_templates:
            templates, redirects, counts["templates"] = dump_file.collect_templates(redirect_re, ctx.executor,
                                                                                    ctx.quiet)
            _, template_names = stack.enter_context(template_blob.compact_blobs(*templates.finish()))
            _, redirect_names = stack.enter_context(template_blob.compact_blobs(*redirects.finish()))
        stack.callback(_release_templates)
        setup = _Setup(path=str(dump), encoding=dump_file.encoding, site=site, templates=template_names,
                       template_redirects=redirect_names,
                       redirect_re=redirect_re,
                       disambiguation_re=_disambiguation_pattern(config.disambiguation_templates),
                       keep_sections=config.keep_sections, dump_date=_dump_date(dump.name))
        with _PartWriter(ctx.out_dir, config.articles_per_part) as writer:
            for result in dump_file.extract(setup, ctx.executor, ctx.quiet):
                for line in result.lines:
                    writer.write(line)
                counts.update(result.counts)
    if counts["articles"] == 0:
        raise PipelineError(f"{dump}: no articles found ({counts['pages']} pages, none in namespace 0 with text)")
    return {
        "pages": counts["pages"],
        "articles": counts["articles"],
        "templates": counts["templates"],
        "parts": writer.parts,
        "skipped": {reason: counts[f"skipped_{reason}"]
                    for reason in ("namespace", "redirect", "disambiguation", "empty")},
        "articles_with_template_errors": counts["template_errors"],
    }


def read_download_manifest(download_dir: Path) -> tuple[Path, Path | None]:
    manifest = download_dir / "dump.json"
    try:
        info = json.loads(manifest.read_text(encoding="utf-8"))
        dump = download_dir / info["dump"]
        index = download_dir / info["index"] if info.get("index") else None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PipelineError(f"{manifest}: cannot read the dump's name ({e})") from None
    for path in (dump, index):
        if path is not None and not path.is_file():
            raise PipelineError(f"{path}: listed in {manifest} but missing")
    return dump, index


class DumpFile:
    """A dump in one of the layouts: multistream .bz2 with its index, single-stream .bz2, or plain XML."""

    def __init__(self, path: Path, index: Path | None):
        self.path = path
        self.compressed = path.name.endswith(".bz2")
        self.index = index if self.compressed else None
        self.layout = "multistream" if self.index else ("bz2" if self.compressed else "xml")
        self.encoding = "utf-8"
        # multistream, filled by siteinfo() from the index:
        self.streams: list[tuple[int, int]] = []  # (start, end) byte ranges of the page streams
        self.stream_pages: list[int] = []  # pages in each stream
        self.template_streams: list[int] = []  # streams holding a page of the template namespace

    # --- siteinfo and templates ---

    def siteinfo(self) -> SiteInfo:
        """The dump's <siteinfo>; for a multistream dump also reads the index (which needs the template prefix)."""
        if self.index is None:
            with self._open_sequential() as (lines, where):
                return _read_siteinfo(lines, where)
        first = self._first_offset()
        head = _decompress_stream(self.path, 0, first, _read_range(str(self.path), 0, first))
        self.encoding, bom = _sniff_encoding(head)
        lines = iter(_decode(head[bom:], self.encoding, self.path, 0).split("\n"))
        site = _read_siteinfo(lines, lambda: f"{self.path}: siteinfo stream at byte 0")
        self._read_index(site.template_prefix)
        return site

    def collect_templates(self, redirect_re: str, executor: Executor, quiet: bool):
        """Templates and template redirects of the dump (wikiextractor's streaming blob builders), and how many."""
        templates = template_blob.StreamingTemplateBlobBuilder()
        redirects = template_blob.StreamingTemplateBlobBuilder()
        count = 0
        if self.streams:
            tasks = [(str(self.path), self.encoding, redirect_re, self.streams[i]) for i in self.template_streams]
            with progress(len(tasks), "extract: templates", "streams", quiet=quiet) as bar:
                for found in executor.map(_templates_in_stream, tasks):
                    count += _add_templates(found, templates, redirects)
                    bar.update(1)
        else:
            with self._open_sequential() as (lines, where), \
                    progress(None, "extract: templates", "pages", quiet=quiet) as bar:
                parser = _PageParser(where)
                _read_siteinfo(lines, where)
                redirect = re.compile(redirect_re, re.IGNORECASE)
                batch = []
                for page in parser.pages(lines):
                    bar.update(1)
                    if page.ns == TEMPLATE_NS:
                        batch.append(_template_entry(page, redirect))
                parser.check_closed()
                count += _add_templates(batch, templates, redirects)
        return templates, redirects, count

    # --- articles ---

    def extract(self, setup: _Setup, executor: Executor, quiet: bool) -> Iterator[_Result]:
        if self.streams:
            last = len(self.streams) - 1
            tasks = [(setup, start, end, self.stream_pages[i], i == last)
                     for i, (start, end) in enumerate(self.streams)]
            with progress(sum(self.stream_pages), "extract", "pages", quiet=quiet) as bar:
                for result in executor.map(_extract_stream, tasks):
                    bar.update(result.counts["pages"])
                    yield result
            return
        with self._open_sequential() as (lines, where), progress(None, "extract", "pages", quiet=quiet) as bar:
            parser = _PageParser(where)
            _read_siteinfo(lines, where)
            rules = _Rules(setup)
            for window in _windows(self._batches(parser.pages(lines), rules), BATCHES_PER_WINDOW * executor.workers):
                for result, skipped in executor.map(_extract_batch, window):
                    result.counts.update(skipped)
                    bar.update(result.counts["pages"])
                    yield result
            parser.check_closed()

    def _batches(self, pages: Iterable[RawPage], rules: "_Rules") -> Iterator[tuple]:
        """(setup, candidate pages, counts of the pages skipped before cleaning) per PAGES_PER_BATCH pages."""
        batch, skipped = [], collections.Counter()
        for page in pages:
            skipped["pages"] += 1
            reason = rules.skip_reason(page)
            if reason:
                skipped[f"skipped_{reason}"] += 1
            else:
                batch.append(page)
            if skipped["pages"] == PAGES_PER_BATCH:
                yield rules.setup, batch, skipped
                batch, skipped = [], collections.Counter()
        if skipped:
            yield rules.setup, batch, skipped

    # --- reading ---

    def _index_lines(self) -> Iterator[tuple[int, int, str]]:
        """(line number, stream offset, title) of the index's `offset:page_id:title` lines."""
        try:
            with bz2.open(self.index, "rt", encoding="utf-8") as f:
                for line_no, line in enumerate(f, 1):
                    offset, _, rest = line.partition(":")
                    page_id, _, title = rest.partition(":")
                    if not offset.isdigit() or not page_id.isdigit():
                        raise PipelineError(f"{self.index}: line {line_no}: expected offset:page_id:title, "
                                            f"got {line[:80]!r}")
                    yield line_no, int(offset), title
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise PipelineError(f"{self.index}: unreadable index ({e})") from None

    def _first_offset(self) -> int:
        for _, offset, _ in self._index_lines():
            return offset
        raise PipelineError(f"{self.index}: empty index")

    def _read_index(self, template_prefix: str) -> None:
        """Streams from the index: byte ranges (the last runs to the end of the file, taking in the closing stream),
        pages in each, and which hold templates."""
        size = self.path.stat().st_size
        offsets: list[int] = []
        pages: list[int] = []
        for line_no, offset, title in self._index_lines():
            if not offsets or offset != offsets[-1]:
                if offsets and offset < offsets[-1]:
                    raise PipelineError(f"{self.index}: line {line_no}: stream offsets go backwards")
                offsets.append(offset)
                pages.append(0)
            pages[-1] += 1
            if title.startswith(template_prefix) and (not self.template_streams or
                                                      self.template_streams[-1] != len(offsets) - 1):
                self.template_streams.append(len(offsets) - 1)
        if offsets[-1] >= size:
            raise PipelineError(f"{self.path}: the index lists a stream at byte {offsets[-1]:,} but the file has "
                                f"{size:,} bytes: truncated download?")
        self.streams = list(zip(offsets, offsets[1:] + [size]))
        self.stream_pages = pages

    @contextlib.contextmanager
    def _open_sequential(self):
        """(lines without terminators, where() for error messages) of a single-stream .bz2 or plain XML file."""
        with open(self.path, "rb") as raw:
            def where() -> str:
                return f"{self.path}: near {'compressed ' if self.compressed else ''}byte {raw.tell():,}"

            binary = bz2.BZ2File(raw) if self.compressed else io.BufferedReader(raw)
            with _read_errors(where):
                self.encoding, bom = _sniff_encoding(binary.peek(4)[:4])
            text = io.TextIOWrapper(binary, encoding=self.encoding, newline="\n")
            if bom:
                text.read(1)
            yield _split_lines(_read_chunks(text, where)), where


# --- worker tasks (module-level so they pickle) ---

def _templates_in_stream(task) -> list[tuple[str, str, str]]:
    path, encoding, redirect_re, (start, end) = task
    parser = _PageParser(_stream_where(path, start))
    text = _decode(_decompress_stream(path, start, end, _read_range(path, start, end)), encoding, path, start)
    redirect = re.compile(redirect_re, re.IGNORECASE)
    return [_template_entry(page, redirect) for page in parser.pages(text.split("\n")) if page.ns == TEMPLATE_NS]


def _extract_stream(task) -> _Result:
    setup, start, end, expected_pages, last = task
    where = _stream_where(setup.path, start)
    data = _decompress_stream(setup.path, start, end, _read_range(setup.path, start, end))
    parser = _PageParser(where)
    rules = _Rules(setup)
    result = _Result([], collections.Counter())
    for page in parser.pages(_decode(data, setup.encoding, setup.path, start).split("\n")):
        result.counts["pages"] += 1
        reason = rules.skip_reason(page)
        if reason:
            result.counts[f"skipped_{reason}"] += 1
        else:
            rules.clean(page, result)
    if result.counts["pages"] != expected_pages:
        raise PipelineError(f"{where()}: holds {result.counts['pages']} pages but the index lists {expected_pages}: "
                            f"does the index belong to this dump?")
    if last:
        parser.check_closed()
    return result


def _extract_batch(task) -> tuple[_Result, collections.Counter]:
    setup, pages, skipped = task
    rules = _Rules(setup)
    result = _Result([], collections.Counter())
    for page in pages:
        rules.clean(page, result)
    return result, skipped


class _Rules:
    """Skip checks and the cleaning of one page, for one worker."""

    def __init__(self, setup: _Setup):
        self.setup = setup
        self.redirect = re.compile(setup.redirect_re, re.IGNORECASE)
        self.disambiguation = re.compile(setup.disambiguation_re, re.IGNORECASE)
        self.templates = _attached(setup.templates)
        self.template_redirects = _attached(setup.template_redirects)
        self.known_namespaces = {name for name in setup.site.namespaces.values() if name} | {"Template"}
        self.ignored_tags = list(_DEFAULT_IGNORED_TAG_PATTERNS) + [ignoreTag("a")]  # as wikiextractor without --links
        year, month, day = setup.dump_date
        self.clock = {"currentyear": year, "currentmonth": month, "currentday": day,
                      "currenthour": "00", "currenttime": "00:00:00"}

    def skip_reason(self, page: RawPage) -> str | None:
        if page.ns != 0:
            return "namespace"
        if page.redirect or self.redirect.match(page.text):
            return "redirect"
        if self.disambiguation.search(page.text):
            return "disambiguation"
        return None

    def clean(self, page: RawPage, result: _Result) -> None:
        title = html.unescape(page.title)
        extractor = Extractor(page.id, "", self.setup.site.urlbase, title, [page.text],
                              templates=self.templates, redirects=self.template_redirects,
                              templatePrefix=self.setup.site.template_prefix, knownNamespaces=self.known_namespaces,
                              ignored_tag_patterns=self.ignored_tags, keepSections=self.setup.keep_sections)
        extractor.magicWords = _FrozenClock(self.clock)
        paragraphs = extractor.clean_text(page.text, expand_templates=self.templates is not None, html_safe=False)
        text = "\n".join(p.strip() for p in paragraphs if p.strip())
        if extractor.template_title_errs or extractor.recursion_exceeded_1_errs or \
                extractor.recursion_exceeded_2_errs or extractor.recursion_exceeded_3_errs or \
                extractor.template_loop_errs or extractor.malformed_expr_errs:
            result.counts["template_errors"] += 1
        if not text:
            result.counts["skipped_empty"] += 1
            return
        result.counts["articles"] += 1
        result.lines.append(json.dumps({"id": page.id, "title": title, "url": extractor.url, "text": text},
                                       ensure_ascii=False))


class _FrozenClock(MagicWords):
    """{{CURRENTYEAR}} & co. at the dump's date, so the output does not depend on the day it is extracted."""

    def __init__(self, fixed: dict[str, str]):
        super().__init__()
        self.values.update(fixed)

    def __setitem__(self, name, value):
        if name not in ("currentyear", "currentmonth", "currentday", "currenthour", "currenttime"):
            self.values[name] = value


_ATTACHED: dict[tuple, template_blob.CompactedTemplates] = {}


def _attached(names: tuple | None):
    """This process's view of the shared templates, attached once per process."""
    if names is None:
        return None
    if names not in _ATTACHED:
        _ATTACHED[names] = template_blob.attach(names)
    return _ATTACHED[names]


def _release_templates() -> None:
    while _ATTACHED:
        _ATTACHED.popitem()[1].close()


# --- XML reading ---

class _PageParser:
    """Pages of a MediaWiki XML export, read line by line (the dumps put each element on its own line and escape
    `<` inside <text>), several times faster than an XML parser; a stream that ends inside a page is an error."""

    def __init__(self, where: Callable[[], str]):
        self.where = where
        self.closed = False  # saw </mediawiki>
        self.last_title: str | None = None

    def pages(self, lines: Iterable[str]) -> Iterator[RawPage]:
        title = page_id = None
        ns = -1
        redirect = in_page = in_text = False
        text: list[str] = []
        for line in lines:
            if in_text:
                end = line.find("</text>")
                if end < 0:
                    text.append(line)
                else:
                    text.append(line[:end])
                    in_text = False
                continue
            s = line.lstrip()
            if not s.startswith("<"):
                continue
            if s.startswith("<page>"):
                title = page_id = None
                ns, redirect, in_page, text = -1, False, True, []
            elif s.startswith("<title>"):
                title = s[7:s.find("</title>")]
            elif s.startswith("<ns>"):
                try:
                    ns = int(s[4:s.find("</ns>")])
                except ValueError:
                    raise PipelineError(f"{self.where()}: bad namespace {s[:40]!r} after page {self.last_title!r}"
                                        ) from None
            elif s.startswith("<id>") and page_id is None:
                page_id = s[4:s.find("</id>")]
            elif s.startswith("<redirect"):
                redirect = True
            elif s.startswith("<text"):
                close = s.find(">")
                if s[close - 1] != "/":
                    rest = s[close + 1:]
                    end = rest.find("</text>")
                    text.append(rest if end < 0 else rest[:end])
                    in_text = end < 0
            elif s.startswith("</page>"):
                if title is None or page_id is None:
                    raise PipelineError(f"{self.where()}: a <page> without <title> or <id> after {self.last_title!r}")
                in_page = False
                self.last_title = title
                yield RawPage(title, ns if ns >= 0 else self._guess_ns(title), page_id, redirect, "\n".join(text))
            elif s.startswith("</mediawiki>"):
                self.closed = True
        if in_page:
            raise PipelineError(f"{self.where()}: ends inside page {title!r} (id {page_id}): truncated or corrupt dump")

    def check_closed(self) -> None:
        if not self.closed:
            raise PipelineError(f"{self.where()}: ends before </mediawiki> (after page {self.last_title!r}): "
                                f"truncated dump")

    @staticmethod
    def _guess_ns(title: str) -> int:
        return 0 if ":" not in title else -1  # old exports without <ns>: only plain titles count as articles


_LINK_TARGET_RE = re.compile(r"\[\[([^\]|#]+)")
_NAMESPACE_RE = re.compile(r'<namespace key="(-?\d+)"[^>]*?(?:/>|>(.*?)</namespace>)')


def _read_siteinfo(lines: Iterator[str], where: Callable[[], str]) -> SiteInfo:
    namespaces: dict[int, str] = {}
    urlbase = ""
    for line in lines:
        s = line.strip()
        if s.startswith("<base>"):
            base = html.unescape(s[6:s.find("</base>")])
            urlbase = base[:base.rfind("/")]
        elif s.startswith("<namespace "):
            m = _NAMESPACE_RE.match(s)
            if m:
                namespaces[int(m.group(1))] = html.unescape(m.group(2) or "")
        elif s.startswith("</siteinfo>"):
            return SiteInfo(namespaces, urlbase)
        elif s.startswith("<page>"):
            break
    raise PipelineError(f"{where()}: no <siteinfo> with namespaces before the first page: not a MediaWiki dump?")


def _template_entry(page: RawPage, redirect: re.Pattern) -> tuple[str, str, str] | None:
    """(title, 'template' or 'redirect', body or target) as wikiextractor stores templates; None if empty.
    Redirects are recognized by our localized words too (wikiextractor knows only a few, not #ÁTIRÁNYÍTÁS)."""
    if page.redirect or redirect.match(page.text):
        target = _LINK_TARGET_RE.search(page.text)
        if target:
            return page.title, "redirect", target.group(1).strip().replace("_", " ")
    resolved = resolve_template_page(page.title, [page.text])
    return None if resolved is None else (page.title, *resolved)


def _add_templates(entries, templates, redirects) -> int:
    count = 0
    for entry in entries:
        if entry is not None:
            title, kind, value = entry
            (redirects if kind == "redirect" else templates).add(title, value)
            count += 1
    return count


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
            raise PipelineError(f"{path}: corrupt bz2 stream at byte {offset:,} ({e})") from None
        if not decompressor.eof:
            raise PipelineError(f"{path}: bz2 stream at byte {offset:,} is cut short (ends at byte {end:,}): "
                                f"truncated or corrupt dump")
        offset = end - len(decompressor.unused_data)
        data = decompressor.unused_data
    return b"".join(out)


def _decode(data: bytes, encoding: str, path, start: int) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise PipelineError(f"{path}: stream at byte {start:,}: not {encoding} (byte {e.start:,} of the stream)") \
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


def _read_chunks(text: io.TextIOBase, where: Callable[[], str]) -> Iterator[str]:
    while True:
        with _read_errors(where):
            chunk = text.read(READ_CHUNK)
        if not chunk:
            return
        yield chunk


@contextlib.contextmanager
def _read_errors(where: Callable[[], str]):
    """Decompression and decoding errors of a sequential read as one PipelineError line."""
    try:
        yield
    except EOFError:
        raise PipelineError(f"{where()}: the compressed data ends before the end of its bz2 stream: "
                            f"truncated dump") from None
    except OSError as e:
        raise PipelineError(f"{where()}: corrupt compressed data ({e})") from None
    except UnicodeDecodeError as e:
        raise PipelineError(f"{where()}: not {e.encoding} text") from None


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


def _windows(items: Iterable, size: int) -> Iterator[list]:
    window = []
    for item in items:
        window.append(item)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def _redirect_pattern(words: list[str]) -> str:
    return r"\s*#\s*(?:%s)" % "|".join(re.escape(w) for w in words or ["REDIRECT"])


def _disambiguation_pattern(templates: list[str]) -> str:
    names = [re.escape(t.strip()).replace(r"\ ", "[ _]+") for t in templates if t.strip()]
    pattern = "__DISAMBIG__"
    if names:
        pattern += r"|\{\{\s*(?:%s)\s*(?:\||\}\})" % "|".join(names)
    return pattern


def _dump_date(name: str) -> tuple[str, str, str]:
    m = re.search(r"-(\d{4})(\d\d)(\d\d)-", name)
    return m.groups() if m else ("2000", "01", "01")


class _PartWriter:
    """part-00000.jsonl, part-00001.jsonl, ... of `per_part` articles each."""

    def __init__(self, out_dir: Path, per_part: int):
        self.out_dir, self.per_part = out_dir, per_part
        self.parts = 0
        self.in_part = 0
        self.file = None

    def write(self, line: str) -> None:
        if self.file is None or self.in_part == self.per_part:
            self.close()
            self.file = open(self.out_dir / part_name(self.parts, ".jsonl"), "w", encoding="utf-8", newline="\n")
            self.parts += 1
            self.in_part = 0
        self.file.write(line)
        self.file.write("\n")
        self.in_part += 1

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


STAGE = Stage("extract", ExtractConfig, run, inputs=("download",), tools=("wikiextractor",))
