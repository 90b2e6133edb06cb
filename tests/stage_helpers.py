"""Running one stage function on directories a test made, without the runner."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Iterable

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
    files = [open(directory / f"part-{i:05d}.txt", "w", encoding="utf-8") for i in range(parts)]
    for d, sentences in enumerate(documents):
        files[d % parts].write("\n".join(sentences) + "\n\n")
    for f in files:
        f.close()
    return directory
