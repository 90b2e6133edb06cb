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

Downloads (pipeline/stages/download/http.py) use the standard library's urllib (no extra dependency for a few GETs).
Each file goes to
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
import json
import logging
import os
import posixpath
import re
import urllib.parse
import urllib.request
from pathlib import Path

from wiki2bert_core.config import SettingError, changeable, check_minimum
from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import file_fingerprint, remove_tree, write_json
from pipeline.stages.download.http import HttpClient, RetryPolicy, NotFound, NotReady, RemoteFile, check_magic
from pipeline.sources import download_idle
from pipeline.stages import Stage, StageContext, StageCounts
from pipeline.stages.extract.dump import bz2_end_problem

DUMP_SUFFIX = "-pages-articles-multistream.xml.bz2"
INDEX_SUFFIX = "-pages-articles-multistream-index.txt.bz2"
# Big wikis write the multistream dump in parts and recombine them into one file in a later job;
# small wikis write the one file in the first job.
MULTISTREAM_JOBS = ("articlesmultistreamdumprecombine", "articlesmultistreamdump")


@dataclasses.dataclass(frozen=True)
class DownloadConfig:
    source: str | None = None  # local path, file:// or http(s):// URL of the dump (--dump); null: resolve on base_url
    base_url: str = "https://dumps.wikimedia.org"  # Wikimedia dumps or a mirror with the same layout
    wiki: str | None = None  # dump name of the wiki; null: <lang>wiki with '-' as '_' (zh-min-nan -> zh_min_nanwiki)
    date: str | int = "latest"  # dump run YYYYMMDD, or latest: the newest run whose multistream dump is done
    retries: int = changeable(5)  # retries in a row that get no further into the file before giving up
    backoff_s: float = changeable(2.0)  # wait before the first retry; doubles with each retry in a row
    timeout_s: float = changeable(60.0)  # socket timeout for connecting and for each read
    chunk_bytes: int = changeable(1 << 20)  # read/write block size

    def __post_init__(self):
        check_minimum(self, 0, "retries", "backoff_s")
        check_minimum(self, 1, "chunk_bytes")
        if self.timeout_s <= 0:
            raise SettingError("timeout_s", f"must be above 0, got {self.timeout_s}")


def run(config: DownloadConfig, ctx: StageContext) -> StageCounts:
    source = config.source
    if source is not None and urllib.parse.urlparse(source).scheme not in ("http", "https"):
        return use_local_dump(_local_path(source), config, ctx)
    return download_dump(config, ctx)


# ---- local dumps -------------------------------------------------------------------------------------

def use_local_dump(path: Path, config: DownloadConfig, ctx: StageContext) -> StageCounts:
    files = _local_files(path)
    if not files:
        raise DataError(f"{path}: dump file not found")
    check_magic(files[0], files[0].name, str(files[0]))
    info = {"dump": str(files[0]), "index": str(files[1]) if len(files) > 1 else None, "source": str(files[0])}
    write_json(ctx.out_dir / "dump.json", info)
    return StageCounts({"files": len(files), "bytes": sum(f.stat().st_size for f in files)})


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

def download_dump(config: DownloadConfig, ctx: StageContext) -> StageCounts:
    client = HttpClient(RetryPolicy(config.retries, config.backoff_s, config.timeout_s, config.chunk_bytes),
                        ctx.log, ctx.quiet)
    remotes = _remotes_from_url(config.source) if config.source else resolve_wikimedia_dump(config, ctx.lang, client, ctx.log)
    parts = {r.name: ctx.cache_dir / f"{r.name}.part" for r in remotes}
    fetched = [r for r in remotes if client.fetch(r, parts[r.name])]
    for remote in fetched:
        _check_the_end(parts[remote.name], remote)
    for remote in fetched:  # only once every file is complete and verified
        os.replace(parts[remote.name], ctx.out_dir / remote.name)
    remove_tree(ctx.cache_dir)  # also drops .part files of earlier, abandoned sources
    outputs = [ctx.out_dir / r.name for r in fetched]
    _write_dump_json(ctx.out_dir, outputs, config.source or fetched[0].url, sha1=fetched[0].sha1)
    return StageCounts({"files": len(fetched), "bytes": sum(p.stat().st_size for p in outputs),
                        "bytes_downloaded": client.bytes_downloaded, "bytes_resumed": client.bytes_resumed,
                        "retries": client.retries})


def _check_the_end(part: Path, remote: RemoteFile) -> None:
    """A body cut short with a Content-Length that says the same short length passes the size check (and has no
    checksum to fail without a dumpstatus.json): a bz2 dump must end with a complete stream, and its XML with
    </mediawiki>. Reads the last few MiB of the file (dump.bz2_end_problem), whatever its size."""
    if remote.name.endswith(".bz2") and (problem := bz2_end_problem(part, xml=remote.name.endswith(".xml.bz2"))):
        part.unlink()
        raise DataError(f"{remote.url}: {problem} (the server sent less than the whole file); deleted it, re-run "
                        "to download it again")


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
        except (NotFound, NotReady) as e:
            log.info("skipping %s: %s", run_date, e)
            continue
        log.info("latest finished dump of %s: %s", wiki, run_date)
        return remotes
    raise DataError(f"{base_url}/{wiki}/: no dated run has a finished pages-articles-multistream dump")


def _listed_dates(client: HttpClient, base_url: str, wiki: str) -> list[str]:
    """Dated run directories in the wiki's directory listing, newest first."""
    url = f"{base_url}/{wiki}/"
    try:
        listing = client.get(url).decode("utf-8", "replace")
    except NotFound as e:
        raise DataError(f"{e}: no dumps of {wiki} there (check --lang, download.wiki, download.base_url)") from None
    return sorted(set(re.findall(r'href="(\d{8})/?"', listing)), reverse=True)


def _dated_dump(client: HttpClient, base_url: str, wiki: str, date: str) -> list[RemoteFile]:
    url = f"{base_url}/{wiki}/{date}/dumpstatus.json"
    try:
        status = json.loads(client.get(url))
    except ValueError:
        raise DataError(f"{url}: not valid JSON") from None
    dump, index = f"{wiki}-{date}{DUMP_SUFFIX}", f"{wiki}-{date}{INDEX_SUFFIX}"
    job = _job_listing(status, dump)
    if job is None or job.get("status") != "done":
        state = job.get("status") if job else "not listed"
        raise NotReady(f"{url}: the pages-articles-multistream dump is not finished ({state})")
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
        raise DataError(f"{where}: the entry for {name} has no valid url and size") from None


def _index_name(dump_name: str) -> str | None:
    return dump_name[:-len(".xml.bz2")] + "-index.txt.bz2" if dump_name.endswith("-multistream.xml.bz2") else None


def _write_dump_json(out_dir: Path, files: list[Path], source: str, sha1: str | None) -> None:
    info = {"dump": files[0].name, "index": files[1].name if len(files) > 1 else None, "source": source}
    if sha1:
        info["sha1"] = sha1
    write_json(out_dir / "dump.json", info)


# ---- HTTP --------------------------------------------------------------------------------------------

STAGE = Stage("download", DownloadConfig, run, inputs=(), sources=local_sources, idle=download_idle)
