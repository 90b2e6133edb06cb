"""Stage `extract`: a MediaWiki XML dump -> `part-00000.jsonl`, ... one article per line {"id", "title", "url", "text"}.

wikiextractor is the wikitext-to-text engine (its `Extractor.clean_text`), with the templates of the dump's own
template namespace (siteinfo key 10, e.g. "Sablon" for hu) collected first, so they expand as wikiextractor expands
them. We read the dump ourselves (pipeline/stages/extract/dump.py) instead of running wikiextractor's `process_dump`, because that
one re-reads the whole dump to find templates, funnels every page through one parsing process and queues, cannot split
a multistream dump by its index, and keeps disambiguation pages and text-only redirects:
- multistream dump + index: each task is one bz2 stream (100 pages), decompressed by the worker that owns it, so
  workers parse in parallel and never read the same bytes. The template pass reads only the streams whose index
  titles are in the template namespace.
- single-stream `.bz2`, `.xz`, `.gz` or plain `.xml` (UTF-8 or UTF-16): read sequentially; batches of pages go to
  the workers.
Cheap checks run before the expensive cleaning: namespace 0 only, no redirects (the `<redirect>` element or a
localized `#REDIRECT` text), no disambiguation pages (per-language templates, `__DISAMBIG__`); pages that clean to
nothing are counted as empty. A special token spelled out in an article ("[MASK]") is spaced out ("[ MASK ]"), so
that a transformers tokenizer does not read it as the special token (wiki2bert_core/wordpiece.py). Templates live in files
mapped into memory (wikiextractor's `template_blob` layout, in the stage's scratch directory:
pipeline/stages/extract/template_files.py), so a worker's memory does not grow with the template namespace and a killed run leaves
no shared-memory segment behind. Output is in dump order, parts of
`articles_per_part` articles, so the bytes do not depend on the number of workers.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import html
import json
import re
import secrets
from pathlib import Path
from typing import Iterable, Iterator

from wikiextractor import template_blob
from wikiextractor.extract import (_DEFAULT_IGNORED_TAG_PATTERNS, Extractor, MagicWords, ignoreTag,
                                   resolve_template_page)

from wiki2bert_core.config import check_minimum
from wiki2bert_core.errors import DataError
from wiki2bert_core.files import read_json
from wiki2bert_core.log import progress
from wiki2bert_core.wordpiece import neutralize_special_tokens
from pipeline.stages.extract.cleanup import article_lines
from pipeline.stages.extract.dump import TEMPLATE_NS, DumpFile, RawPage, SiteInfo, check_dump_language, read_stream
from pipeline.text_files import PartWriter
from pipeline.executors.local import Executor
from pipeline.stages.extract.template_files import BLOBS, MappedTemplates, write_templates
from pipeline.stages import Stage, StageContext, StageCounts

PAGES_PER_BATCH = 200  # sequential dumps: pages per worker task
BATCHES_PER_WINDOW = 8  # sequential dumps: tasks in flight per worker, bounds memory while the reader runs ahead


@dataclasses.dataclass(frozen=True)
class ExtractConfig:
    # localized #REDIRECT magic words (any case); pages with a <redirect> element are skipped too
    redirect_words: list[str] = dataclasses.field(default_factory=lambda: ["REDIRECT"])
    # {{name}} or {{name|...}} marks a disambiguation page (as does __DISAMBIG__)
    disambiguation_templates: list[str] = dataclasses.field(
        default_factory=lambda: ["disambiguation", "disambig", "dab"])
    # expand templates from the dump's template namespace (wikiextractor); false drops them
    expand_templates: bool = True
    # keep section headings as lines ("Története."; without the period in scripts written without spaces: "歴史")
    keep_sections: bool = True
    articles_per_part: int = 2000  # articles per part-NNNNN.jsonl (the parts downstream stages parallelize over)
    # a dump that ends after a complete page but lacks </mediawiki> (some tools write them so): true keeps its pages
    # and records where it stops (counts "truncated"); false: an error (a cut download looks the same)
    allow_truncated: bool = False

    def __post_init__(self):
        check_minimum(self, 1, "articles_per_part")


@dataclasses.dataclass(frozen=True)
class _WorkerSettings:
    """Everything a worker needs, sent with each task (no state inherited from the parent)."""
    path: str
    encoding: str
    site: SiteInfo
    templates: tuple | None  # the mapped template files (template_files.write_templates); None: do not expand
    template_redirects: tuple | None
    redirect_re: str
    disambiguation_re: str
    keep_sections: bool
    allow_truncated: bool
    dump_date: tuple[str, str, str]  # YYYY, MM, DD that {{CURRENTYEAR}} & co. expand to


@dataclasses.dataclass
class _ExtractedArticles:
    lines: list[str]  # JSON lines of the articles, in dump order
    counts: collections.Counter
    truncated: list[str] = dataclasses.field(default_factory=list)  # where a dump without </mediawiki> stops


def run(config: ExtractConfig, ctx: StageContext) -> StageCounts:
    dump, index = read_download_manifest(ctx.inputs["download"])
    dump_file = DumpFile(dump, index)
    site = dump_file.site
    check_dump_language(site, ctx.lang, dump)
    if not site.urlbase:
        site = dataclasses.replace(site, urlbase=f"https://{ctx.lang}.wikipedia.org/wiki")
    ctx.log.info("extract: %s (%s), template namespace %r", dump.name, dump_file.layout, site.template_prefix[:-1])
    redirect_re = _redirect_pattern(config.redirect_words)
    dump_date, dump_date_from = _dump_date(dump, ctx.inputs["download"], dump_file, ctx)
    ctx.log.info("extract: {{CURRENTYEAR}} & co. at %s (from the %s)", "-".join(dump_date), dump_date_from)
    counts: collections.Counter = collections.Counter()
    truncated: list[str] = []
    with contextlib.ExitStack() as stack:
        template_names = redirect_names = None
        if config.expand_templates:
            templates, redirects, counts["templates"] = _collect_templates(dump_file, redirect_re, ctx.executor,
                                                                           ctx.quiet, config.allow_truncated)
            run_id = secrets.token_hex(8)  # a long-lived (Dask) worker must not reuse an earlier run's mapping
            template_names = write_templates(templates, ctx.scratch(), f"templates-{run_id}")
            redirect_names = write_templates(redirects, ctx.scratch(), f"template_redirects-{run_id}")
        stack.callback(_release_templates)
        settings = _WorkerSettings(path=str(dump), encoding=dump_file.encoding, site=site, templates=template_names,
                                   template_redirects=redirect_names,
                                   redirect_re=redirect_re,
                                   disambiguation_re=_disambiguation_pattern(config.disambiguation_templates),
                                   keep_sections=config.keep_sections, allow_truncated=config.allow_truncated,
                                   dump_date=dump_date)
        with PartWriter(ctx.out_dir, config.articles_per_part) as writer:
            for extracted in _extract(dump_file, settings, ctx.executor, ctx.quiet):
                for line in extracted.lines:
                    writer.write(line)
                counts.update(extracted.counts)
                truncated += extracted.truncated
    if truncated:
        ctx.log.warning("extract: %s; its complete pages are kept (extract.allow_truncated)", truncated[0])
    if counts["articles"] == 0:
        raise DataError(f"{dump}: no articles found ({counts['pages']} pages, none in namespace 0 with text)")
    return StageCounts({
        "pages": counts["pages"],
        "articles": counts["articles"],
        "templates": counts["templates"],
        "parts": writer.parts,
        "skipped": {reason: counts[f"skipped_{reason}"]
                    for reason in ("namespace", "redirect", "disambiguation", "empty")},
        "articles_with_template_errors": counts["template_errors"],
        "dump_date": "-".join(dump_date),
        "dump_date_from": dump_date_from,
        **({"truncated": truncated[0]} if truncated else {}),
    })


def read_download_manifest(download_dir: Path) -> tuple[Path, Path | None]:
    manifest = download_dir / "dump.json"
    try:
        info = json.loads(manifest.read_text(encoding="utf-8"))
        dump = download_dir / info["dump"]
        index = download_dir / info["index"] if info.get("index") else None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{manifest}: cannot read the dump's name ({e})") from None
    for path in (dump, index):
        if path is not None and not path.is_file():
            raise DataError(f"{path}: listed in {manifest} but missing")
    return dump, index


def _collect_templates(dump_file: DumpFile, redirect_re: str, executor: Executor, quiet: bool,
                       allow_truncated: bool):
    """Templates and template redirects of the dump (wikiextractor's streaming blob builders), and how many."""
    templates = template_blob.StreamingTemplateBlobBuilder()
    redirects = template_blob.StreamingTemplateBlobBuilder()
    count = 0
    if dump_file.multistream:
        tasks = [(str(dump_file.path), dump_file.encoding, redirect_re, stream)
                 for stream in dump_file.streams if stream.has_templates]
        with progress(len(tasks), "extract: templates", "streams", quiet=quiet) as bar:
            for found in executor.map(_templates_in_stream, tasks):
                count += _add_templates(found, templates, redirects)
                bar.update(1)
    else:
        with progress(None, "extract: templates", "pages", quiet=quiet) as bar:
            redirect = re.compile(redirect_re, re.IGNORECASE)
            batch = []
            for page in dump_file.pages(on_truncated=(lambda where: None) if allow_truncated else None):
                bar.update(1)
                if page.ns == TEMPLATE_NS:
                    batch.append(_template_entry(page, redirect))
            count += _add_templates(batch, templates, redirects)
    return templates, redirects, count


def _extract(dump_file: DumpFile, settings: _WorkerSettings, executor: Executor,
             quiet: bool) -> Iterator[_ExtractedArticles]:
    """The articles of the dump, in dump order, cleaned by the executor's workers."""
    if dump_file.multistream:
        tasks = [(settings, stream) for stream in dump_file.streams]
        with progress(sum(s.pages for s in dump_file.streams), "extract", "pages", quiet=quiet) as bar:
            for extracted in executor.map(_extract_stream, tasks):
                bar.update(extracted.counts["pages"])
                yield extracted
        return
    with progress(None, "extract", "pages", quiet=quiet) as bar:
        cleaner = _PageCleaner(settings)
        truncated: list[str] = []
        pages = dump_file.pages(on_truncated=truncated.append if settings.allow_truncated else None)
        for window in _windows(_batches(pages, cleaner), BATCHES_PER_WINDOW * executor.workers):
            for extracted, skipped in executor.map(_extract_batch, window):
                extracted.counts.update(skipped)
                bar.update(extracted.counts["pages"])
                yield extracted
        yield _ExtractedArticles([], collections.Counter(), truncated)


def _batches(pages: Iterable[RawPage], cleaner: "_PageCleaner") -> Iterator[tuple]:
    """(settings, candidate pages, counts of the pages skipped before cleaning) per PAGES_PER_BATCH pages."""
    batch, skipped = [], collections.Counter()
    for page in pages:
        skipped["pages"] += 1
        reason = cleaner.skip_reason(page)
        if reason:
            skipped[f"skipped_{reason}"] += 1
        else:
            batch.append(page)
        if skipped["pages"] == PAGES_PER_BATCH:
            yield cleaner.settings, batch, skipped
            batch, skipped = [], collections.Counter()
    if skipped:
        yield cleaner.settings, batch, skipped


# --- worker tasks (module-level so they pickle) ---

def _templates_in_stream(task) -> list[tuple[str, str, str]]:
    path, encoding, redirect_re, stream = task
    redirect = re.compile(redirect_re, re.IGNORECASE)
    return [_template_entry(page, redirect) for page in read_stream(path, encoding, stream, check_pages=False)
            if page.ns == TEMPLATE_NS]


def _extract_stream(task) -> _ExtractedArticles:
    settings, stream = task
    cleaner = _PageCleaner(settings)
    extracted = _ExtractedArticles([], collections.Counter())
    on_truncated = extracted.truncated.append if settings.allow_truncated else None
    for page in read_stream(settings.path, settings.encoding, stream, on_truncated=on_truncated):
        extracted.counts["pages"] += 1
        reason = cleaner.skip_reason(page)
        if reason:
            extracted.counts[f"skipped_{reason}"] += 1
        else:
            cleaner.clean(page, extracted)
    return extracted


def _extract_batch(task) -> tuple[_ExtractedArticles, collections.Counter]:
    settings, pages, skipped = task
    cleaner = _PageCleaner(settings)
    extracted = _ExtractedArticles([], collections.Counter())
    for page in pages:
        cleaner.clean(page, extracted)
    return extracted, skipped


class _PageCleaner:
    """Skip checks and the cleaning of one page, for one worker."""

    def __init__(self, settings: _WorkerSettings):
        self.settings = settings
        self.redirect = re.compile(settings.redirect_re, re.IGNORECASE)
        self.disambiguation = re.compile(settings.disambiguation_re, re.IGNORECASE)
        self.templates = _attached(settings.templates)
        self.template_redirects = _attached(settings.template_redirects)
        self.known_namespaces = {name for name in settings.site.namespaces.values() if name} | {"Template"}
        self.ignored_tags = list(_DEFAULT_IGNORED_TAG_PATTERNS) + [ignoreTag("a")]  # as wikiextractor without --links
        year, month, day = settings.dump_date
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

    def clean(self, page: RawPage, extracted: _ExtractedArticles) -> None:
        title = html.unescape(page.title)
        extractor = Extractor(page.id, "", self.settings.site.urlbase, title, [page.text],
                              templates=self.templates, redirects=self.template_redirects,
                              templatePrefix=self.settings.site.template_prefix, knownNamespaces=self.known_namespaces,
                              ignored_tag_patterns=self.ignored_tags, keepSections=self.settings.keep_sections)
        extractor.magicWords = _FrozenClock(self.clock)
        paragraphs = extractor.clean_text(page.text, mark_headers=True, expand_templates=self.templates is not None,
                                          html_safe=False)
        text = neutralize_special_tokens("\n".join(article_lines(paragraphs)))
        if extractor.template_title_errs or extractor.recursion_exceeded_1_errs or \
                extractor.recursion_exceeded_2_errs or extractor.recursion_exceeded_3_errs or \
                extractor.template_loop_errs or extractor.malformed_expr_errs:
            extracted.counts["template_errors"] += 1
        if not text:
            extracted.counts["skipped_empty"] += 1
            return
        extracted.counts["articles"] += 1
        extracted.lines.append(json.dumps({"id": page.id, "title": title, "url": extractor.url, "text": text},
                                       ensure_ascii=False))


class _FrozenClock(MagicWords):
    """{{CURRENTYEAR}} & co. at the dump's date, so the output does not depend on the day it is extracted."""

    def __init__(self, fixed: dict[str, str]):
        super().__init__()
        self.values.update(fixed)

    def __setitem__(self, name, value):
        if name not in ("currentyear", "currentmonth", "currentday", "currenthour", "currenttime"):
            self.values[name] = value


_ATTACHED: dict[tuple, MappedTemplates] = {}


def _attached(names: tuple | None):
    """This process's view of the mapped templates, mapped once per process; a long-lived (Dask) worker drops the
    views of earlier runs, whose files the runner has removed."""
    if names is None:
        return None
    if names not in _ATTACHED:
        for stale in [old for old in _ATTACHED if not Path(f"{old[0]}.{BLOBS[0]}").exists()]:
            _ATTACHED.pop(stale).close()
        _ATTACHED[names] = MappedTemplates(names)
    return _ATTACHED[names].templates


def _release_templates() -> None:
    while _ATTACHED:
        _ATTACHED.popitem()[1].close()


_LINK_TARGET_RE = re.compile(r"\[\[([^\]|#]+)")


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


def _dump_date(dump: Path, download_dir: Path, dump_file: DumpFile, ctx: StageContext
               ) -> tuple[tuple[str, str, str], str]:
    """The dump's date (YYYY, MM, DD) and where it was found: the run date in the dump's file name or in the URL it
    was downloaded from (Wikimedia's `<wiki>/<YYYYMMDD>/`), else the newest revision timestamp in the dump."""
    source = str(read_json(download_dir / "dump.json").get("source") or "")
    for text, where in ((dump.name, "file name"), (source, "download URL")):
        if m := re.search(r"(?:^|[-/_.])((?:19|20)\d\d)(\d\d)(\d\d)(?=[-/_.]|$)", text):
            return m.groups(), where
    date = dump_file.newest_revision_date(ctx.executor)
    if date is None:
        raise DataError(f"{dump}: no date in its name and no <timestamp> in it: cannot date "
                            "{{CURRENTYEAR}} & co.")
    return date, "newest revision timestamp"


STAGE = Stage("extract", ExtractConfig, run, inputs=("download",), tools=("wikiextractor",))
