"""Tokens/s of the hdf5 stage's tokenization (pipeline/stages/hdf5/tokenize.py: token_batches) with a tokenizer of each
kind the vocab stage makes, on the same shard: BERT's WordPiece (`vocab.method` sentencepiece) takes WordCache's
per-word path, Unigram and byte-level BPE SpaceChunkCache's per-chunk one (one core, as a worker); and, on the same
sentences in the stage's batches, the tokenizer's own encode_batch (what token_batches ran for Unigram and BPE before
SpaceChunkCache), whose token count must be token_batches'.

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

from pipeline.stages.hdf5.tokenize import BATCH_SENTENCES, token_batches
from pipeline.text_files import iter_documents
from pipeline.tokenizer_files import tokenizer_kind
from wiki2bert_core.wordpiece import (load_tokenizer, one_tokenizer_thread, read_vocab, special_token_ids,
                                      special_token_names)

METHODS = ("sentencepiece", "unigram", "bpe")


def pipeline(*args) -> None:
    subprocess.run([sys.executable, "-m", "pipeline.cli", *map(str, args), "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)


def tokens_per_second(shard: Path, vocab_dir: Path) -> tuple[str, int, float, float]:
    """The tokenizer's kind, the shard's tokens, and the seconds of token_batches and of encode_batch."""
    tokenizer = load_tokenizer(vocab_dir)
    special = special_token_ids(read_vocab(vocab_dir / "vocab.txt"), special_token_names(vocab_dir))
    sentences = [sentence for document in iter_documents(shard) for sentence in document]
    with one_tokenizer_thread():
        start = time.perf_counter()
        tokens = sum(len(ids) for ids, _, _ in token_batches(shard, tokenizer, special))
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        whole = sum(len(e.ids) for i in range(0, len(sentences), BATCH_SENTENCES)
                    for e in tokenizer.encode_batch(sentences[i:i + BATCH_SENTENCES], add_special_tokens=False))
        whole_seconds = time.perf_counter() - start
    if whole != tokens:
        raise SystemExit(f"{vocab_dir}: token_batches gave {tokens} tokens, encode_batch {whole}")
    return tokenizer_kind(tokenizer, vocab_dir), tokens, seconds, whole_seconds


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
        print(f"{'vocab.method':<14} {'kind':<10} {'tokens':>10} {'seconds':>8} {'tokens/s':>10} "
              f"{'encode_batch s':>14} {'tokens/s':>10} {'speed-up':>8}")
        for method in METHODS:
            work = tmp / method
            shutil.copytree(tmp / "base", work, symlinks=True)
            pipeline("stage", "vocab", "--lang", "hu", "--dump", dump, "--workdir", work, *settings,
                     "--set", f"vocab.method={method}")
            kind, tokens, seconds, whole = tokens_per_second(shard, work / "hu" / "vocab")
            print(f"{method:<14} {kind:<10} {tokens:>10,} {seconds:>8.2f} {tokens / seconds:>10,.0f} "
                  f"{whole:>14.2f} {tokens / whole:>10,.0f} {whole / seconds:>7.1f}x")


if __name__ == "__main__":
    main()
