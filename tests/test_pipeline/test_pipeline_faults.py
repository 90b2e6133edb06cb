"""`pipeline` against a failing environment: a busy, read-only or missing work dir, a full disk, stop signals.

Each fault must give one `error:` line naming the file, a non-zero exit, and nothing that looks complete.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline.tools.sample_dump import write_sample_dump

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    return write_sample_dump(tmp_path_factory.mktemp("dump"), 300, 0)


def pipeline(*args, cwd: Path, preexec=None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, env=env, preexec_fn=preexec, timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def leftovers(lang_dir: Path) -> list[str]:
    """What a failed attempt must not leave: temporary or scratch dirs, and markers without a cause."""
    found = [p.name for p in lang_dir.glob(".*.tmp")] + [p.name for p in lang_dir.glob(".*.scratch")]
    found += [p.name for p in (lang_dir / ".state").glob("*.failed") if not p.read_text().strip()]
    return found


@contextlib.contextmanager
def mounted_tmpfs(path: Path, options: str):
    """A tmpfs at `path` (root only); skips the test where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_second_run_on_a_busy_work_dir_refuses_at_once(tmp_path):
    lang_dir = tmp_path / "data" / "hu"
    lang_dir.mkdir(parents=True)
    with open(lang_dir / ".lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        started = time.time()
        result = pipeline("run", "--lang", "hu", "--workdir", tmp_path / "data", "--quiet", cwd=tmp_path)
    assert result.returncode == 1 and time.time() - started < 30
    line = one_error_line(result)
    assert str(lang_dir) in line and "another pipeline run (pid 4242)" in line
    assert sorted(p.name for p in lang_dir.iterdir()) == [".lock"]  # not even a log line written


def test_lock_of_a_killed_run_is_free(tmp_path, dump):
    lang_dir = tmp_path / "data" / "hu"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from pipeline.workdir import lock_work_dir
        lock_work_dir(Path({str(lang_dir)!r}))
        print("locked", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait()
    result = pipeline("run", "--lang", "hu", "--workdir", tmp_path / "data", "--dump", dump, "--to", "download",
                      "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_workdir_that_is_a_file(tmp_path):
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("x")
    result = pipeline("run", "--lang", "hu", "--workdir", not_a_dir, cwd=tmp_path)
    assert result.returncode == 2
    assert one_error_line(result) == f"error: --workdir: {not_a_dir} is a file, not a directory"


def test_read_only_work_dir_even_a_finished_one(tmp_path, dump):
    work = tmp_path / "data"
    args = ["run", "--lang", "hu", "--workdir", work, "--dump", dump, "--to", "download", "--quiet"]
    assert pipeline(*args, cwd=tmp_path).returncode == 0
    (work / "hu" / ".lock").unlink()
    if os.geteuid() == 0:  # root writes through permission bits: make the directory a read-only mount
        if subprocess.run(["mount", "--bind", str(work), str(work)], capture_output=True).returncode:
            pytest.skip("cannot bind-mount here")
        subprocess.run(["mount", "-o", "remount,bind,ro", str(work)], check=True)
    else:
        for p in (work, work / "hu"):
            p.chmod(0o555)
    try:
        result = pipeline(*args, cwd=tmp_path)
        status = pipeline("status", "--lang", "hu", "--workdir", work, "--dump", dump, cwd=tmp_path)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(work)], check=False)
        else:
            for p in (work, work / "hu"):
                p.chmod(0o755)
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"error: {work / 'hu'}: cannot write to the work directory (")
    assert status.returncode == 0 and status.stdout.splitlines()[1].split()[:2] == ["download", "done"]


def _file_size_limit(limit: int):
    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limit_file_size


def test_full_disk_as_a_file_size_limit(tmp_path, dump):
    """RLIMIT_FSIZE makes writes past 64 KiB fail (EFBIG) as a full disk does; the extract parts are larger."""
    work = tmp_path / "data"
    result = pipeline("run", "--lang", "hu", "--workdir", work, "--dump", dump, "--to", "extract", "--quiet",
                      cwd=tmp_path, preexec=_file_size_limit(64 << 10))
    assert result.returncode == 1
    line = one_error_line(result)
    assert "File too large" in line and "stage extract stopped" in line and str(work / "hu") in line
    lang_dir = work / "hu"
    assert not (lang_dir / "extract").exists() and leftovers(lang_dir) == []
    assert pipeline("run", "--lang", "hu", "--workdir", work, "--dump", dump, "--to", "extract", "--quiet",
                    cwd=tmp_path).returncode == 0


@pytest.mark.slow
def test_full_disk_on_a_small_tmpfs(tmp_path, dump):
    work = tmp_path / "small"
    with mounted_tmpfs(work, "size=256k"):
        result = pipeline("run", "--lang", "hu", "--workdir", work, "--dump", dump, "--to", "extract", "--quiet",
                          cwd=tmp_path)
        lang_dir = work / "hu"
        assert result.returncode == 1
        line = one_error_line(result)
        assert "No space left on device" in line and str(lang_dir) in line
        assert not (lang_dir / "extract").exists() and leftovers(lang_dir) == []
        used = sum(p.stat().st_size for p in work.rglob("*") if p.is_file())
        assert used < 64 << 10  # the partial parts were removed, freeing the space


