"""Running one stage function on directories a test made, without the runner."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Callable, Iterable

from pipeline.fileio import part_name, write_document
from pipeline.stages import StageContext


def run_stage_function(run: Callable, config, tmp_path: Path, inputs: dict[str, Path], name: str = "out",
                       workers: int = 1, lang: str = "hu") -> tuple[Path, dict]:
    """run(config, ctx) into tmp_path/name; returns (that directory, the counts)."""
    out = tmp_path / name
    out.mkdir()
    ctx = StageContext(lang=lang, lang_dir=tmp_path, out_dir=out, inputs=inputs, cache_dir=tmp_path / "cache",
                       workers=workers, quiet=True, log=logging.getLogger("test"))
    return out, run(config, ctx)


def write_document_parts(directory: Path, documents: Iterable[list[str]], parts: int) -> Path:
    """Documents (lists of sentences) dealt round-robin into part-NNNNN.txt files of the filter format."""
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(directory / part_name(i, ".txt"), "w", encoding="utf-8"))
                 for i in range(parts)]
        for d, sentences in enumerate(documents):
            write_document(files[d % parts], sentences)
    return directory
