"""Resumable, verified HTTP downloads for the download stage.

GETs with retries and exponential backoff, a `.part` file continued with Range/If-Range requests, and size and
sha1/md5 checks."""
from __future__ import annotations

import dataclasses
import hashlib
import http.client
import logging
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, TypeVar

from wiki2bert_core.errors import DataError
from wiki2bert_core.files import read_json, write_json
from wiki2bert_core.log import progress

T = TypeVar("T")
USER_AGENT = "wiki2bert-pipeline/0.1 (BERT pretraining data from Wikipedia dumps; Python-urllib)"
NETWORK_ERRORS = (OSError, http.client.HTTPException)  # refused/reset connections, timeouts, bad responses


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    name: str
    url: str
    size: int | None = None
    sha1: str | None = None
    md5: str | None = None
    optional: bool = False  # skipped when the server does not have it (404)


class _TransientError(Exception):
    """A failure worth retrying."""


class NotFound(DataError):
    pass


class NotReady(DataError):
    pass


class _RangeNotSatisfiable(Exception):
    def __init__(self, total: int | None):
        super().__init__(total)
        self.total = total


@dataclasses.dataclass
class _PartDownload:
    """One file being downloaded into `part`; `written` counts the bytes in `part` received by this run."""
    remote: RemoteFile
    part: Path
    written: int = 0

    @property
    def origin_path(self) -> Path:
        return self.part.with_name(self.part.name + ".json")

    def size(self) -> int:
        return self.part.stat().st_size if self.part.exists() else 0

    def restart(self) -> None:
        self.part.unlink(missing_ok=True)
        self.origin_path.unlink(missing_ok=True)
        self.written = 0

    def discard_part_of_another_url(self) -> None:
        """Restart when the .part was started from another URL (or its origin is unknown)."""
        if self.size() and self._origin().get("url") != self.remote.url:
            self.restart()

    def resume_validator(self) -> str | None:
        """The ETag or Last-Modified the .part was started with (the If-Range of a resumed request)."""
        return self._origin().get("if_range") if self.size() else None

    def remember_origin(self, response: http.client.HTTPResponse) -> None:
        etag = response.headers.get("ETag")
        validator = etag if etag and not etag.startswith("W/") else response.headers.get("Last-Modified")
        length = response.headers.get("Content-Length")
        write_json(self.origin_path, {"url": self.remote.url, "if_range": validator,
                                      "size": int(length) if length and length.isdigit() else None})

    def announced_size(self) -> int | None:
        """The Content-Length of the whole file, as the server announced it when the .part was started."""
        return self._origin().get("size")

    def _origin(self) -> dict:
        origin = read_json(self.origin_path, default={})
        return origin if isinstance(origin, dict) else {}


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """The download stage's settings of the same names (DownloadConfig describes them)."""
    retries: int
    backoff_s: float
    timeout_s: float
    chunk_bytes: int


class HttpClient:
    """GETs with retries and exponential backoff, and resumable, verified file downloads; keeps the counts."""

    def __init__(self, policy: RetryPolicy, log: logging.Logger, quiet: bool):
        self.policy, self.log, self.quiet = policy, log, quiet
        self.bytes_downloaded = self.bytes_resumed = self.retries = 0

    def get(self, url: str) -> bytes:
        """The body of a small document (a listing, a dumpstatus.json)."""
        return self._retrying(url, lambda: self._read_body(url))

    def fetch(self, remote: RemoteFile, part: Path) -> bool:
        """Download `remote` into `part`, continuing what an earlier attempt left there, and verify it.
        False when the file is optional and the server does not have it."""
        transfer = _PartDownload(remote, part)
        part.parent.mkdir(parents=True, exist_ok=True)
        if remote.size is not None and transfer.size() > remote.size:
            transfer.restart()
        if transfer.size():
            self.log.info("%s: resuming from the partial download at byte %d", remote.name, transfer.size())
        try:
            if remote.size is None or transfer.size() < remote.size:
                self._retrying(remote.url, lambda: self._download_attempt(transfer), position=transfer.size)
        except NotFound:
            if not remote.optional:
                raise
            self.log.info("%s: not on the server, going on without it", remote.url)
            return False
        self.bytes_resumed += transfer.size() - transfer.written
        if remote.size is None:
            remote = dataclasses.replace(remote, size=transfer.announced_size())
        _verify(part, remote, self.policy.chunk_bytes, self.quiet)
        return True

    def _retrying(self, url: str, attempt: Callable[[], T], position: Callable[[], int] = lambda: 0) -> T:
        """Call `attempt` until it succeeds; `retries` failures in a row end it, where an attempt that got
        `position` (the bytes on disk) further than ever before starts the count again."""
        failures, reached = 0, position()
        while True:
            try:
                return attempt()
            except _TransientError as e:
                failures = 1 if position() > reached else failures + 1
                reached = max(reached, position())
                if failures > self.policy.retries:
                    raise DataError(f"{url}: giving up after {self.policy.retries} retries: {e}") from None
                delay = self.policy.backoff_s * 2 ** (failures - 1)
                self.log.warning("%s: %s; retry %d of %d in %.1fs", url, e, failures, self.policy.retries, delay)
                self.retries += 1
                time.sleep(delay)

    def _open(self, url: str, offset: int = 0, if_range: str | None = None) -> http.client.HTTPResponse:
        headers = {"User-Agent": USER_AGENT}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        if offset and if_range:
            headers["If-Range"] = if_range
        try:
            return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self.policy.timeout_s)
        except urllib.error.HTTPError as e:
            e.close()
            raise _http_error(url, e) from None
        except NETWORK_ERRORS as e:
            raise _TransientError(_error_text(e)) from None

    def _read_body(self, url: str) -> bytes:
        with self._open(url) as response:
            try:
                return response.read()
            except NETWORK_ERRORS as e:
                raise _TransientError(_error_text(e)) from None

    def _download_attempt(self, transfer: _PartDownload) -> None:
        transfer.discard_part_of_another_url()
        if_range = transfer.resume_validator()
        offset = transfer.size()
        try:
            response = self._open(transfer.remote.url, offset, if_range)
        except _RangeNotSatisfiable as e:
            if e.total == offset:  # an earlier run received every byte
                return
            transfer.restart()
            raise _TransientError(f"the server cannot resume at byte {offset} (HTTP 416); starting over") from None
        with response:
            if offset and response.status != 206:
                self.log.warning("%s: the server sent the whole file (it ignored the Range request, or the file "
                                 "changed); downloading from the start", transfer.remote.url)
                transfer.restart()
                offset = 0
            elif offset:
                _check_resumed_at(response, offset, transfer.remote.url)
            if not offset:
                transfer.remember_origin(response)
            self._receive(response, transfer, _expected_total(response, offset, transfer.remote))

    def _receive(self, response: http.client.HTTPResponse, transfer: _PartDownload, total: int | None) -> None:
        offset, received = transfer.size(), 0
        with open(transfer.part, "ab") as f, \
                progress(total, transfer.remote.name, "B", self.quiet, initial=offset) as bar:
            while True:
                try:
                    block = response.read1(self.policy.chunk_bytes)
                except NETWORK_ERRORS as e:
                    raise _TransientError(f"{_error_text(e)} at byte {offset + received}") from None
                if not block:
                    break
                f.write(block)
                f.flush()  # a killed run keeps every byte it received
                received += len(block)
                transfer.written += len(block)
                self.bytes_downloaded += len(block)
                bar.update(len(block))
        if total is not None and offset + received < total:
            raise _TransientError(f"connection closed at byte {offset + received} of {total}")


