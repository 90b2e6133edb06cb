"""Kill-and-rerun trials of `pipeline run`: a stop signal at a random moment, then the same command again.

    .venv/bin/python bench/kill_rerun.py [--dump PATH] [--trials 20] [--workers 2] [--seed 0]
                                         [--corpus [NAME=]PATH[:WEIGHT] ...] [--set STAGE.KEY=VALUE ...]
    .venv/bin/python bench/kill_rerun.py --smoke   # one trial on a generated dump of 60 articles

First one clean run (its duration sets the range of kill times), then --trials trials, each in a fresh work dir:
`pipeline run` is sent SIGKILL, SIGTERM or SIGINT (chosen at random) after a random share of the clean run's
duration, to the main process alone or to its whole process group (as a terminal's Ctrl-C or a cgroup kill do);
in a third of the trials the first re-run is killed too; then the same command runs to the end (a run that
finishes before its signal is not a trial: another is drawn). Printed: the trials by signal and by the stage that
was running, re-runs that did not exit 0, stages whose output files differ from the clean run's (sha256 of every
file, manifests aside), and what the killed runs left behind after the re-run: `.tmp`, `.scratch` and `.old-<pid>`
directories, files in the stage caches that a clean run does not keep, files in the trial's private TMPDIR,
/dev/shm segments created during the trial, and processes still running with the trial's work dir on their
command line.
Default dump: ../shared/data/wiki/huwiki-20240920-pages-articles-multistream.xml.bz2.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMP_NAME = "shared/data/wiki/huwiki-20240920-pages-articles-multistream.xml.bz2"
DEFAULT_DUMP = next((d / DUMP_NAME for d in (ROOT.parent, ROOT.parent.parent) if (d / DUMP_NAME).is_file()),
                    ROOT.parent / DUMP_NAME)  # beside the checkout, or beside a worktree's directory
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)


def command(dump: Path, work: Path, workers: int, settings: list[str]) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "run", "--lang", "hu", "--dump", str(dump), "--workdir", str(work),
            "--workers", str(workers), "--quiet", *settings]


def environment(work: Path) -> dict:
    tmp = work / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}


def outputs(lang_dir: Path) -> dict[str, dict]:
    """{stage: {file: sha256}} from the manifests (each manifest lists every file of its stage with its sha256)."""
    found = {}
    for manifest in sorted(lang_dir.glob("*/_manifest.json")):
        data = json.loads(manifest.read_text(encoding="utf-8"))
        found[data["stage"]] = {rel: meta["sha256"] for rel, meta in data["outputs"].items()}
    return found


def running_stage(lang_dir: Path) -> str:
    try:
        log = (lang_dir / "pipeline.log").read_text(encoding="utf-8")
    except OSError:
        return "start"
    stages = re.findall(r"INFO (\w+): running", log)
    return stages[-1] if stages else "start"


def kill_after(cmd: list[str], env: dict, delay: float, signum: int, group: bool, lang_dir: Path) -> tuple[str, int]:
    """Run cmd, send the signal after `delay` seconds; (stage running then, exit code) ('done' if it finished)."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        proc.wait(delay)
        return "done", proc.returncode
    except subprocess.TimeoutExpired:
        pass
    stage = running_stage(lang_dir)
    if group:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    code = proc.wait()
    if not group:  # a SIGKILL of the main process alone orphans nothing: the workers die with it (PDEATHSIG)
        time.sleep(0.5)
    return stage, code


def cache_files(lang_dir: Path) -> set[str]:
    return {str(p.relative_to(lang_dir)) for p in (lang_dir / ".cache").rglob("*") if p.is_file()}


def leftovers(work: Path, lang_dir: Path, shm_before: set[str], clean_cache: set[str]) -> list[str]:
    """What the killed runs left that a clean run does not (a clean hdf5 stage keeps its finished files in its
    cache for later runs)."""
    found = [p.name for pattern in (".*.tmp", ".*.scratch", ".*.old-*") for p in lang_dir.glob(pattern)]
    found += sorted(cache_files(lang_dir) - clean_cache)
    found += [f"TMPDIR/{p.name}" for p in (work / "tmp").iterdir()]
    found += [f"/dev/shm/{name}" for name in _shared_memory() - shm_before]
    found += [f"process {pid}" for pid in _processes_mentioning(str(work))]
    return found


