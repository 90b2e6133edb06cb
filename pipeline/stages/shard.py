"""Stage `shard`: the deduplicated corpus split into `num_shards` training shards and `num_test_shards` test shards.

Two streaming passes, memory independent of the corpus size (O(number of shards)):
- the first counts each split's documents: a split gets at most one shard per `min_documents_per_shard`
  documents (fewer than asked, with a warning), so that every shard can pair a segment A with a random segment
  B from another document (in a shard of one document the "random" B would come from A's own document);
- in the second, each document goes to the test split when a hash of its text, keyed by `seed`, falls below `test_fraction`
  (so the split does not depend on document order or on --workers, and a repeated text lands on one side only);
- within its split, each document goes to the shard that is currently the smallest (a heap of shard sizes). This
  greedy rule keeps every shard within one document of the others: the largest ends at most (largest document)
  above the mean, so shards are balanced once documents are small against shards (5% for >= 20 documents of the
  largest size per shard). It also spreads consecutive articles over all shards;
- shard files are written through bounded in-memory buffers that are appended to the files when full, so any number
  of shards works without holding that many files open.

NVIDIA's sharder, by contrast, loads the whole corpus and balances with a loop that can fail to terminate.
"""
from __future__ import annotations

import dataclasses
import hashlib
import heapq
from pathlib import Path

from wiki2bert_core.errors import ConfigError
from wiki2bert_core.errors import DataError
from pipeline.text_files import iter_documents, list_parts
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext

BUFFER_BUDGET = 4 << 20  # bytes of shard text held in memory at most, over all shards
MIN_SHARD_BUFFER = 16 << 10


@dataclasses.dataclass(frozen=True)
class ShardConfig:
    num_shards: int = 50  # training shards, balanced by size, whole documents only
    test_fraction: float = 0.1  # share of documents in the test split (picked by a seeded hash of the text); 0: none
    num_test_shards: int = 1  # shards the test split is spread over
    seed: int = 12345  # keys the hash that picks the test documents
    min_documents_per_shard: int = 10  # caps the shard counts (training and test) at documents / this, at least 1

    def __post_init__(self):
        if self.num_shards < 1:
            raise ConfigError(f"shard.num_shards: must be at least 1, got {self.num_shards}")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ConfigError(f"shard.test_fraction: {self.test_fraction} is not in [0, 1)")
        if self.test_fraction > 0 and self.num_test_shards < 1:
            raise ConfigError("shard.num_test_shards: must be at least 1 when shard.test_fraction is above 0")
        if self.seed < 0:
            raise ConfigError("shard.seed: must not be negative")
        if self.min_documents_per_shard < 1:
            raise ConfigError(f"shard.min_documents_per_shard: must be at least 1, got {self.min_documents_per_shard}")


class _ShardSet:
    """`count` shard files `<prefix>_0000.txt`..; add() appends a document to the smallest one."""

    def __init__(self, directory: Path, prefix: str, count: int, buffer_bytes: int):
        self.paths = [directory / f"{prefix}_{i:04d}.txt" for i in range(count)]
        self.sizes = [0] * count
        self.documents = [0] * count
        self.buffers = [bytearray() for _ in range(count)]
        self.buffer_bytes = buffer_bytes
        self.heap = [(0, i) for i in range(count)]
        for path in self.paths:
            path.write_bytes(b"")

    def add(self, document: bytes) -> None:
        size, i = heapq.heappop(self.heap)
        buffer = self.buffers[i]
        buffer += document
        if len(buffer) >= self.buffer_bytes:
            self._flush(i)
        self.sizes[i] = size + len(document)
        self.documents[i] += 1
        heapq.heappush(self.heap, (self.sizes[i], i))

    def close(self) -> None:
        for i in range(len(self.paths)):
            self._flush(i)

    def _flush(self, i: int) -> None:
        if self.buffers[i]:
            with open(self.paths[i], "ab") as f:
                f.write(self.buffers[i])
            self.buffers[i].clear()

    def balance(self) -> float:
        """Largest shard over the mean shard size."""
        mean = sum(self.sizes) / len(self.sizes)
        return round(max(self.sizes) / mean, 4) if mean else 0.0


def run(config: ShardConfig, ctx: StageContext) -> dict:
    corpus_dir = ctx.inputs["dedup"]
    parts = list_parts(corpus_dir, ".txt")
    key = str(config.seed).encode()
    threshold = int(config.test_fraction * 2 ** 64)

    def documents():
        """(is a test document, its bytes) for each document, in order."""
        for part in parts:
            for doc in iter_documents(part):
                text = "\n".join(doc).encode("utf-8")
                digest = hashlib.blake2b(text, digest_size=8, key=key).digest()
                yield int.from_bytes(digest, "little") < threshold, text, len(doc)

    n_training = n_test = 0
    for is_test, _, _ in documents():
        n_test += is_test
        n_training += not is_test
    if n_training + n_test == 0:
        raise DataError(f"{corpus_dir}: no documents to shard (all parts are empty)")
    asked_test = config.num_test_shards if config.test_fraction > 0 else 0
    if asked_test and n_test == 0:
        raise DataError(f"{corpus_dir}: no test documents for shard.test_fraction {config.test_fraction}: "
                            f"raise it or set it to 0")
    if n_training == 0:
        raise DataError(f"{corpus_dir}: all {n_test} documents went to the test split: lower shard.test_fraction")
    num_shards = _capped(config.num_shards, n_training, config, "num_shards", "training", ctx)
    test_shards = _capped(asked_test, n_test, config, "num_test_shards", "test", ctx) if asked_test else 0
    buffer_bytes = max(MIN_SHARD_BUFFER, BUFFER_BUDGET // (num_shards + test_shards))
    training = _ShardSet(ctx.out_dir, "training", num_shards, buffer_bytes)
    test = _ShardSet(ctx.out_dir, "test", test_shards, buffer_bytes)
    sentences = 0
    with progress(sum(p.stat().st_size for p in parts), "shard", "B", quiet=ctx.quiet) as bar:
        for is_test, text, doc_sentences in documents():
            (test if is_test else training).add(text + b"\n\n")
            sentences += doc_sentences
            bar.update(len(text) + 2)
    training.close()
    test.close()
    ctx.log.info("shard: %d training documents in %d shards (largest %.3f x mean), %d test documents in %d",
                 n_training, num_shards, training.balance(), n_test, test_shards)
    return {
        "documents": n_training + n_test,
        "training_documents": n_training,
        "test_documents": n_test,
        "training_shards": num_shards,
        "test_shards": test_shards,
        "training_max_over_mean": training.balance(),
        "test_max_over_mean": test.balance() if test_shards else 0.0,
        "sentences": sentences,
        "training_bytes": sum(training.sizes),
        "test_bytes": sum(test.sizes),
    }


def _capped(asked: int, documents: int, config: ShardConfig, name: str, split: str, ctx: StageContext) -> int:
    """`asked` shards, or fewer so that each holds at least min_documents_per_shard documents (at least one shard)."""
    count = max(1, min(asked, documents // config.min_documents_per_shard))
    if count < asked:
        ctx.log.warning("shard: %d %s documents make %d shards, not shard.%s %d (at least %d documents a shard, "
                        "shard.min_documents_per_shard)", documents, split, count, name, asked,
                        config.min_documents_per_shard)
    return count


STAGE = Stage("shard", ShardConfig, run, inputs=("dedup",))