SWALLOWING_STAGE = """
import os, signal, sys, time, types, dataclasses
sys.path.insert(0, {repo!r})
from pipeline.stages import Stage, StageCounts
import pipeline.cli as cli

@dataclasses.dataclass(frozen=True)
class Config:
    pass

def swallow(config, ctx):
    class Slow:  # a library object whose destructor runs when the signal arrives: Python only prints the exception
        def __del__(self):
            os.kill(os.getpid(), signal.{signal})
            time.sleep(0.2)
    Slow()
    (ctx.out_dir / "out.txt").write_text("complete-looking")
    return StageCounts({{}})

sys.modules["pipeline.stages.swallow"] = types.SimpleNamespace(STAGE=Stage("swallow", Config, swallow))
sys.argv = ["pipeline", "stage", "swallow", "--lang", "hu", "--workdir", {work!r}, "--config", {yaml!r}, "--quiet"]
cli.main()
"""


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_swallowed_stop_signal_never_ends_in_exit_0_or_a_done_stage(tmp_path, signame):
    yaml_path = tmp_path / "stages.yaml"
    yaml_path.write_text("stages: [swallow]\nlanguages: {default: {}}\n")
    script = tmp_path / "swallow.py"
    script.write_text(SWALLOWING_STAGE.format(repo=str(REPO), work=str(tmp_path / "data"), yaml=str(yaml_path),
                                              signal=signame))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 128 + getattr(signal, signame)
    assert result.stderr.strip().endswith("interrupted; re-run the same command to continue")
    lang_dir = tmp_path / "data" / "hu"
    assert not (lang_dir / "swallow").exists() and leftovers(lang_dir) == []


def _shared_memory_of(pids: list[int]) -> set[str]:
    """The /dev/shm segments these processes have mapped."""
    segments = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            segments |= {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                         if "/dev/shm/" in line}
    return segments


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def test_killed_extract_leaves_nothing_after_one_rerun(tmp_path, dump):
    work = tmp_path / "data"
    lang_dir = work / "hu"
    args = ["run", "--lang", "hu", "--workdir", work, "--dump", dump, "--to", "extract", "--workers", "2", "--quiet",
            "--set", "extract.articles_per_part=20"]
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", *map(str, args)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (lang_dir / ".extract.tmp" / "part-00001.jsonl").exists():  # workers are extracting
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.01)
    mapped = _shared_memory_of([proc.pid, *_children(proc.pid)])
    os.killpg(proc.pid, signal.SIGKILL)  # the whole group, as a scheduler or the OOM killer of a cgroup does
    proc.wait()
    assert pipeline(*args, cwd=tmp_path).returncode == 0
    assert [s for s in mapped if Path(s).exists()] == []
    assert leftovers(lang_dir) == [] and not (lang_dir / ".cache" / "extract").exists()


VOCAB_KILLED_WHILE_TRAINING = """
import sys, time
sys.path.insert(0, {repo!r})
import sentencepiece
import pipeline.cli as cli

def train_forever(**kwargs):
    print("training", flush=True)
    time.sleep(600)

sentencepiece.SentencePieceTrainer.train = train_forever
sys.argv = ["pipeline", *sys.argv[1:]]
cli.main()
"""


@pytest.mark.slow
def test_killed_vocab_leaves_nothing_after_one_rerun(tmp_path, dump):
    work = tmp_path / "data"
    lang_dir = work / "hu"
    private_tmp = tmp_path / "tmp"  # TMPDIR: where tempfile would put a temporary directory
    private_tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(private_tmp)}
    common = ["--lang", "hu", "--workdir", work, "--dump", dump, "--quiet", "--set", "vocab.vocab_size=300",
              "--set", "sentences.splitter=rules"]
    assert pipeline("run", "--to", "dedup", *common, cwd=tmp_path).returncode == 0
    script = tmp_path / "vocab_forever.py"
    script.write_text(VOCAB_KILLED_WHILE_TRAINING.format(repo=str(REPO)))
    proc = subprocess.Popen([sys.executable, str(script), "stage", "vocab", *map(str, common)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "training"
    proc.kill()
    proc.wait()
    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "stage", "vocab", *map(str, common)], cwd=tmp_path,
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert list(private_tmp.iterdir()) == [] and leftovers(lang_dir) == []


def test_sigterm_to_the_whole_group_stops_a_parallel_stage_promptly(tmp_path, dump):
    """Workers killed by the signal while waiting for a task used to take the pool's queue lock with them, and the
    main process hung for ever in Pool.terminate()."""
    work = tmp_path / "data"
    lang_dir = work / "hu"
    args = ["run", "--lang", "hu", "--workdir", work, "--dump", dump, "--to", "extract", "--workers", "2", "--quiet",
            "--set", "extract.articles_per_part=20"]
    for attempt in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", *map(str, args)], cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while not (lang_dir / ".extract.tmp" / f"part-0000{attempt + 1}.jsonl").exists():
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"attempt {attempt}: still running 30 s after SIGTERM")
        assert code == 128 + signal.SIGTERM
        assert proc.stderr.read().strip().splitlines()[-1] == "interrupted; re-run the same command to continue"
        assert not (lang_dir / "extract").exists() and leftovers(lang_dir) == []
