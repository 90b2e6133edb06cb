"""A generated web-like corpus for the demo and the tests, with the truth about every page written beside it.

`pipeline sample-corpus OUT [--docs N]` writes `OUT/pages/web-00000.jsonl`, ... (or `.parquet`) of {"id", "url",
"title", "text"} records, as FineWeb-2 or HPLT publish crawled pages, from our own text: the sample dump's Hungarian
sentence patterns and word lists (pipeline/tools/sample_dump.py), plain text with links removed. Every `DECK` pages
hold the kinds below in a seeded order, so that any corpus of DECK pages or more has each of them:

    prose           clean prose, 3-8 paragraphs
    boilerplate     prose between a site's header (menus) and footer (copyright, share links); the truth lists
                    those lines
    exact_copy      the text of an earlier prose or boilerplate page, byte for byte (another id and url)
    near_copy       such a text with words replaced until its word 5-gram Jaccard similarity to the original is as
                    close as a word can make it to a level of NEAR_COPY_LEVELS (1.0: the same words, other line
                    breaks and punctuation); the truth has the level and the similarity measured (`jaccard`)
    spam            keyword stuffing: a few commercial phrases, repeated lines, capitals
    keyword_list    search keywords separated by commas and bars, no sentences
    other_language  an English page
    code            JavaScript and CSS with a line of prose
    cookie_notice   cookie and JavaScript notices around a few sentences
    lorem_ipsum     placeholder text
    long_article    one article of at least LONG_ARTICLE_WORDS words (above the filter's max_tokens of 10,000)

Similarity: word 5-gram sets, words the `\\w+` runs of the casefolded text (`word_shingles`, `jaccard`).
`OUT/truth.json` lists each page: id, file (in OUT/pages), line (or Parquet row), kind, words, and copy_of / level /
jaccard / boilerplate_lines where they apply. Pages are generated in blocks of BLOCK_PAGES (copies come from a
bounded pool of the block's recent pages), by `--workers` processes, and written as they come, so memory does not
grow with --docs; the same seed gives the same bytes whatever the workers. An earlier sample in OUT is replaced
whole; a non-empty OUT holding anything else is refused.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import random
import re
from pathlib import Path
from typing import Iterator

from wiki2bert_core.errors import ConfigError
from wiki2bert_core.files import atomic_write, remove_tree
from wiki2bert_core.log import progress
from pipeline.executors.local import LocalExecutor
from pipeline.tools.sample_dump import (ADJECTIVES, NOUNS, REGIONS, TOWNS, WIKI_LINK, _ProseGenerator,
                                        english_sentences, inflect)

NEAR_COPY_LEVELS = (1.0, 0.9, 0.8, 0.7, 0.5, 0.3)
LONG_ARTICLE_WORDS = 15_000
SHINGLE_WORDS = 5
NEAR_COPY_APPROACH = 0.04  # near copies: replace words down to this above the level, then append words
DECK = (["prose"] * 34 + ["boilerplate"] * 16 + ["exact_copy"] * 6 + ["near_copy"] * 2 * len(NEAR_COPY_LEVELS)
        + ["spam"] * 6 + ["keyword_list"] * 5 + ["other_language"] * 6 + ["code"] * 5 + ["cookie_notice"] * 6
        + ["lorem_ipsum"] * 3 + ["long_article"] * 1)  # 100 pages
COPYABLE = ("prose", "boilerplate")
POOL = 64  # recent copyable pages that copies are made of
ROW_GROUP_ROWS = 64  # Parquet output: rows per row group (so that small corpora have several)
BLOCK_PAGES = 10_000  # pages a worker makes at once (a corpus of up to this many pages is one block)
TEXT_BYTES_PER_PAGE = 1971  # UTF-8 bytes of page text per page, on average over blocks of DECK pages (measured)
SAMPLE_PAGE_FILE = re.compile(r"web-\d{5}\.(jsonl|parquet)(\.tmp)?")  # what pages/ of a sample holds

SITES = ["varosi-hirek", "utazas-blog", "kerti-naplo", "helyi-kronika", "muzeumi-lap", "falusi-elet",
         "borvidek-magazin", "termeszetjaro", "regi-kepek", "konyv-ajanlo"]
MENUS = ["Főoldal | Hírek | Sport | Kultúra | Kapcsolat", "Kezdőlap > Blog > Utazás", "Keresés", "Bejelentkezés",
         "Menü", "Rólunk | Szolgáltatások | Galéria | Elérhetőség"]
FOOTERS = ["© 2024 {site} Kft. Minden jog fenntartva.", "Adatvédelmi tájékoztató | Impresszum | Hirdetés",
           "Megosztás: Facebook | Twitter | E-mail", "Hozzászólások (0)", "Címkék: {noun}, {noun}, {noun}",
           "Feliratkozás hírlevélre", "Vissza az oldal tetejére"]
SPAM_PHRASES = ["olcsó telefon", "akciós laptop", "ingyenes szállítás", "kedvezményes ár", "vásároljon most",
                "legjobb ajánlat", "gyors hitel", "online kaszinó", "nyerjen ma", "kattintson ide"]
COOKIE_LINES = ["Ez a weboldal sütiket (cookie-kat) használ a jobb felhasználói élmény érdekében.",
                "Az oldal használatával Ön elfogadja a cookie-k használatát.",
                "Elfogadom | Beállítások | További információ",
                "A weboldal megfelelő működéséhez engedélyezze a JavaScriptet a böngészőjében.",
                "Úgy tűnik, a böngészőjében ki van kapcsolva a JavaScript."]
CODE_LINES = ["function init() {", "  var menu = document.getElementById(\"menu\");",
              "  menu.addEventListener(\"click\", toggle);", "}", ".header { color: #333; margin: 0 auto; }",
              "@media (max-width: 600px) { .nav { display: none; } }", "window.dataLayer = window.dataLayer || [];",
              "if (typeof jQuery !== 'undefined') { $(document).ready(init); }"]
LOREM = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et "
         "dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex "
         "ea commodo consequat. Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu "
         "fugiat nulla pariatur.")


@dataclasses.dataclass
class WebPage:
    id: str
    url: str
    title: str
    text: str
    kind: str
    copy_of: str | None = None  # exact_copy, near_copy: the id of the page copied
    level: float | None = None  # near_copy: the Jaccard level aimed at
    jaccard: float | None = None  # near_copy: the word 5-gram Jaccard similarity to copy_of, measured
    boilerplate_lines: list[str] | None = None  # boilerplate: the header and footer lines added

    def record(self) -> dict:
        return {"id": self.id, "url": self.url, "title": self.title, "text": self.text}

    def truth(self) -> dict:
        extra = {k: v for k, v in (("copy_of", self.copy_of), ("level", self.level), ("jaccard", self.jaccard),
                                   ("boilerplate_lines", self.boilerplate_lines)) if v is not None}
        return {"id": self.id, "kind": self.kind, "words": len(self.text.split()), **extra}


def word_shingles(text: str, n: int = SHINGLE_WORDS) -> set[tuple[str, ...]]:
    """The word n-grams of a text, words the \\w+ runs of the casefolded text (a text of fewer words: one n-gram)."""
    words = re.findall(r"\w+", text.casefold())
    return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


class _PageMaker:
    def __init__(self, seed: int, block: int = 0):
        self.rng = random.Random(f"sample-corpus:{seed}" if block == 0 else f"sample-corpus:{seed}:{block}")
        self.prose = _ProseGenerator(self.rng)
        self.pool: collections.deque[WebPage] = collections.deque(maxlen=POOL)
        self.near_copies = 0

    def sentence(self) -> str:
        return WIKI_LINK.sub(r"\1", self.prose.sentence())

    def paragraphs(self, count: int) -> list[str]:
        return [" ".join(self.sentence() for _ in range(self.rng.randint(2, 5))) for _ in range(count)]

    def topic(self) -> str:
        """Sets the prose generator's topic to a town; returns a page title about it."""
        rng, w = self.rng, self.prose
        town = rng.choice(TOWNS)
        w.topic_name, w.topic_loc, w.region = town[0], town[1], rng.choice(REGIONS)
        w.person = w.person_name()
        noun = rng.choice(NOUNS).rstrip("*")
        return f"{town[2].capitalize()} {noun} – {rng.choice(ADJECTIVES)} {inflect(rng.choice(NOUNS), 'pl')}"

    def page(self, number: int, kind: str) -> WebPage:
        rng = self.rng
        if kind in ("exact_copy", "near_copy") and not self.pool:
            kind = "prose"  # nothing to copy yet
        title = self.topic()
        site = rng.choice(SITES)
        page = WebPage(f"web-{number:06d}", f"https://{site}.hu/{number}", title, "", kind)
        if kind == "prose":
            page.text = "\n".join(self.paragraphs(rng.randint(3, 8)))
        elif kind == "boilerplate":
            header = rng.sample(MENUS, 2)
            footer = [line.format(site=site.replace("-", " ").title(), noun=rng.choice(NOUNS).rstrip("*"))
                      for line in rng.sample(FOOTERS, 3)]
            page.text = "\n".join(header + self.paragraphs(rng.randint(3, 6)) + footer)
            page.boilerplate_lines = header + footer
        elif kind == "exact_copy":
            original = rng.choice(self.pool)
            page.text, page.copy_of, page.title = original.text, original.id, original.title
        elif kind == "near_copy":
            original = rng.choice(self.pool)
            page.level = NEAR_COPY_LEVELS[self.near_copies % len(NEAR_COPY_LEVELS)]
            self.near_copies += 1
            page.text, page.jaccard = self.near_copy(original.text, page.level)
            page.copy_of, page.title = original.id, original.title
        elif kind == "spam":
            phrases = rng.sample(SPAM_PHRASES, 4)
            line = " ".join(p.upper() if rng.random() < 0.3 else p for p in rng.choices(phrases, k=12))
            page.text = "\n".join([line] * rng.randint(3, 6) + [f"{phrases[0].capitalize()}! {phrases[1]}!"] * 3)
        elif kind == "keyword_list":
            words = [inflect(rng.choice(NOUNS), "nom") for _ in range(40)]
            page.text = "\n".join(", ".join(f"{rng.choice(ADJECTIVES)} {word}" for word in words[i:i + 8]) +
                                  " | " + " | ".join(rng.sample(SPAM_PHRASES, 2)) for i in range(0, 40, 8))
        elif kind == "other_language":
            sentences = english_sentences(rng, rng.randint(10, 20))
            page.title = "Travel notes"
            page.text = "\n".join(" ".join(sentences[i:i + 4]) for i in range(0, len(sentences), 4))
        elif kind == "code":
            page.text = "\n".join([self.sentence()] + rng.sample(CODE_LINES, 6) + rng.sample(CODE_LINES, 4))
        elif kind == "cookie_notice":
            page.text = "\n".join(rng.sample(COOKIE_LINES, 3) + [self.sentence(), self.sentence()]
                                  + rng.sample(COOKIE_LINES, 2))
        elif kind == "lorem_ipsum":
            page.text = "\n".join([LOREM] * rng.randint(2, 4))
        elif kind == "long_article":
            paragraphs, words = [], 0
            while words < LONG_ARTICLE_WORDS:
                more = self.paragraphs(10)
                paragraphs += more
                words += sum(len(p.split()) for p in more)
            page.text = "\n".join(paragraphs)
        if kind in COPYABLE:
            self.pool.append(page)
        return page

    def near_copy(self, text: str, level: float) -> tuple[str, float]:
        """`text` edited to a word 5-gram Jaccard similarity near `level`: level 1.0 keeps every word and moves line
        breaks and commas; below it, words are replaced at random places (each replacement removes up to five
        shared 5-grams; one that would fall below the level is undone) until the similarity is within
        NEAR_COPY_APPROACH of the level, then new words are appended on a line of their own
        one at a time (each adds one 5-gram) until it reaches the level, and the nearer of the last two is kept.
        Every line ends in a period, as the original's do, so that the web rules' line rule (a line without
        terminal punctuation is dropped) leaves a copy of a prose page the words it was measured on.
        Returns (the text, its similarity measured)."""
        rng = self.rng
        original = word_shingles(text)
        if level >= 1.0:
            lines = text.replace("\n", " ").replace(",", "").split(". ")
            cut = sorted(rng.sample(range(1, len(lines)), min(len(lines) - 1, 3))) if len(lines) > 1 else []
            edited = ".\n".join(". ".join(lines[a:b]) for a, b in zip([0] + cut, cut + [len(lines)]))
            return edited, jaccard(original, word_shingles(edited))
        lines = [line.split(" ") for line in text.split("\n")]
        places = [(i, j) for i, line in enumerate(lines) for j in range(len(line))]
        rng.shuffle(places)
        similarity = 1.0
        for i, j in places:
            if similarity <= level + NEAR_COPY_APPROACH:
                break
            token = lines[i][j]
            word = re.match(r"\w*", token).group()
            lines[i][j] = inflect(rng.choice(NOUNS), "nom") + token[len(word):]
            replaced = jaccard(original, word_shingles("\n".join(" ".join(line) for line in lines)))
            if replaced < level:  # too far for appended words to come back from: keep the word
                lines[i][j] = token
            else:
                similarity = replaced
        edited = "\n".join(" ".join(line) for line in lines)
        best = (edited, similarity)
        pending: list[str] = []
        appended: list[str] = []
        while similarity > level:
            pending = pending or self.sentence().split(" ")
            appended.append(pending.pop(0))
            candidate = edited + "\n" + " ".join(appended) + "."
            similarity = jaccard(original, word_shingles(candidate))
            best = min((best, (candidate, similarity)), key=lambda c: abs(c[1] - level))
        return best

