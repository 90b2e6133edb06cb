"""Stage download against a local HTTP server with injected faults, and with local dumps."""
from __future__ import annotations

import bz2
import dataclasses
import hashlib
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pipeline.config import DEFAULT_CONFIG_PATH, load_pipeline_config
from wiki2bert_core.errors import DataError
from pipeline.runner import MANIFEST, run_stages

WIKI, DATE = "huwiki", "20240920"
DUMP = f"{WIKI}-{DATE}-pages-articles-multistream.xml.bz2"
INDEX = f"{WIKI}-{DATE}-pages-articles-multistream-index.txt.bz2"


def generated_dump(pages: int = 400, seed: int = 0) -> tuple[bytes, bytes]:
    """A bz2 XML dump of random-word pages (a few hundred KB) and an index for it."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyzáéíóöőúüű") for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]
    xml = "".join(f"<page><title>Lap {i}</title><ns>0</ns><id>{i}</id><revision><text>"
                  f"{' '.join(rng.choices(words, k=300))}</text></revision></page>\n" for i in range(1, pages + 1))
    index = "".join(f"0:{i}:Lap {i}\n" for i in range(1, pages + 1))
    return bz2.compress(f"<mediawiki>\n{xml}</mediawiki>\n".encode()), bz2.compress(index.encode())


@dataclasses.dataclass
class Served:
    path: str
    range: str | None
    if_range: str | None
    status: int
    sent: int = 0


class DumpServer:
    """What the handler serves, the faults to inject per path (one per request, in order; a fault is
    space-separated words: 404, 503, 416, drop, stall, ignore-range), and a request log."""

    def __init__(self, url: str):
        self.url = url
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, list[str]] = defaultdict(list)
        self.requests: list[Served] = []
        self.release = threading.Event()  # ends a "stall" fault

    def served(self, name: str) -> list[Served]:
        return [r for r in self.requests if r.path.endswith("/" + name)]

    def publish(self, date: str = DATE, status: str = "done", job: str = "articlesmultistreamdump",
                sha1: str | None = None, seed: int = 0) -> tuple[bytes, bytes]:
        dump, index = generated_dump(seed=seed)
        files = {}
        for name, body in ((f"{WIKI}-{date}-pages-articles-multistream.xml.bz2", dump),
                           (f"{WIKI}-{date}-pages-articles-multistream-index.txt.bz2", index)):
            self.files[f"/{WIKI}/{date}/{name}"] = body
            files[name] = {"size": len(body), "url": f"/{WIKI}/{date}/{name}",
                           "md5": hashlib.md5(body).hexdigest(), "sha1": hashlib.sha1(body).hexdigest()}
        if sha1 is not None:
            files[f"{WIKI}-{date}-pages-articles-multistream.xml.bz2"]["sha1"] = sha1
        jobs = {job: {"status": status, "updated": "2024-09-21 10:00:00", "files": files},
                "articlesdump": {"status": "done", "updated": "2024-09-21 09:00:00", "files": {}}}
        self.files[f"/{WIKI}/{date}/dumpstatus.json"] = json.dumps({"jobs": jobs, "version": "0.8"}).encode()
        links = "".join(f'<a href="{d}/">{d}/</a>\n' for d in ["latest", *sorted(self.dates() | {date})])
        self.files[f"/{WIKI}/"] = f"<html><body><pre>\n{links}</pre></body></html>".encode()
        return dump, index

    def dates(self) -> set[str]:
        return {m.group(1) for p in self.files if (m := re.fullmatch(rf"/{WIKI}/(\d{{8}})/dumpstatus.json", p))}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        srv: DumpServer = self.server.dump_server
        fault = set(srv.faults[self.path].pop(0).split()) if srv.faults[self.path] else set()
        record = Served(self.path, self.headers.get("Range"), self.headers.get("If-Range"), 200)
        srv.requests.append(record)
        body = srv.files.get(self.path)
        if body is None or fault & {"404", "503"}:
            record.status = 503 if "503" in fault else 404
            self.send_error(record.status)
            return
        etag = f'"{hashlib.sha1(body).hexdigest()[:16]}"'
        start = re.fullmatch(r"bytes=(\d+)-", record.range or "")
        if start and "416" in fault:
            record.status = 416
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{start.group(1)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if start and "ignore-range" not in fault and record.if_range in (None, etag):
            record.status, offset = 206, int(start.group(1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {offset}-{len(body) - 1}/{len(body)}")
            body = body[offset:]
        else:
            self.send_response(200)
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if fault & {"drop", "stall"}:
            body = body[:len(body) // 3]
        self.wfile.write(body)
        self.wfile.flush()
        record.sent = len(body)
        if "stall" in fault:
            srv.release.wait(20)
        # returning closes the connection (HTTP/1.0): after a "drop" the client has less than Content-Length

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.dump_server = DumpServer(f"http://127.0.0.1:{httpd.server_address[1]}")
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield httpd.dump_server
    httpd.dump_server.release.set()
    httpd.shutdown()
    httpd.server_close()


LOG = logging.getLogger("test_download")


def run_download(tmp_path: Path, server: DumpServer | None, *overrides: str, source: str | None = None,
                 force: bool = False) -> dict:
    """Run the stage as `pipeline stage download --lang hu [--dump SOURCE] --set ...` would; returns its manifest."""
    settings = [f"download.base_url={server.url}"] if server else []
    settings += ["download.backoff_s=0.01", "download.timeout_s=5", *overrides]
    pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", settings, {"download": {"source": source}} if source else None)
    lang_dir = tmp_path / "data" / "hu"
    run_stages(pcfg, lang_dir, ["download"], force=force, quiet=True, log=LOG)
    return json.loads((lang_dir / "download" / MANIFEST).read_text())


def out_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "hu" / "download"


def assert_nothing_complete(tmp_path: Path) -> None:
    lang_dir = tmp_path / "data" / "hu"
    assert not (lang_dir / "download").exists()
    assert not (lang_dir / ".download.tmp").exists()
    cache = lang_dir / ".cache" / "download"
    assert not cache.exists() or all(p.name.endswith((".part", ".part.json")) for p in cache.iterdir())


def test_dated_dump_is_downloaded_verified_and_described(tmp_path, server):
    dump, index = server.publish()
    manifest = run_download(tmp_path, server, f"download.date={DATE}")
    out = out_dir(tmp_path)
    assert (out / DUMP).read_bytes() == dump and (out / INDEX).read_bytes() == index
    assert json.loads((out / "dump.json").read_text()) == {
        "dump": DUMP, "index": INDEX, "source": f"{server.url}/{WIKI}/{DATE}/{DUMP}",
        "sha1": hashlib.sha1(dump).hexdigest()}
    assert manifest["counts"] == {"files": 2, "bytes": len(dump) + len(index),
                                  "bytes_downloaded": len(dump) + len(index), "bytes_resumed": 0, "retries": 0}
    assert not (tmp_path / "data" / "hu" / ".cache" / "download").exists()


def test_dropped_connection_resumes_with_only_the_rest(tmp_path, server, caplog):
    dump, _ = server.publish()
    server.faults[f"/{WIKI}/{DATE}/{DUMP}"] = ["drop"]
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        manifest = run_download(tmp_path, server, f"download.date={DATE}")
    first, second = server.served(DUMP)
    assert first.range is None and 0 < first.sent < len(dump)
    assert second.range == f"bytes={first.sent}-" and second.status == 206
    assert second.sent == len(dump) - first.sent
    assert (out_dir(tmp_path) / DUMP).read_bytes() == dump
    assert manifest["counts"]["retries"] == 1 and manifest["counts"]["bytes_resumed"] == 0
    assert any("connection closed at byte" in r.message and "retry 1 of 5" in r.message for r in caplog.records)


def test_server_ignoring_range_restarts_from_the_start(tmp_path, server):
    dump, _ = server.publish()
    server.faults[f"/{WIKI}/{DATE}/{DUMP}"] = ["drop", "ignore-range"]
    run_download(tmp_path, server, f"download.date={DATE}")
    first, second = server.served(DUMP)
    assert second.range == f"bytes={first.sent}-" and second.status == 200 and second.sent == len(dump)
    assert (out_dir(tmp_path) / DUMP).read_bytes() == dump


def test_retry_count_restarts_when_a_retry_gets_further(tmp_path, server):
    dump, _ = server.publish()
    server.faults[f"/{WIKI}/{DATE}/{DUMP}"] = ["drop"] * 3
    manifest = run_download(tmp_path, server, f"download.date={DATE}", "download.retries=1")
    assert (out_dir(tmp_path) / DUMP).read_bytes() == dump and manifest["counts"]["retries"] == 3


def test_retries_that_get_no_further_give_up(tmp_path, server):
    server.publish()
    server.faults[f"/{WIKI}/{DATE}/{DUMP}"] = ["drop"] + ["drop ignore-range"] * 5
    with pytest.raises(DataError, match="giving up after 2 retries: connection closed at byte"):
        run_download(tmp_path, server, f"download.date={DATE}", "download.retries=2")
    assert len(server.served(DUMP)) == 3  # the first got somewhere (retry 1), the next two got no further
    assert_nothing_complete(tmp_path)


def test_503_then_success_is_retried_and_logged(tmp_path, server, caplog):
    dump, _ = server.publish()
    server.faults[f"/{WIKI}/{DATE}/{DUMP}"] = ["503"]
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        manifest = run_download(tmp_path, server, f"download.date={DATE}")
    assert [r.status for r in server.served(DUMP)] == [503, 200]
    assert (out_dir(tmp_path) / DUMP).read_bytes() == dump
    assert manifest["counts"]["retries"] == 1
    assert any("HTTP 503" in r.message and "retry 1 of 5" in r.message for r in caplog.records)


def test_wrong_checksum_fails_naming_file_and_both_checksums(tmp_path, server):
    dump, _ = server.publish(sha1="0" * 40)
    with pytest.raises(DataError) as e:
        run_download(tmp_path, server, f"download.date={DATE}")
    message = str(e.value)
    assert DUMP in message and "0" * 40 in message and hashlib.sha1(dump).hexdigest() in message
    assert_nothing_complete(tmp_path)
    assert not (tmp_path / "data" / "hu" / ".cache" / "download" / f"{DUMP}.part").exists()


def test_404_fails_at_once_without_retries(tmp_path, server):
    url = f"{server.url}/{WIKI}/{DATE}/{DUMP}"
    with pytest.raises(DataError, match=re.escape(f"{url}: not found (HTTP 404)")):
        run_download(tmp_path, server, source=url)
    assert len(server.served(DUMP)) == 1
    assert_nothing_complete(tmp_path)


def test_exhausted_retries_name_url_and_last_error(tmp_path, server):
    server.publish()
    server.faults[f"/{WIKI}/{DATE}/{DUMP}"] = ["503"] * 10
    with pytest.raises(DataError) as e:
        run_download(tmp_path, server, f"download.date={DATE}", "download.retries=2")
    assert str(e.value) == f"{server.url}/{WIKI}/{DATE}/{DUMP}: giving up after 2 retries: HTTP 503 Service Unavailable"
    assert len(server.served(DUMP)) == 3
    assert_nothing_complete(tmp_path)


def test_unreachable_server_gives_up(tmp_path, server):
    server.url = "http://127.0.0.1:9"  # discard port: connection refused
    with pytest.raises(DataError, match=r"127.0.0.1:9/huwiki/: giving up after 1 retries: .*refused"):
        run_download(tmp_path, server, "download.retries=1")


@pytest.mark.parametrize("job", ["articlesmultistreamdump", "articlesmultistreamdumprecombine"])
def test_latest_is_the_newest_run_whose_multistream_dump_is_done(tmp_path, server, job):
    older, _ = server.publish(date="20240901", job=job, seed=1)
    server.publish(date="20240920", status="in-progress", job=job, seed=2)
    run_download(tmp_path, server)
    info = json.loads((out_dir(tmp_path) / "dump.json").read_text())
    assert info["dump"] == f"{WIKI}-20240901-pages-articles-multistream.xml.bz2"
    assert (out_dir(tmp_path) / info["dump"]).read_bytes() == older
    assert [r.path for r in server.requests[:3]] == [
        f"/{WIKI}/", f"/{WIKI}/20240920/dumpstatus.json", f"/{WIKI}/20240901/dumpstatus.json"]


def test_fixed_date_that_is_not_finished_or_missing_fails_clearly(tmp_path, server):
    server.publish(date="20240920", status="in-progress")
    with pytest.raises(DataError, match=r"20240920/dumpstatus.json: the pages-articles-multistream dump is not finished \(in-progress\)"):
        run_download(tmp_path, server, "download.date=20240920")
    with pytest.raises(DataError, match=r"20240801/dumpstatus.json: not found \(HTTP 404\)"):
        run_download(tmp_path, server, "download.date=20240801")


def test_http_source_fetches_the_sibling_index_when_there_is_one(tmp_path, server):
    dump, index = server.publish()
    url = f"{server.url}/{WIKI}/{DATE}/{DUMP}"
    run_download(tmp_path, server, source=url)
    assert json.loads((out_dir(tmp_path) / "dump.json").read_text()) == {"dump": DUMP, "index": INDEX, "source": url}
    assert (out_dir(tmp_path) / INDEX).read_bytes() == index
    del server.files[f"/{WIKI}/{DATE}/{INDEX}"]
    run_download(tmp_path, server, source=url, force=True)
    assert json.loads((out_dir(tmp_path) / "dump.json").read_text())["index"] is None
    assert sorted(p.name for p in out_dir(tmp_path).iterdir()) == [MANIFEST, "dump.json", DUMP]


def interrupted_download(tmp_path: Path, server: DumpServer, url: str) -> int:
    """A first attempt that gets a third of the dump and gives up (no retries); returns the size of its .part."""
    server.faults[f"/{WIKI}/{DATE}/{DUMP}"] = ["drop"]
    with pytest.raises(DataError, match="giving up after 0 retries"):
        run_download(tmp_path, server, "download.retries=0", source=url)
    return (tmp_path / "data" / "hu" / ".cache" / "download" / f"{DUMP}.part").stat().st_size


def test_file_that_changed_on_the_server_is_downloaded_whole_not_spliced(tmp_path, server):
    old, _ = server.publish()
    url = f"{server.url}/{WIKI}/{DATE}/{DUMP}"
    interrupted_download(tmp_path, server, url)
    new, _ = server.publish(seed=5)
    run_download(tmp_path, server, source=url)
    first, second = server.served(DUMP)
    assert second.range == f"bytes={first.sent}-" and second.if_range == f'"{hashlib.sha1(old).hexdigest()[:16]}"'
    assert second.status == 200 and (out_dir(tmp_path) / DUMP).read_bytes() == new


def test_partial_file_from_another_url_is_not_resumed(tmp_path, server):
    dump, _ = server.publish()
    server.files[f"/mirror/{DUMP}"] = dump
    server.faults[f"/{WIKI}/{DATE}/{DUMP}"] = ["drop"]
    with pytest.raises(DataError, match="giving up after 0 retries"):
        run_download(tmp_path, server, "download.retries=0", source=f"{server.url}/{WIKI}/{DATE}/{DUMP}")
    run_download(tmp_path, server, source=f"{server.url}/mirror/{DUMP}")
    assert [(r.range, r.sent) for r in server.served(DUMP)[1:]] == [(None, len(dump))]
    assert (out_dir(tmp_path) / DUMP).read_bytes() == dump


@pytest.mark.parametrize("as_url", [False, True])
def test_local_dump_is_read_in_place_and_never_shares_an_inode(tmp_path, as_url):
    dump, index = generated_dump()
    src = tmp_path / "dumps" / DUMP
    src.parent.mkdir()
    src.write_bytes(dump)
    (src.parent / INDEX).write_bytes(index)
    manifest = run_download(tmp_path, None, source=src.as_uri() if as_url else str(src))
    out = out_dir(tmp_path)
    assert json.loads((out / "dump.json").read_text()) == {
        "dump": str(src), "index": str(src.parent / INDEX), "source": str(src)}
    user_inodes = {src.stat().st_ino, (src.parent / INDEX).stat().st_ino}
    assert not any(p.stat().st_ino in user_inodes for p in (tmp_path / "data").rglob("*"))
    assert manifest["counts"] == {"files": 2, "bytes": len(dump) + len(index)}
    assert manifest["sources"]["dump"]["size"] == len(dump)


def test_dump_replaced_at_the_same_path_is_noticed_and_a_touch_is_not(tmp_path):
    from pipeline.runner import status_rows
    from pipeline.tools.sample_dump import write_sample_dump

    dump = write_sample_dump(tmp_path / "dumps", 30, seed=0)
    pcfg = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", [], {"download": {"source": str(dump)}})
    lang_dir = tmp_path / "data" / "hu"
    run_stages(pcfg, lang_dir, ["download", "extract"], quiet=True, log=LOG)
    first = (lang_dir / "extract" / "part-00000.jsonl").read_bytes()
    os.utime(dump)  # touched, same bytes: nothing downstream changes
    assert [r["state"] for r in status_rows(pcfg, lang_dir)][:2] == ["stale", "stale"]
    run_stages(pcfg, lang_dir, ["download", "extract"], quiet=True, log=LOG)
    assert json.loads((lang_dir / "extract" / MANIFEST).read_text())["outputs"]["part-00000.jsonl"]["mtime_ns"] == \
        (lang_dir / "extract" / "part-00000.jsonl").stat().st_mtime_ns
    other = write_sample_dump(tmp_path / "newer", 30, seed=1)
    os.replace(other, dump)  # `mv new.bz2 dump.bz2`
    os.replace(other.with_name(INDEX.replace(f"{WIKI}-{DATE}", "huwiki-sample")), dump.with_name(other.name.replace(
        "multistream.xml.bz2", "multistream-index.txt.bz2")))
    rows = {r["stage"]: r for r in status_rows(pcfg, lang_dir)}
    assert rows["download"]["state"] == "stale" and "input dump changed" in rows["download"]["reason"]
    run_stages(pcfg, lang_dir, ["download", "extract"], quiet=True, log=LOG)
    assert (lang_dir / "extract" / "part-00000.jsonl").read_bytes() != first


def test_html_error_page_sent_with_200_is_not_a_dump(tmp_path, server):
    server.publish()
    page = b"<!DOCTYPE html><html><body>502 Bad Gateway</body></html>"
    server.files[f"/{WIKI}/{DATE}/{DUMP}"] = page
    with pytest.raises(DataError, match=re.escape(f"/{DUMP}: is an HTML page, not a dump")):
        run_download(tmp_path, server, source=f"{server.url}/{WIKI}/{DATE}/{DUMP}")
    assert_nothing_complete(tmp_path)
    assert not (tmp_path / "data" / "hu" / ".cache" / "download" / f"{DUMP}.part").exists()
    server.files[f"/{WIKI}/{DATE}/{DUMP}"] = b"PK\x03\x04 not bzip2 at all"
    with pytest.raises(DataError, match=r"not bzip2 data \(starts with b'PK"):
        run_download(tmp_path, server, source=f"{server.url}/{WIKI}/{DATE}/{DUMP}")
    assert_nothing_complete(tmp_path)


def test_resumed_download_must_reach_the_announced_size(tmp_path, server):
    """A .part resumed after a kill is done only at the Content-Length the server announced when it began."""
    dump, _ = server.publish()
    url = f"{server.url}/{WIKI}/{DATE}/{DUMP}"
    kept = interrupted_download(tmp_path, server, url)
    server.faults[f"/{WIKI}/{DATE}/{DUMP}"] = ["416"]  # a proxy that claims the file ends where the .part does
    with pytest.raises(DataError, match=f"downloaded {kept} bytes, expected {len(dump)}"):
        run_download(tmp_path, server, source=url)
    assert_nothing_complete(tmp_path)


def test_missing_local_dump_is_named(tmp_path):
    missing = tmp_path / "nowhere" / DUMP
    with pytest.raises(DataError, match=re.escape(f"{missing}: dump file not found")):
        run_download(tmp_path, None, source=str(missing))
    assert_nothing_complete(tmp_path)


def test_killed_download_resumes_from_the_part_file(tmp_path, server):
    dump, _ = server.publish()
    path = f"/{WIKI}/{DATE}/{DUMP}"
    server.faults[path] = ["stall"]
    part = tmp_path / "data" / "hu" / ".cache" / "download" / f"{DUMP}.part"
    cli = [sys.executable, "-m", "pipeline.cli", "stage", "download", "--lang", "hu", "--quiet",
           "--workdir", str(tmp_path / "data"), "--config", str(DEFAULT_CONFIG_PATH),
           "--set", f"download.base_url={server.url}", "--set", f"download.date={DATE}"]
    proc = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while not (server.served(DUMP) and part.exists() and part.stat().st_size == server.served(DUMP)[0].sent > 0):
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    server.release.set()
    kept = part.stat().st_size
    manifest = run_download(tmp_path, server, f"download.date={DATE}")
    assert server.served(DUMP)[-1].range == f"bytes={kept}-" and server.served(DUMP)[-1].sent == len(dump) - kept
    assert (out_dir(tmp_path) / DUMP).read_bytes() == dump
    assert manifest["counts"]["bytes_resumed"] == kept
    assert manifest["counts"]["bytes_downloaded"] == len(dump) - kept + len(server.files[f"/{WIKI}/{DATE}/{INDEX}"])


def test_a_short_body_with_a_matching_content_length_is_not_a_finished_download(tmp_path, server):
    """The server sends fewer bytes than the dump holds and a Content-Length that says so: the end of the dump
    (a complete bz2 stream ending the XML with </mediawiki>) decides, before the stage is done."""
    from pipeline.tools.sample_dump import write_sample_dump

    dump = write_sample_dump(tmp_path / "dumps", 60, seed=0).read_bytes()
    streams = [m.start() for m in re.finditer(rb"BZh91AY&SY", dump)]
    url = f"{server.url}/{WIKI}/{DATE}/{DUMP}"
    cut = len(dump) - 100  # in the last page stream
    for cut, problem in ((cut, rf"ends inside the bz2 stream that starts at byte {streams[-2]:,} of {cut:,}"),
                         (streams[-1], r"its last bz2 stream \(at byte [\d,]+\) does not end with </mediawiki>")):
        server.files[f"/{WIKI}/{DATE}/{DUMP}"] = dump[:cut]
        with pytest.raises(DataError, match=rf"^{re.escape(url)}: {problem}: cut short"):
            run_download(tmp_path, server, source=url)
        assert_nothing_complete(tmp_path)
        assert not (tmp_path / "data" / "hu" / ".cache" / "download" / f"{DUMP}.part").exists()
    server.files[f"/{WIKI}/{DATE}/{DUMP}"] = dump
    run_download(tmp_path, server, source=url)
    assert (out_dir(tmp_path) / DUMP).read_bytes() == dump
