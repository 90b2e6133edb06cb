"""Stage `download`: put the Wikipedia dump (multistream XML + its index) into download/ with a dump.json.

Where the dump comes from (`source`, the CLI's --dump):
- a local path or file:// URL: used where it is, never written: dump.json names it (and the sibling
  `...-multistream-index.txt.bz2` when there is one) with its size, mtime and a sample checksum, and the stage
  turns stale when the file at that path changes (`sources`), so a dump replaced under the same name is re-read;
- an http(s):// URL: downloaded, with the sibling index URL when the server has it;
- nothing: resolved on `base_url` (Wikimedia or a mirror) from `<wiki>/<date>/dumpstatus.json`, which lists
  the pages-articles-multistream dump and its index with sizes and sha1/md5 checksums. Wikimedia's
  `latest/` directory has no dumpstatus.json, so `date: latest` reads the `<wiki>/` directory listing and
  takes the newest dated run whose multistream job is done (the newest run is often still in progress).

Downloads use the standard library's urllib (no extra dependency for a few GETs). Each file goes to
`<cache>/<name>.part`, resumes with a Range request after a dropped connection or a killed run, retries
with exponential backoff on connection errors, timeouts, 408/429 and 5xx, and is checked against the
expected size and checksum before it moves into place (without a dumpstatus.json: the Content-Length the
server announced, and the compression format's magic bytes, so an HTML error page sent with HTTP 200 is refused);
the .part files stay in the cache until the stage succeeds, so a re-run continues where the last one stopped.
Beside each .part, `<name>.part.json` keeps the URL, the announced size and the server's ETag (or
Last-Modified): a .part from another URL starts over, and the resume sends
If-Range, so a file that changed on the server (the rolling `latest` names) comes whole, not spliced.
"""
from __future__ import annotations

import dataclasses
import hashlib
import http.client
import json
import logging
import os
import posixpath
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, TypeVar

from core.errors import ConfigError
from core.errors import PipelineError
from core.fileio import file_fingerprint, remove_tree, write_json
from core.log import progress
from pipeline.stages import Stage, StageContext

T = TypeVar("T")

USER_AGENT = "wiki2bert-pipeline/0.1 (BERT pretraining data from Wikipedia dumps; Python-urllib)"
DUMP_SUFFIX = "-pages-articles-multistream.xml.bz2"
INDEX_SUFFIX = "-pages-articles-multistream-index.txt.bz2"
# Big wikis write the multistream dump in parts and recombine them into one file in a later job;
# small wikis write the one file in the first job.
MULTISTREAM_JOBS = ("articlesmultistreamdumprecombine", "articlesmultistreamdump")
NETWORK_ERRORS = (OSError, http.client.HTTPException)  # refused/reset connections, timeouts, bad responses


@dataclasses.dataclass(frozen=True)
class DownloadConfig:
    source: str | None = None  # local path, file:// or http(s):// URL of the dump; None: resolve on base_url
    base_url: str = "https://dumps.wikimedia.org"  # Wikimedia dumps or a mirror with the same layout
    wiki: str | None = None  # dump name of the wiki; None: <lang>wiki with '-' as '_' (zh-min-nan -> zh_min_nanwiki)
    date: str | int = "latest"  # dump run YYYYMMDD, or latest: the newest run whose multistream dump is done
    retries: int = 5  # retries in a row that get no further into the file before giving up
    backoff_s: float = 2.0  # wait before the first retry; doubles with each retry in a row
    timeout_s: float = 60.0  # socket timeout for connecting and for each read
    chunk_bytes: int = 1 << 20  # read/write block size


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    name: str
    url: str
    size: int | None = None
    sha1: str | None = None
    md5: str | None = None
    optional: bool = False  # skipped when the server does not have it (404)


def run(config: DownloadConfig, ctx: StageContext) -> dict:
    source = config.source
    if source is not None and urllib.parse.urlparse(source).scheme not in ("http", "https"):
        return use_local_dump(_local_path(source), config, ctx)
    return download_dump(config, ctx)


