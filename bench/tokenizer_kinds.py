"""Tokens/s of the hdf5 stage's tokenization (pipeline/stages/hdf5/tokenize.py: token_batches) with a tokenizer of each
kind the vocab stage makes, on the same shard: BERT's WordPiece (`vocab.method` sentencepiece) takes WordCache's
per-word path, Unigram and byte-level BPE `tokenizers`' own encode_batch (one core, as a worker).

    python bench/tokenizer_kinds.py [--pages 3000] [--vocab-size 16000] [--smoke]

It writes the generated sample dump (`pipeline sample-dump`), runs the pipeline through the shard stage, then the
vocab stage once per method in copies of that work directory, and times each tokenizer over the first training shard
(first pass: WordCache starts empty).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.stages.hdf5.tokenize import token_batches
from pipeline.tokenizer_files import tokenizer_kind
from wiki2bert_core.wordpiece import (load_tokenizer, one_tokenizer_thread, read_vocab, special_token_ids,
                                      special_token_names)

METHODS = ("sentencepiece", "unigram", "bpe")


def pipeline(*args) -> None:
    subprocess.run([sys.executable, "-m", "pipeline.cli", *map(str, args), "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)


def tokens_per_second(shard: Path, vocab_dir: Path) -> tuple[str, int, float]:
    tokenizer = load_tokenizer(vocab_dir)
    special = special_token_ids(read_vocab(vocab_dir / "vocab.txt"), special_token_names(vocab_dir))
    with one_tokenizer_thread():
        start = time.perf_counter()
        tokens = sum(len(ids) for ids, _, _ in token_batches(shard, tokenizer, special))
        seconds = time.perf_counter() - start
    return tokenizer_kind(tokenizer, vocab_dir), tokens, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--smoke", action="store_true", help="60 pages, 1,000 tokens")
    args = parser.parse_args()
    if args.smoke:
        args.pages, args.vocab_size = 60, 1000
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pipeline("sample-dump", tmp / "dump", "--pages", args.pages)
        dump = next((tmp / "dump").glob("*.xml.bz2"))
        settings = ["--set", f"vocab.vocab_size={args.vocab_size}", "--set", "shard.num_shards=2"]
        pipeline("run", "--lang", "hu", "--dump", dump, "--workdir", tmp / "base", "--to", "shard", *settings)
        shard = sorted((tmp / "base" / "hu" / "shard").glob("training_*.txt"))[0]
        print(f"shard {shard.name}: {shard.stat().st_size / 1e6:.2f} MB, {args.vocab_size:,} tokens a vocabulary")
        print(f"{'vocab.method':<14} {'kind':<10} {'tokens':>10} {'seconds':>8} {'tokens/s':>10}")
        for method in METHODS:
            work = tmp / method
            shutil.copytree(tmp / "base", work, symlinks=True)
            pipeline("stage", "vocab", "--lang", "hu", "--dump", dump, "--workdir", work, *settings,
                     "--set", f"vocab.method={method}")
            kind, tokens, seconds = tokens_per_second(shard, work / "hu" / "vocab")
            print(f"{method:<14} {kind:<10} {tokens:>10,} {seconds:>8.2f} {tokens / seconds:>10,.0f}")


if __name__ == "__main__":
    main()
