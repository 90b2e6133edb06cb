"""Benchmark of the `vocab` and `shard` stages.

vocab: training time of the stage (read + BERT basic tokenization + training + conversion + tokenizer files)
against sentencepiece / tokenizers called directly on the same filter-format text, with the same settings.
shard: throughput (MB/s) and peak memory (ru_maxrss of a fresh process) on the corpus and on it repeated
`--repeat` times, against a plain copy of the same bytes (the I/O ceiling).

Text: ../shared/data/hu/*.txt turned into filter-stage parts (one sentence per line, blank line after each
document); skipped when absent. Each measurement runs in its own process (imports before the clock starts);
the best wall time and the best CPU time (user + sys, steadier on a shared machine) of `--runs` are reported.

    .venv/bin/python bench/vocab_shard.py [--runs 3] [--repeat 15] [--vocab-size 32000]
    .venv/bin/python bench/vocab_shard.py --smoke   # generated stand-in text (bench/_smoke_data.py), 1 run, seconds
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = next((d / "shared" for d in (ROOT.parent, ROOT.parent.parent) if (d / "shared" / "data").is_dir()),
              ROOT.parent / "shared")  # beside the checkout, or beside a worktree's directory
HU_TEXTS = [SHARED / "data" / "hu" / name for name in ("karoli_1908_verses.txt", "libreoffice-help-hu.hu.txt")]
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-ZÁÉÍÓÖŐÚÜŰ])")


def make_parts(out: Path, parts: int = 4) -> None:
    """Filter-format parts (with their document records) from the Hungarian texts: '## ' headings and every 25 lines
    start a document."""
    from pipeline.text_files import WIKIPEDIA_SOURCE, DocumentRecord, records_path, write_document, write_record

    docs, current = [], []
    for path in HU_TEXTS:
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line.startswith("## ") or len(current) >= 25:
                if current:
                    docs.append(current)
                current = []
            if line and not line.startswith("## "):
                current += [s for s in SENTENCE_END.split(line) if s]
        if current:
            docs.append(current)
            current = []
    out.mkdir(parents=True, exist_ok=True)
    for i in range(parts):
        text = out / f"part-{i:05d}.txt"
        with open(text, "w", encoding="utf-8") as f, open(records_path(text), "w", encoding="utf-8") as records:
            for d in range(i, len(docs), parts):
                write_document(f, docs[d])
                write_record(records, DocumentRecord(WIKIPEDIA_SOURCE, str(d)))


# --- one measurement, in a child process ---------------------------------------------------------------------------

def _context(filter_dir: Path, out: Path):
    import logging

    from pipeline.stages import StageContext
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return StageContext(lang="hu", out_dir=out, inputs={"dedup": filter_dir, "filter": filter_dir},
                        cache_dir=out.parent / "cache", workers=1, quiet=True, log=logging.getLogger("bench"))


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(kind: str, filter_dir: Path, out: Path, vocab_size: int) -> dict:
    import io

    import sentencepiece as spm
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    from pipeline.stages import shard, vocab

    parts = sorted(filter_dir.glob("part-*.txt"))
    ctx = _context(filter_dir, out)
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    result: dict = {}
    if kind == "sentencepiece-direct":
        c = vocab.VocabConfig()
        spm.set_random_generator_seed(c.seed)
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            input=[str(p) for p in parts], model_writer=model, model_type="bpe", vocab_size=vocab_size,
            character_coverage=c.character_coverage, input_sentence_size=c.input_sentence_size,
            shuffle_input_sentence=c.shuffle_input_sentence, normalization_rule_name="identity",
            max_sentence_length=vocab.SENTENCEPIECE_MAX_SENTENCE_BYTES, num_threads=1, minloglevel=2)
    elif kind == "tokenizers-direct":
        c = vocab.VocabConfig(method="tokenizers")
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.train([str(p) for p in parts], trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=c.min_frequency, limit_alphabet=c.limit_alphabet,
            special_tokens=vocab.bert_vocabulary([], c.unused_tokens, add_characters=False), show_progress=False))
    elif kind in ("sentencepiece-stage", "tokenizers-stage"):
        result = vocab.run(vocab.VocabConfig(method=kind.split("-")[0], vocab_size=vocab_size), ctx)
    elif kind == "shard-stage":
        result = shard.run(shard.ShardConfig(), ctx)
    elif kind == "copy":
        with open(out / "all.txt", "wb") as f:
            for p in parts:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 20)
    else:
        raise SystemExit(f"unknown measurement {kind}")
    seconds, cpu_seconds = time.perf_counter() - started, _cpu_seconds() - cpu_started
    return {"seconds": seconds, "cpu_seconds": cpu_seconds,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "counts": {k: v for k, v in result.items() if isinstance(v, (int, float))}}


def run_child(kind: str, filter_dir: Path, out: Path, vocab_size: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", kind, str(filter_dir), str(out), str(vocab_size)],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    if proc.returncode:
        raise SystemExit(f"{kind} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def best(kind: str, filter_dir: Path, out: Path, vocab_size: int, runs: int) -> tuple[float, float, dict]:
    """Best wall time, best CPU time (user + sys; less disturbed by other jobs on a shared machine), last result."""
    results = [run_child(kind, filter_dir, out, vocab_size) for _ in range(runs)]
    return min(r["seconds"] for r in results), min(r["cpu_seconds"] for r in results), results[-1]


def main() -> None:
    global HU_TEXTS
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=15, help="shard: corpus repeated this many times")
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--smoke", action="store_true", help="generated text, 1 run, repeat 2, vocab_size 1000")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_vocab_shard_") as tmp:
        tmp = Path(tmp)
        if args.smoke:
            from _smoke_data import VOCAB_SIZE, shared_data

            data = shared_data(tmp / "smoke")
            HU_TEXTS = [data / "hu" / path.name for path in HU_TEXTS]
            args.runs, args.repeat, args.vocab_size = 1, 2, VOCAB_SIZE
        if not all(p.is_file() for p in HU_TEXTS):
            print(f"skipped: {HU_TEXTS[0].parent} not found")
            return
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, shared with other "
              f"jobs (load average {os.getloadavg()[0]:.1f} at start); Python {platform.python_version()}")
        filter_dir = tmp / "filter"
        make_parts(filter_dir)
        size = sum(p.stat().st_size for p in filter_dir.iterdir())
        print(f"corpus: {size / 1e6:.1f} MB filter-format text from {', '.join(p.name for p in HU_TEXTS)}")
        print(f"\nvocab (vocab_size {args.vocab_size}, 1 thread; best wall / best CPU time of {args.runs} runs):")
        for method in ("sentencepiece", "tokenizers"):
            direct, direct_cpu, _ = best(f"{method}-direct", filter_dir, tmp / "out", args.vocab_size, args.runs)
            stage, stage_cpu, last = best(f"{method}-stage", filter_dir, tmp / "out", args.vocab_size, args.runs)
            print(f"  {method:13s} direct {direct:5.2f} s / {direct_cpu:5.2f} s CPU   stage {stage:5.2f} s / "
                  f"{stage_cpu:5.2f} s CPU   stage/direct {stage / direct:.2f}x wall, {stage_cpu / direct_cpu:.2f}x CPU"
                  f"   peak RSS {last['maxrss_mb']:.0f} MB")
            print(f"  {'':13s} vocab {last['counts']['vocab_size']} tokens, sample [UNK] rate "
                  f"{last['counts']['sample_unk_rate']}, tokens/word {last['counts']['sample_tokens_per_word']}")

        big = tmp / "filter_big"
        big.mkdir()
        for i in range(args.repeat):
            for p in sorted(filter_dir.iterdir()):
                (big / f"part-{i:03d}{p.name[5:]}").write_bytes(p.read_bytes())
        print(f"\nshard (num_shards 50, test_fraction 0.1, best of {args.runs} runs):")
        for label, directory in (("1x", filter_dir), (f"{args.repeat}x", big)):
            mb = sum(p.stat().st_size for p in directory.glob("*.txt")) / 1e6
            copy, _, _ = best("copy", directory, tmp / "copy", 0, args.runs)
            shutil.rmtree(tmp / "copy", ignore_errors=True)
            stage, stage_cpu, last = best("shard-stage", directory, tmp / "out", 0, args.runs)
            print(f"  {label:4s} {mb:6.1f} MB: {mb / stage:6.1f} MB/s wall, {mb / stage_cpu:6.1f} MB/s CPU "
                  f"(plain copy {mb / copy:.0f} MB/s)"
                  f"   peak RSS {last['maxrss_mb']:.0f} MB   largest shard {last['counts']['training_max_over_mean']}"
                  f" x mean, {last['counts']['test_documents']} of {last['counts']['documents']} documents in test")
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        print(json.dumps(measure(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))))
    else:
        main()