# ---- local dumps -------------------------------------------------------------------------------------

def use_local_dump(path: Path, config: DownloadConfig, ctx: StageContext) -> dict:
    files = _local_files(path)
    if not files:
        raise PipelineError(f"{path}: dump file not found")
    _check_magic(files[0], files[0].name, str(files[0]))
    info = {"dump": str(files[0]), "index": str(files[1]) if len(files) > 1 else None, "source": str(files[0])}
    write_json(ctx.out_dir / "dump.json", info)
    return {"files": len(files), "bytes": sum(f.stat().st_size for f in files)}


def local_sources(config: DownloadConfig) -> dict:
    """Fingerprints of a local dump and its index (the runner compares them with the done stage's)."""
    if config.source is None or urllib.parse.urlparse(config.source).scheme in ("http", "https"):
        return {}
    path = _local_path(config.source).resolve()
    files = _local_files(path)
    if not files:
        return {"dump": f"{path}: missing"}
    return {kind: {"path": str(f), **file_fingerprint(f)} for kind, f in zip(("dump", "index"), files)}


def _local_files(path: Path) -> list[Path]:
    """[dump, index] of a local dump (the index when there is one), resolved; [] when the dump is missing."""
    path = path.resolve()
    if not path.is_file():
        return []
    index = path.with_name(index_name) if (index_name := _index_name(path.name)) else None
    return [path] + ([index] if index and index.is_file() else [])


def _local_path(source: str) -> Path:
    parsed = urllib.parse.urlparse(source)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    if "://" in source:
        raise ConfigError(f"download.source: {source!r}: unsupported URL scheme (use a path, file://, http:// or https://)")
    return Path(source)


# ---- remote dumps ------------------------------------------------------------------------------------

def download_dump(config: DownloadConfig, ctx: StageContext) -> dict:
    client = HttpClient(config, ctx.log, ctx.quiet)
    remotes = _remotes_from_url(config.source) if config.source else resolve_wikimedia_dump(config, ctx.lang, client, ctx.log)
    parts = {r.name: ctx.cache_dir / f"{r.name}.part" for r in remotes}
    fetched = [r for r in remotes if client.fetch(r, parts[r.name])]
    for remote in fetched:  # only once every file is complete and verified
        os.replace(parts[remote.name], ctx.out_dir / remote.name)
    remove_tree(ctx.cache_dir)  # also drops .part files of earlier, abandoned sources
    outputs = [ctx.out_dir / r.name for r in fetched]
    _write_dump_json(ctx.out_dir, outputs, config.source or fetched[0].url, sha1=fetched[0].sha1)
    return {"files": len(fetched), "bytes": sum(p.stat().st_size for p in outputs),
            "bytes_downloaded": client.bytes_downloaded, "bytes_resumed": client.bytes_resumed,
            "retries": client.retries}


def _remotes_from_url(url: str) -> list[RemoteFile]:
    name = posixpath.basename(urllib.parse.unquote(urllib.parse.urlparse(url).path))
    if name in ("", ".", ".."):
        raise ConfigError(f"download.source: {url}: the URL does not name a file")
    remotes = [RemoteFile(name, url)]
    if index := _index_name(name):
        remotes.append(RemoteFile(index, urllib.parse.urljoin(url, urllib.parse.quote(index)), optional=True))
    return remotes


def resolve_wikimedia_dump(config: DownloadConfig, lang: str, client: HttpClient,
                           log: logging.Logger) -> list[RemoteFile]:
    """The multistream dump of the language's wiki and its index, with sizes and checksums."""
    date = str(config.date)
    if not re.fullmatch(r"latest|\d{8}", date):
        raise ConfigError(f"download.date: {date!r} is neither 'latest' nor a date YYYYMMDD")
    base_url = config.base_url.rstrip("/")
    wiki = config.wiki or lang.replace("-", "_") + "wiki"
    if date != "latest":
        return _dated_dump(client, base_url, wiki, date)
    for run_date in _listed_dates(client, base_url, wiki):
        try:
            remotes = _dated_dump(client, base_url, wiki, run_date)
        except (_NotFound, _NotReady) as e:
            log.info("skipping %s: %s", run_date, e)
            continue
        log.info("latest finished dump of %s: %s", wiki, run_date)
        return remotes
    raise PipelineError(f"{base_url}/{wiki}/: no dated run has a finished pages-articles-multistream dump")


