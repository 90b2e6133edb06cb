"""Peak memory of the vocab stage against `vocab.input_sentence_size` (sentencepiece's sample) and the corpus size.

sentencepiece keeps the sentences it samples in memory (reservoir sampling while it reads, seeded), so the stage's
peak RSS grows with input_sentence_size up to the corpus's sentence count and is flat beyond; this prints it for
several settings, on the whole corpus and on its first half, each in a fresh process (ru_maxrss), plus the HF
tokenizers trainer for comparison (it holds word counts: it grows with the distinct words, not the sentences).

Corpus: a `filter` stage output directory (`<workdir>/<lang>/filter`, e.g. from `bench/scale.py --keep`), or by
default the sample dump of `--articles` articles run to the filter stage in `--workdir`.

    nice .venv/bin/python bench/vocab_memory.py [--filter-dir DIR | --articles 40000] [--sizes 25000,100000,400000]
    .venv/bin/python bench/vocab_memory.py --smoke   # 60 articles, one size, vocab_size 1000, a temporary workdir
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def child(method: str, filter_dir: Path, parts: int, sentences: int, vocab_size: int) -> dict:
    """Runs in a fresh process: the vocab stage on the first `parts` parts."""
    from pipeline.stages import StageContext, vocab

    with tempfile.TemporaryDirectory(prefix="wiki2bert-vocab-memory-") as tmp:
        tmp = Path(tmp)
        subset = tmp / "filter"
        subset.mkdir()
        for path in sorted(filter_dir.glob("part-*.txt"))[:parts]:
            (subset / path.name).symlink_to(path.resolve())
        out = tmp / "vocab"
        out.mkdir()
        ctx = StageContext(lang="hu", out_dir=out, inputs={"dedup": subset, "filter": subset}, cache_dir=tmp / "cache",
                           workers=1, quiet=True, log=logging.getLogger("bench"))
        started = time.perf_counter()
        counts = vocab.run(vocab.VocabConfig(method=method, vocab_size=vocab_size, input_sentence_size=sentences),
                           ctx)
    return {"seconds": round(time.perf_counter() - started, 2), "corpus_sentences": counts["sentences"],
            "maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def run_child(*args) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps([str(a) for a in args])],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode:
        raise SystemExit(f"error: vocab run {args} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_corpus(workdir: Path, articles: int) -> Path:
    dump = subprocess.run([str(BIN / "pipeline"), "sample-dump", str(workdir / "dump"), "--pages", str(articles),
                           "-q"], check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([str(BIN / "pipeline"), "run", "--lang", "hu", "--dump", dump, "--workdir", str(workdir),
                    "--to", "filter", "--workers", "2", "--quiet"], check=True, env={**os.environ,
                                                                                      "PYTHONPATH": str(ROOT)})
    return workdir / "hu" / "filter"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        method, filter_dir, parts, sentences, vocab_size = json.loads(sys.argv[2])
        print(json.dumps(child(method, Path(filter_dir), int(parts), int(sentences), int(vocab_size))))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter-dir", type=Path)
    ap.add_argument("--articles", type=int, default=40_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/wiki2bert-vocab-memory"))
    ap.add_argument("--sizes", default="25000,100000,400000", help="input_sentence_size settings (0 = all)")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--smoke", action="store_true", help="60 articles, sizes 1000, vocab_size 1000, temporary")
    args = ap.parse_args()
    if args.smoke:
        from _smoke_data import ARTICLES, VOCAB_SIZE

        args.filter_dir, args.articles, args.sizes, args.vocab_size = None, ARTICLES, "1000", VOCAB_SIZE
        args.workdir = Path(tempfile.mkdtemp(prefix="wiki2bert-vocab-memory-"))
    filter_dir = args.filter_dir or make_corpus(args.workdir, args.articles)
    parts = len(list(filter_dir.glob("part-*.txt")))
    print(f"corpus {filter_dir}: {parts} parts, "
          f"{sum(p.stat().st_size for p in filter_dir.glob('part-*.txt')) / 1e6:.0f} MB; load {os.getloadavg()[0]:.1f}")
    print("| method | input_sentence_size | corpus | corpus sentences | peak RSS | wall s |")
    print("|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        for share, n in (("half", max(1, parts // 2)), ("all", parts)):
            r = run_child("sentencepiece", filter_dir, n, size, args.vocab_size)
            print(f"| sentencepiece | {size:,} | {share} | {r['corpus_sentences']:,} | {r['maxrss_mib']:,} MiB | "
                  f"{r['seconds']} |", flush=True)
    for share, n in (("half", max(1, parts // 2)), ("all", parts)):
        r = run_child("tokenizers", filter_dir, n, 0, args.vocab_size)
        print(f"| tokenizers | - | {share} | {r['corpus_sentences']:,} | {r['maxrss_mib']:,} MiB | {r['seconds']} |",
              flush=True)
    if args.filter_dir is None:
        shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
