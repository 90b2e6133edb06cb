"""Every bench/ script end to end in its --smoke mode (its smallest setting, CPU, no network, data it generates), so
that a change to an internal API a benchmark uses fails here, not when someone next runs the benchmark. The scripts
are found by glob: a new one needs a --smoke mode and a line in EXPECTED."""
from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from pretrain_cli import ENV

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (REPO / "bench").glob("[!_]*.py"))  # bench/_*.py: the scripts' helpers
# A row of each script's figures, searched in its output (numbers only: a crash in a table's code shows).
EXPECTED = {
    "checkpoint.py": r"background stall / blocking stall: \d+\.\d% after the first save",
    "dedup.py": r"\| 2x \| [\d,]+ \| ours \| [\d,]+ \| [\d,]+ \| [\d,]+ \| [\d,]+ \| [\d,]+ MiB \|\n(.|\n)*"
                r"\| 1\.0 \(exact\) \| \d+ \| 1\.000 \| 1\.000 \| 1\.000 \|(.|\n)*"
                r"\| exact copy \| \d+ \| 0 \| 1\.000 \| 1\.000 \| 1\.000 \| 1\.000 \| 1\.000 \|",
    "continued_trainer.py": r"roberta: ours [\d,]+ / Trainer [\d,]+ real tokens/s best round, [\d,]+ / [\d,]+ mean; "
                            r"ours / Trainer \d+\.\d\dx best round, \d+\.\d\dx median of the rounds' ratios",
    "corpus.py": r"web \dx / wikipedia 2x CPU per MB \([\d.]+ / [\d.]+ MB\): \d+\.\d\d\nwikipedia peak RSS 2x / 1x: \d",
    "document_memory.py": r"\| filter \| [\d,]+ MiB \| [\d,]+ MiB \| \d+\.\d \| -?\d+\.\d \|",
    "estimate_memory.py": r"tiny +1 +\d+ +\d+ +\d+\.\d\d",
    "eval_cost.py": r"held-out instance / training sequence: \d+\.\d\d \(time_plan\.EVAL_INSTANCE_COST",
    "fineweb2_agreement.py": r"ours: 200 documents, kept \d+, [\d,]+ documents per CPU-second",
    "langid_calibration.py": r"el: \d+ of \d+ own articles identified as el \(their probability: 1% \d\.\d{3}",
    "extract.py": r"extract stage, 2 workers +[\d.]+ +\d+ +[\d.]+ +\d+ ",
    "gpu.py": r"bert tiny +32 packed +[\d,.]+ +[\d,]+ (.|\n)*modernbert tiny +64 packed +[\d,.]+ +[\d,]+ ",
    "hdf5.py": r"scaling 1 -> 2 workers: \d+\.\d\dx",
    "kill_rerun.py": r"killed in stage: \w+ 1\nre-runs not exiting 0: \d+",
    "modernbert.py": r"wiki2bert / transformers: \d+\.\d\dx best round, \d+\.\d\dx mean, "
                     r"\d+\.\d\dx median of the rounds' ratios, memory \d+\.\d\dx",
    "masking.py": r"dynamic - static: wait [+-]\d+\.\d\d ms a step \([+-]\d+\.\d\d% of a step\); reading [+-]\d+\.\d\d ms",
    "multilingual.py": r"several / one-language runs in sequence: wall \d+\.\d\d, CPU \d+\.\d\d; peak tree RSS / the "
                       r"largest one-language run's: \d+\.\d\d",
    "objectives.py": r"\| \(d\) dynamic 30% MLM-only, doc-sentences \| \d+ \| [01]\.\d{4} \| [01]\.\d{4} \|",
    "packing.py": r"packed, nested / padded: \d+\.\d\dx best round",
    "parquet_tasks.py": r"once per task / once per process: \d+\.\d\dx CPU; peak RSS [\d,]+ MiB",
    "preemption.py": r"steps 1-2 equal the uninterrupted run's bit for bit",
    "pretrain.py": r"speed-up: \d+\.\d\dx best round",
    "schedules.py": r"losses equal at every step: True\nthe scheduled run.s own work: \d+\.\d us a step, \d+\.\d{4}% of a constant",
    "rehearsal.py": r"local: [\d,.]+ s wall, [\d,.]+ s CPU; serial \(main threads\) [\d,.]+ s CPU(.|\n)*verify passed",
    "scale.py": r"\| total \| \d+\.\d\d, \d+\.\d\d \| \d+\.\d\d, \d+\.\d\d \|",
    "sentences_filter.py": r"web rules for every document +[\d,]+( +[\d.]+){5} +\d+\n(?s:.*)"
                           r"langdetect +[\d.]+% +[\d.]+% +[\d,]+ +[\d.]+",
    "tokenizer_kinds.py": r"bpe +bpe +[\d,]+ +\d+\.\d\d +[\d,]+",
    "two_rank_exits.py": r"exit codes: 0: 1\nfailed workers: 0; 'terminate called' lines: 0",
    "unspaced_filter.py": r"\| zh: our prose \+ garbage \| `zh` profile \| 9 \| 4 \| \d+ \| \d+ \|(.|\n)*"
                          r"\| ja \| this checkout \| \d+ \| 0 \| 0 \| 0 \| 0 \| 0 \| \d+ \|(.|\n)*"
                          r"\| zh: wikitext \| [\d,]+ \| [\d,]+ \| [\d,]+ \| \d\.\d\d \|",
    "splitter_agreement.py": r"rule splitter F1 vs quntoken [01]\.\d{4}: \d+ boundaries",
    "vocab_memory.py": r"\| tokenizers \| - \| all \| [\d,]+ \| [\d,]+ MiB \| [\d.]+ \|",
    "vocab_shard.py": r"2x +[\d.]+ MB: +[\d.]+ MB/s wall",
    "zero_optimizer.py": r"lamb +2 +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+",
}
FAST = {"extract.py", "splitter_agreement.py", "vocab_memory.py", "vocab_shard.py"}  # ~1-3 s each; the rest slow
# CPU only, whatever the machine has; one thread a process (ENV): several of these start a few processes, which on two
# cores otherwise oversubscribe them (bench/preemption.py: ~4x slower)
BENCH_ENV = {**ENV, "CUDA_VISIBLE_DEVICES": ""}