def _listed_dates(client: HttpClient, base_url: str, wiki: str) -> list[str]:
    """Dated run directories in the wiki's directory listing, newest first."""
    url = f"{base_url}/{wiki}/"
    try:
        listing = client.get(url).decode("utf-8", "replace")
    except _NotFound as e:
        raise PipelineError(f"{e}: no dumps of {wiki} there (check --lang, download.wiki, download.base_url)") from None
    return sorted(set(re.findall(r'href="(\d{8})/?"', listing)), reverse=True)


def _dated_dump(client: HttpClient, base_url: str, wiki: str, date: str) -> list[RemoteFile]:
    url = f"{base_url}/{wiki}/{date}/dumpstatus.json"
    try:
        status = json.loads(client.get(url))
    except ValueError:
        raise PipelineError(f"{url}: not valid JSON") from None
    dump, index = f"{wiki}-{date}{DUMP_SUFFIX}", f"{wiki}-{date}{INDEX_SUFFIX}"
    job = _job_listing(status, dump)
    if job is None or job.get("status") != "done":
        state = job.get("status") if job else "not listed"
        raise _NotReady(f"{url}: the pages-articles-multistream dump is not finished ({state})")
    return [_remote_file(name, job["files"][name], base_url, url) for name in (dump, index) if name in job["files"]]


def _job_listing(status, file_name: str) -> dict | None:
    jobs = status.get("jobs") if isinstance(status, dict) else None
    for job_name in MULTISTREAM_JOBS:
        job = (jobs or {}).get(job_name)
        if isinstance(job, dict) and file_name in (job.get("files") or {}):
            return job
    return None


def _remote_file(name: str, meta: dict, base_url: str, where: str) -> RemoteFile:
    try:
        return RemoteFile(name, f"{base_url}/{meta['url'].lstrip('/')}", int(meta["size"]),
                          meta.get("sha1"), meta.get("md5"))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise PipelineError(f"{where}: the entry for {name} has no valid url and size") from None


def _index_name(dump_name: str) -> str | None:
    return dump_name[:-len(".xml.bz2")] + "-index.txt.bz2" if dump_name.endswith("-multistream.xml.bz2") else None


def _write_dump_json(out_dir: Path, files: list[Path], source: str, sha1: str | None) -> None:
    info = {"dump": files[0].name, "index": files[1].name if len(files) > 1 else None, "source": source}
    if sha1:
        info["sha1"] = sha1
    write_json(out_dir / "dump.json", info)


# ---- HTTP --------------------------------------------------------------------------------------------

class _Transient(Exception):
    """A failure worth retrying."""


class _NotFound(PipelineError):
    pass


class _NotReady(PipelineError):
    pass


class _RangeNotSatisfiable(Exception):
    def __init__(self, total: int | None):
        super().__init__(total)
        self.total = total


