"""Dumps in the layouts other than the multistream one `pipeline sample-dump` writes, for the tests: one bz2
stream, plain XML (UTF-8 or UTF-16 with a BOM), and a multistream dump cut in its last stream. Pages come from
pipeline/tools/sample_dump.py (looked up on the module, so a test may patch `sample.page_xml`)."""
from __future__ import annotations

import bz2
from pathlib import Path

from pipeline.tools import sample_dump as sample


def dump_xml(pages: list[sample.Page]) -> str:
    return sample.siteinfo_xml() + "".join(sample.page_xml(p) for p in pages) + sample.CLOSING


def write_bz2(pages: list[sample.Page], path: Path) -> None:
    """The whole dump as one bz2 stream (like enwiki's non-multistream pages-articles)."""
    path.write_bytes(bz2.compress(dump_xml(pages).encode("utf-8"), 9))


def write_xml(pages: list[sample.Page], path: Path, encoding: str = "utf-8") -> None:
    """Plain XML; encoding "utf-16" writes a byte order mark."""
    text = dump_xml(pages)
    if encoding.lower().startswith("utf-16"):
        text = '<?xml version="1.0" encoding="UTF-16"?>\n' + text
    path.write_bytes(text.encode(encoding))


def write_truncated_multistream(pages: list[sample.Page], dump: Path, index: Path) -> int:
    """A multistream dump whose last page stream is cut in the middle (a broken download), with its full index.
    Returns the byte offset of the stream that is cut."""
    sample.write_multistream(pages, dump, index)
    offsets = sorted({int(line.split(":", 1)[0]) for line in bz2.decompress(index.read_bytes()).decode().splitlines()})
    with open(dump, "r+b") as f:
        f.truncate((offsets[-1] + dump.stat().st_size) // 2)
    return offsets[-1]
