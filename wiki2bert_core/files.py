"""File helpers both halves use: crash-safe writes, JSON reads with a one-line error, hashing.

Writes go to a temporary path renamed into place."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import IO, Any, Iterator

from wiki2bert_core.errors import DataError

_RAISE = object()
# the last file a pipeline stage writes into its directory (pipeline/runner.py), which marks it complete; what tells
# a stage directory (and a work directory, which holds them) from others (pretrain/out_dirs.py)
MANIFEST = "_manifest.json"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_fingerprint(path: Path, sample: int = 1 << 20) -> dict:
    """Size, mtime and the sha256 of the first and last `sample` bytes: notices a file replaced at the same path
    without reading all of it (a different dump of the same name differs in size or in its first or last MiB)."""
    with open(path, "rb") as f:
        stat = os.fstat(f.fileno())
        digest = hashlib.sha256(f.read(sample))
        if stat.st_size > sample:
            f.seek(max(sample, stat.st_size - sample))
            digest.update(f.read(sample))
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sample_sha256": digest.hexdigest()}


@contextlib.contextmanager
def atomic_write(path: Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write to `<path>.tmp` and rename over `path` only if the block finishes."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    f = open(tmp, mode, encoding=None if "b" in mode else encoding, newline="" if "b" not in mode else None)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # closing flushes what a full disk did not take: it fails again
            f.close()
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data) -> None:
    with atomic_write(path) as f:
        json.dump(data, f, ensure_ascii=False, indent=2, sort_keys=False)
        f.write("\n")


def read_json(path: Path, default: Any = _RAISE, error: type[Exception] = DataError) -> Any:
    """The JSON document in `path`. A missing, unreadable or invalid file gives `default` when one is passed, else
    raises `error` with one line naming the file."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError: also invalid UTF-8 and invalid JSON
        if default is not _RAISE:
            return default
        raise error(f"{path}: cannot read ({e})") from None


def replace_dir(new: Path, place: Path) -> None:
    """Put the directory `new` at `place` (a sibling path), replacing what is there: the old one is renamed aside to
    `.<name>.old-<pid>` first and removed after, so `place` never holds a mix of both."""
    old = place.with_name(f".{place.name}.old-{os.getpid()}")
    if place.exists() or place.is_symlink():
        os.replace(place, old)
    os.replace(new, place)
    remove_tree(old)


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