@dataclasses.dataclass
class _Transfer:
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

    def if_range(self) -> str | None:
        """The validator the .part was started with; a .part from another URL (or of unknown origin) restarts."""
        try:
            origin = json.loads(self.origin_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            origin = {}
        if self.size() and origin.get("url") != self.remote.url:
            self.restart()
        return origin.get("if_range") if self.size() else None

    def remember_origin(self, response: http.client.HTTPResponse) -> None:
        etag = response.headers.get("ETag")
        validator = etag if etag and not etag.startswith("W/") else response.headers.get("Last-Modified")
        length = response.headers.get("Content-Length")
        write_json(self.origin_path, {"url": self.remote.url, "if_range": validator,
                                      "size": int(length) if length and length.isdigit() else None})

    def announced_size(self) -> int | None:
        """The Content-Length of the whole file, as the server announced it when the .part was started."""
        try:
            return json.loads(self.origin_path.read_text(encoding="utf-8")).get("size")
        except (OSError, ValueError, AttributeError):
            return None


class HttpClient:
    """GETs with retries and exponential backoff, and resumable, verified file downloads; keeps the counts."""

    def __init__(self, config: DownloadConfig, log: logging.Logger, quiet: bool):
        self.config, self.log, self.quiet = config, log, quiet
        self.bytes_downloaded = self.bytes_resumed = self.retries = 0

    def get(self, url: str) -> bytes:
        """The body of a small document (a listing, a dumpstatus.json)."""
        return self._retrying(url, lambda: self._read_body(url))

    def fetch(self, remote: RemoteFile, part: Path) -> bool:
        """Download `remote` into `part`, continuing what an earlier attempt left there, and verify it.
        False when the file is optional and the server does not have it."""
        transfer = _Transfer(remote, part)
        part.parent.mkdir(parents=True, exist_ok=True)
        if remote.size is not None and transfer.size() > remote.size:
            transfer.restart()
        if transfer.size():
            self.log.info("%s: resuming from the partial download at byte %d", remote.name, transfer.size())
        try:
            if remote.size is None or transfer.size() < remote.size:
                self._retrying(remote.url, lambda: self._download_attempt(transfer), position=transfer.size)
        except _NotFound:
            if not remote.optional:
                raise
            self.log.info("%s: not on the server, going on without it", remote.url)
            return False
        self.bytes_resumed += transfer.size() - transfer.written
        if remote.size is None:
            remote = dataclasses.replace(remote, size=transfer.announced_size())
        _verify(part, remote, self.config.chunk_bytes, self.quiet)
        return True

    def _retrying(self, url: str, attempt: Callable[[], T], position: Callable[[], int] = lambda: 0) -> T:
        """Call `attempt` until it succeeds; `retries` failures in a row end it, where an attempt that got
        `position` (the bytes on disk) further than ever before starts the count again."""
        failures, reached = 0, position()
        while True:
            try:
                return attempt()
            except _Transient as e:
                failures = 1 if position() > reached else failures + 1
                reached = max(reached, position())
                if failures > self.config.retries:
                    raise PipelineError(f"{url}: giving up after {self.config.retries} retries: {e}") from None
                delay = self.config.backoff_s * 2 ** (failures - 1)
                self.log.warning("%s: %s; retry %d of %d in %.1fs", url, e, failures, self.config.retries, delay)
                self.retries += 1
                time.sleep(delay)

    def _open(self, url: str, offset: int = 0, if_range: str | None = None) -> http.client.HTTPResponse:
        headers = {"User-Agent": USER_AGENT}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        if offset and if_range:
            headers["If-Range"] = if_range
        try:
            return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self.config.timeout_s)
        except urllib.error.HTTPError as e:
            e.close()
            raise _http_error(url, e) from None
        except NETWORK_ERRORS as e:
            raise _Transient(_error_text(e)) from None

    def _read_body(self, url: str) -> bytes:
        with self._open(url) as response:
            try:
                return response.read()
            except NETWORK_ERRORS as e:
                raise _Transient(_error_text(e)) from None

    def _download_attempt(self, transfer: _Transfer) -> None:
        if_range = transfer.if_range()
        offset = transfer.size()
        try:
            response = self._open(transfer.remote.url, offset, if_range)
        except _RangeNotSatisfiable as e:
            if e.total == offset:  # an earlier run received every byte
                return
            transfer.restart()
            raise _Transient(f"the server cannot resume at byte {offset} (HTTP 416); starting over") from None
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

    def _receive(self, response: http.client.HTTPResponse, transfer: _Transfer, total: int | None) -> None:
        offset, received = transfer.size(), 0
        with open(transfer.part, "ab") as f, \
                progress(total, transfer.remote.name, "B", self.quiet, initial=offset) as bar:
            while True:
                try:
                    block = response.read1(self.config.chunk_bytes)
                except NETWORK_ERRORS as e:
                    raise _Transient(f"{_error_text(e)} at byte {offset + received}") from None
                if not block:
                    break
                f.write(block)
                f.flush()  # a killed run keeps every byte it received
                received += len(block)
                transfer.written += len(block)
                self.bytes_downloaded += len(block)
                bar.update(len(block))
        if total is not None and offset + received < total:
            raise _Transient(f"connection closed at byte {offset + received} of {total}")