def _block_pages(task: tuple[int, int, int]) -> list[WebPage]:
    """A worker's task (seed, block, pages): the pages of block number `block` of BLOCK_PAGES pages, each kind once
    per DECK pages in a seeded order. Block 0 is seeded by the seed alone, a later one by (seed, block), and its
    copies are of its own pages."""
    seed, block, count = task
    maker = _PageMaker(seed, block)
    deck: list[str] = []
    pages = []
    for number in range(block * BLOCK_PAGES + 1, block * BLOCK_PAGES + count + 1):
        if not deck:
            deck = list(DECK)
            maker.rng.shuffle(deck)
        page = maker.page(number, deck.pop())
        if page.jaccard is not None:
            page.jaccard = round(page.jaccard, 4)
        pages.append(page)
    return pages


def iter_pages(docs: int, seed: int = 0, workers: int = 1) -> Iterator[WebPage]:
    """The pages of the sample corpus in order, made a block at a time by `workers` processes."""
    tasks = [(seed, block, min(BLOCK_PAGES, docs - start)) for block, start in enumerate(range(0, docs, BLOCK_PAGES))]
    for pages in LocalExecutor(workers).map(_block_pages, tasks):
        yield from pages


def pages_for_mb(mb: float) -> int:
    """The pages of a sample corpus of about `mb` MB of page text (within a few percent from 1 MB up)."""
    return max(1, round(mb * 1e6 / TEXT_BYTES_PER_PAGE))


