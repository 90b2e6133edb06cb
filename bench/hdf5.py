"""Benchmark of the hdf5 stage: input tokens/s per core (seq 128, seq 512, both; dupe_factor 5), scaling from
1 to 2 workers, the Rust tokenizer alone as the baseline, and peak memory per worker, also on a ~100 MB shard.

Shards are built from ../shared/data/hu/ (documents: the Bible's chapters, LibreOffice help in runs of 20
paragraphs) with ../shared/data/vocab/wikibert-hu-cased-vocab.txt. Each measurement runs in a fresh process;
peak RSS is the largest of that process and its workers (ru_maxrss).

    .venv/bin/python bench/hdf5.py [--big-mb 100] [--skip-big]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
TEXTS = [DATA / "hu" / "karoli_1908_verses.txt", DATA / "hu" / "libreoffice-help-hu.hu.txt"]
VOCAB = DATA / "vocab" / "wikibert-hu-cased-vocab.txt"


def hu_documents() -> list[list[str]]:
    docs, doc = [], []
    for line in TEXTS[0].read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            if doc:
                docs.append(doc)
            doc = []
        elif line.strip():
            doc.append(line.strip())
    if doc:
        docs.append(doc)
    paragraphs = [line.strip() for line in TEXTS[1].read_text(encoding="utf-8").splitlines() if line.strip()]
    docs += [paragraphs[i:i + 20] for i in range(0, len(paragraphs), 20)]
    return docs


def write_shards(docs: list[list[str]], directory: Path, shards: int, repeat: int = 1) -> None:
    from pipeline.fileio import write_document

    directory.mkdir(parents=True)
    files = [open(directory / f"training_{i:04d}.txt", "w", encoding="utf-8") for i in range(shards)]
    for r in range(repeat):
        for i, doc in enumerate(docs):
            write_document(files[(i + r) % shards], doc)
    for f in files:
        f.close()


def run_stage(shard_dir: str, out: str, variants: list[tuple[int, int]], workers: int, queue) -> None:
    from pipeline.stages.hdf5 import Hdf5Config, Variant, run_standalone

    config = Hdf5Config(variants=[Variant(seq, preds) for seq, preds in variants], dupe_factor=5)
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    counts = run_standalone(config, Path(shard_dir), VOCAB, Path(out), workers=workers, force=True, quiet=True)
    seconds, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_started
    peak_kib = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    queue.put((counts["input_tokens"], counts["instances"], seconds, cpu, peak_kib / 1024))


def _cpu_seconds() -> float:
    """CPU time of this process and its finished workers: unlike wall time, not inflated by other users' load."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def tokenizer_alone(shard_dir: str, queue) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from pipeline.fileio import iter_documents
    from core.wordpiece import load_tokenizer

    tokenizer = load_tokenizer(VOCAB)
    sentences = [s for path in sorted(Path(shard_dir).glob("*.txt")) for doc in iter_documents(path) for s in doc]
    started, cpu_started = time.perf_counter(), time.process_time()
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(sentences, add_special_tokens=False))
    queue.put((tokens, time.perf_counter() - started, time.process_time() - cpu_started))


def in_fresh_process(fn, *args):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=fn, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mb", type=int, default=100, help="size of the large shard for the memory run")
    parser.add_argument("--skip-big", action="store_true", help="only the small corpus")
    parser.add_argument("--only-big", action="store_true", help="only the large-shard memory run")
    args = parser.parse_args()
    if not all(p.is_file() for p in TEXTS + [VOCAB]):
        print(f"skipped: needs {', '.join(str(p) for p in TEXTS + [VOCAB])}")
        return
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores "
          "(shared machine: figures vary with the other users' load)")
    with tempfile.TemporaryDirectory(prefix="bench-hdf5-") as tmp:
        tmp = Path(tmp)
        docs = hu_documents()
        if not args.only_big:
            small_corpus_runs(docs, tmp)
        if not args.skip_big:
            large_shard_run(docs, tmp, args.big_mb)


def small_corpus_runs(docs: list[list[str]], tmp: Path) -> None:
    write_shards(docs, tmp / "two", shards=2)
    tokens, seconds, cpu = in_fresh_process(tokenizer_alone, str(tmp / "two"))
    base = tokens / cpu
    print(f"corpus: {sum(len(d) for d in docs):,} lines in {len(docs):,} documents, {tokens:,} tokens, 2 shards")
    print(f"baseline, Rust tokenizer alone (encode_batch, 1 thread): {tokens / seconds:,.0f} tokens/s wall, "
          f"{base:,.0f} tokens per CPU-second")
    print("tokens/s/core = input tokens / wall seconds / workers; tokens/CPU-s = per CPU-second of all processes")
    print(f"{'run':<24} {'workers':>7} {'instances':>10} {'wall s':>7} {'tokens/s/core':>14} "
          f"{'tokens/CPU-s':>13} {'vs tokenizer':>12} {'peak RSS MiB':>12}")
    rates = {}
    for label, variants, workers in [("seq 128 (max_pred 20)", [(128, 20)], 1),
                                     ("seq 512 (max_pred 80)", [(512, 80)], 1),
                                     ("seq 128 (max_pred 20)", [(128, 20)], 2),
                                     ("both (default stage)", [(128, 20), (512, 80)], 1),
                                     ("both (default stage)", [(128, 20), (512, 80)], 2)]:
        tokens, instances, seconds, cpu, peak = in_fresh_process(run_stage, str(tmp / "two"),
                                                                 str(tmp / "out"), variants, workers)
        rates[(label, workers)] = tokens / seconds
        print(f"{label:<24} {workers:>7} {instances:>10,} {seconds:>7.2f} {tokens / seconds / workers:>14,.0f} "
              f"{tokens / cpu:>13,.0f} {tokens / cpu / base:>12.2f} {peak:>12.0f}")
    speedup = rates[("both (default stage)", 2)] / rates[("both (default stage)", 1)]
    print(f"scaling 1 -> 2 workers: {speedup:.2f}x (ideal 2.00x on 2 idle cores)")
    shutil.rmtree(tmp / "out")


def large_shard_run(docs: list[list[str]], tmp: Path, big_mb: int) -> None:
        size = sum(len(s.encode("utf-8")) + 1 for d in docs for s in d) + len(docs)
        repeat = max(1, round(big_mb * 1e6 / size))
        write_shards(docs, tmp / "big", shards=1, repeat=repeat)
        mb = (tmp / "big" / "training_0000.txt").stat().st_size / 1e6
        tokens, instances, seconds, cpu, peak = in_fresh_process(run_stage, str(tmp / "big"), str(tmp / "out"),
                                                                 [(512, 80)], 1)
        print(f"large shard: {mb:.0f} MB, {tokens:,} tokens, seq 512, dupe_factor 5, 1 worker: "
              f"{instances:,} instances in {seconds:.1f} s ({tokens / seconds:,.0f} tokens/s wall, "
              f"{tokens / cpu:,.0f} per CPU-s), peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
