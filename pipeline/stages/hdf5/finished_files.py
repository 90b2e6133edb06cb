"""Output files a stage has finished, kept across killed attempts so that the re-run reuses them.

Each file lives at `<root>/<relative path>`, written under a temporary name and renamed into place, and then gets a
sidecar `<relative path>.done.json`: the key of everything that decides its bytes (config, input hashes, library
versions), its size and sha256, and the counts its writer returned. A file is reused only when its sidecar's key
is the current one and the bytes still hash to the recorded sha256; anything else is written again. Finished
files reach the stage's output directory as hard links (a copy across filesystems), so keeping them costs no space.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from wiki2bert_core.files import remove_tree, sha256_file, write_json

SIDECAR = ".done.json"


def file_key(**parts) -> str:
    """The key of a file from what decides its bytes (JSON-serialisable values)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).hexdigest()


class FinishedFiles:
    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, relative: str) -> Path:
        return self.root / relative

    def reusable(self, relative: str, key: str) -> dict | None:
        """The recorded counts of a finished file whose key and bytes match; None if it must be written."""
        path, sidecar = self.path(relative), self.path(relative + SIDECAR)
        try:
            record = json.loads(sidecar.read_text(encoding="utf-8"))
            if record["key"] != key or path.stat().st_size != record["size"] or sha256_file(path) != record["sha256"]:
                return None
            return record["counts"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record(self, relative: str, key: str, counts: dict) -> None:
        """Mark a file that has just been renamed into place as finished."""
        path = self.path(relative)
        write_json(self.path(relative + SIDECAR), {"key": key, "size": path.stat().st_size,
                                                   "sha256": sha256_file(path), "counts": counts})

    def place(self, relative: str, destination: Path) -> None:
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(self.path(relative), destination)
        except OSError:
            shutil.copyfile(self.path(relative), destination)

    def prune(self, keep: set[str]) -> None:
        """Remove every file and sidecar except those of `keep` (files of another config, leftover temp files)."""
        if not self.root.is_dir():
            return
        wanted = keep | {relative + SIDECAR for relative in keep}
        for path in sorted(self.root.rglob("*"), reverse=True):
            relative = str(path.relative_to(self.root))
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            elif relative not in wanted:
                remove_tree(path)