def write_sample_corpus(out_dir: Path, docs: int = 300, seed: int = 0, files: int = 2, fmt: str = "jsonl",
                        quiet: bool = True, workers: int = 1) -> Path:
    """`pipeline sample-corpus`: the pages in `files` files of consecutive pages (out_dir/pages/web-00000.jsonl or
    .parquet) and out_dir/truth.json, made by `workers` processes (the same bytes whatever their number); returns
    the pages directory (the corpus to read)."""
    out_dir = Path(out_dir)
    pages_dir = out_dir / "pages"
    _remove_earlier_sample(out_dir)
    pages_dir.mkdir(parents=True, exist_ok=True)
    files = max(1, min(files, docs))
    pages = iter_pages(docs, seed, workers)
    header = {"seed": seed, "documents": docs, "format": fmt, "near_copy_levels": list(NEAR_COPY_LEVELS),
              "similarity": f"Jaccard of word {SHINGLE_WORDS}-gram sets, words the \\w+ runs of the casefolded text",
              "kinds": sorted(set(DECK))}
    with progress(docs, "sample-corpus", "pages", quiet=quiet) as bar, \
            atomic_write(out_dir / "truth.json") as truth:
        truth.write(json.dumps(header, ensure_ascii=False)[:-1] + ', "pages": [\n')
        separator = ""
        for k in range(files):
            name = f"web-{k:05d}.{fmt}"
            with _page_writer(pages_dir / name, fmt) as write:
                for line in range(1, docs * (k + 1) // files - docs * k // files + 1):
                    page = next(pages)
                    write(page.record())
                    truth.write(separator + json.dumps({**page.truth(), "file": name, "line": line},
                                                       ensure_ascii=False))
                    separator = ",\n"
                    bar.update(1)
        truth.write("\n]}\n")
    return pages_dir


def _remove_earlier_sample(out_dir: Path) -> None:
    """Remove an earlier sample in `out_dir` (pages/web-*.jsonl or .parquet, truth.json, their .tmp files), so that
    none of its pages outlives it beside the new truth.json; ConfigError for a directory that holds anything else
    (nothing of the user's is removed)."""
    if not out_dir.is_dir():
        if out_dir.exists():
            raise ConfigError(f"{out_dir}: not a directory")
        return
    pages_dir = out_dir / "pages"
    foreign = [entry for entry in out_dir.iterdir() if entry.name not in ("pages", "truth.json", "truth.json.tmp")
               or (entry.name == "pages" and not entry.is_dir())]
    if not foreign and pages_dir.is_dir():
        foreign = [page for page in pages_dir.iterdir() if not SAMPLE_PAGE_FILE.fullmatch(page.name)]
    if foreign:
        raise ConfigError(f"{out_dir}: holds {foreign[0].relative_to(out_dir)}, not only an earlier sample-corpus "
                          "output (pages/, truth.json); give an empty or new directory")
    remove_tree(pages_dir)
    for name in ("truth.json", "truth.json.tmp"):
        (out_dir / name).unlink(missing_ok=True)


@contextlib.contextmanager
def _page_writer(path: Path, fmt: str) -> Iterator:
    """write(record) into a JSON Lines file, or a Parquet file of ROW_GROUP_ROWS-row groups; renamed into place."""
    if fmt == "jsonl":
        with atomic_write(path) as f:
            yield lambda record: f.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(key, pa.string()) for key in ("id", "url", "title", "text")])
    rows: list[dict] = []
    with atomic_write(path, "wb") as f, pq.ParquetWriter(f, schema) as writer:
        def write(record: dict) -> None:
            rows.append(record)
            if len(rows) == ROW_GROUP_ROWS:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                rows.clear()

        yield write
        if rows:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
