"""Writes a small Japanese and a Chinese dump from the texts of tests/unspaced_text.py (prose and garbage of our own
writing), for the before/after table of docs/pipeline.md ("Languages without spaces"): no real jawiki or zhwiki
dump can be fetched here.

Usage: .venv/bin/python bench/unspaced_dump.py OUT_DIR
       then: pipeline run --lang ja --dump OUT_DIR/jawiki-sample.xml.bz2 --workdir W --to filter (and zh)
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from pipeline.tools.sample_dump import Page, write_multistream  # noqa: E402
from unspaced_text import GARBAGE_JA, GARBAGE_ZH, JA, ZH, unspaced  # noqa: E402

SPACED = ("English",)  # garbage documents written with spaces as they are


def pages(documents: dict[str, list[str]], first_id: int, prose: bool) -> list[Page]:
    """One page per document: prose as one paragraph, lists and tables one line per paragraph."""
    return [Page(id=first_id + i, title=title, ns=0, kind="article",
                 text=("" if prose else "\n\n").join(sentences if title in SPACED else unspaced(sentences)))
            for i, (title, sentences) in enumerate(documents.items())]


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for wiki, prose, garbage in (("jawiki", JA, GARBAGE_JA), ("zhwiki", ZH, GARBAGE_ZH)):
        dump = out_dir / f"{wiki}-sample.xml.bz2"
        write_multistream(pages(prose, 1, True) + pages(garbage, 1 + len(prose), False), dump,
                          out_dir / f"{wiki}-sample-index.txt.bz2")
        print(dump)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