def _shared_memory() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("psm_*")} if Path("/dev/shm").is_dir() else set()


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, default=DEFAULT_DUMP)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scratch", type=Path, default=None, help="where the work dirs go (default: a temp dir)")
    parser.add_argument("--smoke", action="store_true", help="one trial on a generated dump, removed after")
    parser.add_argument("--corpus", action="append", default=[], help="a corpus beside the dump (as `pipeline run "
                        "--corpus`: [NAME=]PATH[:WEIGHT]), repeatable")
    parser.add_argument("--set", action="append", default=[], help="a setting of every run (STAGE.KEY=VALUE)")
    args = parser.parse_args()
    settings = [flag for value in args.corpus for flag in ("--corpus", value)] + \
        [flag for value in args.set for flag in ("--set", value)]
    if args.smoke:
        from _smoke_data import ARTICLES, SETTINGS
        from pipeline.tools.sample_dump import write_sample_dump

        args.scratch = Path(tempfile.mkdtemp(prefix="kill_rerun-"))
        args.dump, args.trials, settings = write_sample_dump(args.scratch / "dump", ARTICLES), 1, settings + SETTINGS
    if not args.dump.is_file():
        sys.exit(f"{args.dump}: not found (pass --dump)")
    rng = random.Random(args.seed)
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="kill_rerun-"))

    clean_dir = scratch / "clean"
    started = time.perf_counter()
    subprocess.run(command(args.dump, clean_dir, args.workers, settings), env=environment(clean_dir), cwd=ROOT,
                   check=True)
    clean_s = time.perf_counter() - started
    clean, clean_cache = outputs(clean_dir / "hu"), cache_files(clean_dir / "hu")
    print(f"clean run: {clean_s:.1f} s, {sum(map(len, clean.values()))} files in {len(clean)} stages", flush=True)

    by_signal, by_stage = collections.Counter(), collections.Counter()
    failed_reruns, differing, left, exit0_after_signal = [], [], [], []
    trial = finished_first = 0
    while trial < args.trials:
        work = scratch / f"trial-{trial:02d}"
        lang_dir = work / "hu"
        env, cmd = environment(work), command(args.dump, work, args.workers, settings)
        shm_before = _shared_memory()
        signum, group = rng.choice(SIGNALS), rng.random() < 0.5
        stage, code = kill_after(cmd, env, rng.uniform(0.02, 0.9) * clean_s, signum, group, lang_dir)
        if stage == "done":  # the run was faster than the clean one (the machine is shared): not a kill, draw again
            finished_first += 1
            shutil.rmtree(work)
            continue
        note = f"{signal.Signals(signum).name}{' (group)' if group else ''} in {stage}"
        if code == 0:
            exit0_after_signal.append(f"trial {trial}: {note}")
        if rng.random() < 1 / 3:  # kill the first re-run too
            signum2 = rng.choice(SIGNALS)
            stage2, _ = kill_after(cmd, env, rng.uniform(0.02, 0.6) * clean_s, signum2, False, lang_dir)
            note += f", re-run {signal.Signals(signum2).name} in {stage2}"
        rerun = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        by_signal[signal.Signals(signum).name] += 1
        by_stage[stage] += 1
        if rerun.returncode:
            failed_reruns.append(f"trial {trial} ({note}): exit {rerun.returncode}: {rerun.stderr.strip()[-300:]}")
        got = outputs(lang_dir)
        diff = sorted(s for s in clean.keys() | got.keys() if clean.get(s) != got.get(s))
        if diff:
            differing.append(f"trial {trial} ({note}): {', '.join(diff)}")
        found = leftovers(work, lang_dir, shm_before, clean_cache)
        if found:
            left.append(f"trial {trial} ({note}): {', '.join(found)}")
        print(f"trial {trial:2d}: {note}: re-run exit {rerun.returncode}, {len(diff)} stages differ, "
              f"{len(found)} leftovers", flush=True)
        shutil.rmtree(work)
        trial += 1

    print(f"\ntrials: {args.trials} (dump {args.dump.name}, --workers {args.workers}, seed {args.seed}; "
          f"clean run {clean_s:.1f} s; {finished_first} more runs finished before their signal and were drawn again)")
    print("signals: " + ", ".join(f"{k} {v}" for k, v in sorted(by_signal.items())))
    print("killed in stage: " + ", ".join(f"{k} {v}" for k, v in sorted(by_stage.items())))
    for title, items in (("re-runs not exiting 0", failed_reruns), ("exit 0 after a stop signal", exit0_after_signal),
                         ("outputs differing from the clean run", differing),
                         ("leftovers after the re-run", left)):
        print(f"{title}: {len(items)}")
        for item in items:
            print(f"  {item}")
    if args.smoke:
        shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