# scripts run at once: most are one process of one thread at a time (BENCH_ENV), so on two cores two at once take
# about half the wall time of one after another
CONCURRENT_SCRIPTS = 2


def run_smoke(script: str, work: Path) -> subprocess.CompletedProcess:
    # the timeout catches a hang: the slowest smoke, bench/objectives.py's, took 84 s alone at load 3, but over 300 s
    # at load 7-14 two at a time
    return subprocess.run([sys.executable, str(REPO / "bench" / script), "--smoke"], cwd=work,
                          env={**BENCH_ENV, "TMPDIR": str(work)}, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def smoke_runs(request, tmp_path_factory) -> dict[str, Future]:
    """{script: its --smoke run} of every script the session's tests run, started when the first of them asks,
    CONCURRENT_SCRIPTS at a time in the tests' order; each test waits for its own."""
    scripts = [item.callspec.params["script"] for item in request.session.items
               if getattr(item, "originalname", None) == "test_bench_script_smoke"]
    pool = ThreadPoolExecutor(CONCURRENT_SCRIPTS)
    yield {script: pool.submit(run_smoke, script, tmp_path_factory.mktemp(script)) for script in scripts}
    pool.shutdown(cancel_futures=True)  # those not started when a test stopped the session (-x)


@pytest.mark.parametrize("script", [s if s in FAST else pytest.param(s, marks=pytest.mark.slow) for s in SCRIPTS])
def test_bench_script_smoke(script, smoke_runs):
    assert script in EXPECTED, f"bench/{script}: add a pattern of its --smoke output to EXPECTED"
    done = smoke_runs[script].result()
    assert done.returncode == 0, f"bench/{script} --smoke exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert re.search(EXPECTED[script], done.stdout), f"bench/{script} --smoke printed:\n{done.stdout[-3000:]}"