def _http_error(url: str, e: urllib.error.HTTPError) -> Exception:
    if e.code == 404:
        return _NotFound(f"{url}: not found (HTTP 404)")
    if e.code == 416:
        match = re.fullmatch(r"bytes \*/(\d+)", e.headers.get("Content-Range", ""))
        return _RangeNotSatisfiable(int(match.group(1)) if match else None)
    if e.code in (408, 429) or e.code >= 500:
        return _Transient(f"HTTP {e.code} {e.reason}")
    return PipelineError(f"{url}: HTTP {e.code} {e.reason}")


def _error_text(e: BaseException) -> str:
    return str(getattr(e, "reason", None) or e) or type(e).__name__


def _check_resumed_at(response: http.client.HTTPResponse, offset: int, url: str) -> None:
    content_range = response.headers.get("Content-Range", "")
    match = re.match(r"bytes (\d+)-", content_range)
    if not match or int(match.group(1)) != offset:
        raise PipelineError(f"{url}: asked for bytes {offset}- and got Content-Range {content_range!r}")


def _expected_total(response: http.client.HTTPResponse, offset: int, remote: RemoteFile) -> int | None:
    length = response.headers.get("Content-Length")
    total = offset + int(length) if length and length.isdigit() else None
    if total is not None and remote.size is not None and total != remote.size:
        raise PipelineError(f"{remote.url}: the server has {total} bytes, dumpstatus.json says {remote.size}")
    return remote.size if total is None else total


def _verify(part: Path, remote: RemoteFile, chunk_bytes: int, quiet: bool) -> None:
    """Check size and sha1 (else md5) against what the dump's status lists; deletes a bad download."""
    size = part.stat().st_size
    if remote.size is not None and size != remote.size:
        part.unlink()
        raise PipelineError(f"{remote.name}: downloaded {size} bytes, expected {remote.size} ({remote.url}); "
                            "deleted it, re-run to download it again")
    algorithm = "sha1" if remote.sha1 else "md5" if remote.md5 else None
    if algorithm is None:
        try:
            _check_magic(part, remote.name, remote.url)
        except PipelineError:
            part.unlink()
            raise
        return
    expected = getattr(remote, algorithm).lower()
    actual = _file_digest(part, algorithm, chunk_bytes, quiet)
    if actual != expected:
        part.unlink()
        raise PipelineError(f"{remote.name}: {algorithm} mismatch: expected {expected}, got {actual} "
                            f"({remote.url}); deleted it, re-run to download it again")


MAGIC = {".bz2": (b"BZh", "bzip2"), ".xz": (b"\xfd7zXZ\x00", "xz"), ".gz": (b"\x1f\x8b", "gzip")}


def _check_magic(path: Path, name: str, where: str) -> None:
    """A file named .bz2/.xz/.gz must start with its format's magic bytes; nothing may be an HTML page."""
    with open(path, "rb") as f:
        head = f.read(512)
    expected = MAGIC.get(Path(name).suffix)
    if head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        raise PipelineError(f"{where}: is an HTML page, not a dump ({head[:60]!r}...): an error page from the server?")
    if expected and not head.startswith(expected[0]):
        raise PipelineError(f"{where}: not {expected[1]} data (starts with {head[:16]!r})")


def _file_digest(path: Path, algorithm: str, chunk_bytes: int, quiet: bool) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f, progress(path.stat().st_size, f"{algorithm} check", "B", quiet) as bar:
        while block := f.read(chunk_bytes):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


STAGE = Stage("download", DownloadConfig, run, inputs=(),
              runtime_fields=("retries", "backoff_s", "timeout_s", "chunk_bytes"), sources=local_sources)
