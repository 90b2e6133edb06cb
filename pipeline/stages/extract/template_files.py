"""The dump's templates as files mapped into memory, for extract's workers.

Each worker maps the same three files (wikiextractor's `template_blob` layout: records, titles, content), so the
pages are shared through the page cache, as with shared memory, and a worker's memory does not grow with the
template namespace. Unlike /dev/shm segments, the files live in the stage's scratch directory, which the runner
empties before and after the stage: a killed extract leaves nothing behind that the next run does not remove.
"""
from __future__ import annotations

import mmap
from pathlib import Path

from wikiextractor.template_blob import CompactedTemplates, StreamingTemplateBlobBuilder

BLOBS = ("records", "titles", "content")


def write_templates(builder: StreamingTemplateBlobBuilder, directory: Path, name: str) -> tuple[str, int]:
    """Write the builder's blobs as <directory>/<name>.{records,titles,content}; returns what attach() takes."""
    directory.mkdir(parents=True, exist_ok=True)
    records, titles, content = builder.finish()
    for blob, data in zip(BLOBS, (records, titles, content)):
        (directory / f"{name}.{blob}").write_bytes(data)
    return str(directory / name), len(records)


class MappedTemplates:
    """A read-only CompactedTemplates view over the mapped files; close() unmaps them."""

    def __init__(self, names: tuple[str, int]):
        base, records_len = names
        self._maps = []
        views = []
        for blob in BLOBS:
            with open(f"{base}.{blob}", "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if f.seek(0, 2) else None
            if mapped is not None:
                self._maps.append(mapped)
            views.append(memoryview(mapped if mapped is not None else b""))
        self.templates = CompactedTemplates(*views, records_len=records_len)

    def close(self) -> None:
        self.templates.close()  # releases its views of the maps first
        while self._maps:
            self._maps.pop().close()