def _http_error(url: str, e: urllib.error.HTTPError) -> Exception:
    if e.code == 404:
        return NotFound(f"{url}: not found (HTTP 404)")
    if e.code == 416:
        match = re.fullmatch(r"bytes \*/(\d+)", e.headers.get("Content-Range", ""))
        return _RangeNotSatisfiable(int(match.group(1)) if match else None)
    if e.code in (408, 429) or e.code >= 500:
        return _TransientError(f"HTTP {e.code} {e.reason}")
    return DataError(f"{url}: HTTP {e.code} {e.reason}")


def _error_text(e: BaseException) -> str:
    return str(getattr(e, "reason", None) or e) or type(e).__name__


def _check_resumed_at(response: http.client.HTTPResponse, offset: int, url: str) -> None:
    content_range = response.headers.get("Content-Range", "")
    match = re.match(r"bytes (\d+)-", content_range)
    if not match or int(match.group(1)) != offset:
        raise DataError(f"{url}: asked for bytes {offset}- and got Content-Range {content_range!r}")


def _expected_total(response: http.client.HTTPResponse, offset: int, remote: RemoteFile) -> int | None:
    length = response.headers.get("Content-Length")
    total = offset + int(length) if length and length.isdigit() else None
    if total is not None and remote.size is not None and total != remote.size:
        raise DataError(f"{remote.url}: the server has {total} bytes, dumpstatus.json says {remote.size}")
    return remote.size if total is None else total


def _verify(part: Path, remote: RemoteFile, chunk_bytes: int, quiet: bool) -> None:
    """Check size and sha1 (else md5) against what the dump's status lists; deletes a bad download."""
    size = part.stat().st_size
    if remote.size is not None and size != remote.size:
        part.unlink()
        raise DataError(f"{remote.name}: downloaded {size} bytes, expected {remote.size} ({remote.url}); "
                            "deleted it, re-run to download it again")
    algorithm = "sha1" if remote.sha1 else "md5" if remote.md5 else None
    if algorithm is None:
        try:
            check_magic(part, remote.name, remote.url)
        except DataError:
            part.unlink()
            raise
        return
    expected = getattr(remote, algorithm).lower()
    actual = _file_digest(part, algorithm, chunk_bytes, quiet)
    if actual != expected:
        part.unlink()
        raise DataError(f"{remote.name}: {algorithm} mismatch: expected {expected}, got {actual} "
                            f"({remote.url}); deleted it, re-run to download it again")


MAGIC = {".bz2": (b"BZh", "bzip2"), ".xz": (b"\xfd7zXZ\x00", "xz"), ".gz": (b"\x1f\x8b", "gzip")}


def check_magic(path: Path, name: str, where: str) -> None:
    """A file named .bz2/.xz/.gz must start with its format's magic bytes; nothing may be an HTML page."""
    with open(path, "rb") as f:
        head = f.read(512)
    expected = MAGIC.get(Path(name).suffix)
    if head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        raise DataError(f"{where}: is an HTML page, not a dump ({head[:60]!r}...): an error page from the server?")
    if expected and not head.startswith(expected[0]):
        raise DataError(f"{where}: not {expected[1]} data (starts with {head[:16]!r})")


def _file_digest(path: Path, algorithm: str, chunk_bytes: int, quiet: bool) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f, progress(path.stat().st_size, f"{algorithm} check", "B", quiet) as bar:
        while block := f.read(chunk_bytes):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()
