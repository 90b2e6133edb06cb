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
  of shards works without holding that many files open;
- each shard has its documents' records beside it (`training_0000.docs.jsonl`: source, id, title, and "copy": k
  for the k-th repeat), so every training document says where it came from;
- mixing: `weights` repeats or subsamples each source's training documents (`_Mix`), so that the sources' kept
  tokens (whitespace-separated, as the filter counts them) make the stated shares of the training split; the
  copies of a document go to different shards while there are shards enough (a "random next" segment B is not
  drawn from another copy of A's own document). The counts have each source's documents, tokens and training
  share. With every weight 1 (the default) the shards are those of the unweighted algorithm, byte for byte.

NVIDIA's sharder, by contrast, loads the whole corpus and balances with a loop that can fail to terminate.
"""
from __future__ import annotations

import dataclasses
import hashlib
import heapq
import math
from pathlib import Path

import numpy as np

from wiki2bert_core.config import SettingError, added_later
from wiki2bert_core.errors import ConfigError, DataError
from pipeline.text_files import DocumentRecord, iter_documents_with_records, list_parts, records_path
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext

BUFFER_BUDGET = 4 << 20  # bytes of shard text held in memory at most, over all shards
MIN_SHARD_BUFFER = 16 << 10
HASH_BITS = 16
HASH_BUCKETS = 1 << HASH_BITS  # resolution of the fractional weights: a source's tokens in this many hash buckets


@dataclasses.dataclass(frozen=True)
class ShardConfig:
    num_shards: int = 50  # training shards, balanced by size, whole documents only
    test_fraction: float = 0.1  # share of documents in the test split (picked by a seeded hash of the text); 0: none
    num_test_shards: int = 1  # shards the test split is spread over
    seed: int = 12345  # keys the hash that picks the test documents
    min_documents_per_shard: int = 10  # caps the shard counts (training and test) at documents / this, at least 1
    # how many times each source's kept tokens are seen in the training split, relative to the others, by source
    # name (--corpus NAME=PATH:WEIGHT), e.g. {wikipedia: 2, web: 0.5}; a source not named has weight 1, 0 leaves it
    # out of training. A document is repeated int(weight) times, plus once more for the documents of the lowest
    # hashes of (seed, source, id) that hold the fractional part of the source's tokens; the test split is unweighted
    weights: dict[str, float] = added_later(default_factory=dict)

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
        for source, weight in self.weights.items():
            if not (math.isfinite(weight) and weight >= 0):
                raise SettingError(f"weights.{source}", f"must be a number of at least 0, got {weight}")


class _ShardSet:
    """`count` shard files `<prefix>_0000.txt`.. and their document records; add() appends a document to the
    smallest one (its copies to the smallest ones)."""

    def __init__(self, directory: Path, prefix: str, count: int, buffer_bytes: int):
        self.paths = [directory / f"{prefix}_{i:04d}.txt" for i in range(count)]
        self.sizes = [0] * count
        self.documents = [0] * count
        self.buffers = [bytearray() for _ in range(count)]
        self.record_buffers = [bytearray() for _ in range(count)]
        self.buffer_bytes = buffer_bytes
        self.heap = [(0, i) for i in range(count)]
        for path in self.paths:
            path.write_bytes(b"")
            records_path(path).write_bytes(b"")

    def add(self, document: bytes, record: DocumentRecord, copies: int = 1) -> None:
        """`copies` of the document, each in another shard while there are shards enough."""
        chosen = [heapq.heappop(self.heap) for _ in range(min(copies, len(self.paths)))]
        for copy in range(copies):
            i = chosen[copy % len(chosen)][1]
            self.buffers[i] += document
            self.record_buffers[i] += (record if copy == 0 else dataclasses.replace(
                record, extra={**record.extra, "copy": copy})).to_json().encode("utf-8") + b"\n"
            if len(self.buffers[i]) >= self.buffer_bytes:
                self._flush(i)
            self.sizes[i] += len(document)
            self.documents[i] += 1
        for _, i in chosen:
            heapq.heappush(self.heap, (self.sizes[i], i))

    def close(self) -> None:
        for i in range(len(self.paths)):
            self._flush(i)

    def _flush(self, i: int) -> None:
        if self.buffers[i]:
            with open(self.paths[i], "ab") as f:
                f.write(self.buffers[i])
            with open(records_path(self.paths[i]), "ab") as f:
                f.write(self.record_buffers[i])
            self.buffers[i].clear()
            self.record_buffers[i].clear()

    def balance(self) -> float:
        """Largest shard over the mean shard size."""
        mean = sum(self.sizes) / len(self.sizes)
        return round(max(self.sizes) / mean, 4) if mean else 0.0


class _Mix:
    """How many copies of each training document the source weights ask for. int(weight) copies, and one more for
    the documents whose hash of (seed, source, id) falls below the source's threshold: the threshold is set from a
    histogram of the source's tokens over HASH_BUCKETS hash buckets, so that the documents below it hold the
    fractional part of its tokens to within one bucket's (about 1/65,536 of the source), whatever the order of
    the documents; a document's decision depends only on its own hash."""

    def __init__(self, weights: dict[str, float], seed: int):
        self.weights = weights
        self.key = str(seed).encode()
        self.histograms: dict[str, np.ndarray] = {}  # source -> [tokens, documents] of each hash bucket
        self.thresholds: dict[str, int] = {}
        self.training: dict[str, list[int]] = {}  # source -> [tokens, documents] of its training split

    def weight(self, source: str) -> float:
        return self.weights.get(source, 1.0)

    def _bucket(self, record: DocumentRecord) -> int:
        digest = hashlib.blake2b(f"{record.source}\0{record.id}".encode("utf-8", "surrogatepass"), digest_size=8,
                                 key=self.key, person=b"shard.weights").digest()
        return int.from_bytes(digest, "little") >> (64 - HASH_BITS)

    def observe(self, record: DocumentRecord, tokens: int) -> None:
        """First pass: a training document of `tokens` tokens."""
        totals = self.training.setdefault(record.source, [0, 0])
        totals[0] += tokens
        totals[1] += 1
        if self.weight(record.source) % 1:
            histogram = self.histograms.setdefault(record.source, np.zeros((2, HASH_BUCKETS), dtype=np.int64))
            bucket = self._bucket(record)
            histogram[0, bucket] += tokens
            histogram[1, bucket] += 1

    def settle(self) -> dict[str, dict[str, int]]:
        """After the first pass: each fractional source's threshold; returns each source's training documents
        (copies) and tokens after the weights."""
        mixed = {}
        for source, (tokens, documents) in self.training.items():
            whole = int(self.weight(source))
            mixed[source] = {"training_documents": whole * documents, "training_tokens": whole * tokens}
        for source, histogram in self.histograms.items():
            below = np.concatenate([[0], np.cumsum(histogram[0])])  # tokens in the buckets below each threshold
            target = self.weight(source) % 1 * below[-1]
            self.thresholds[source] = threshold = int(np.argmin(np.abs(below - target)))
            mixed[source]["training_documents"] += int(histogram[1, :threshold].sum())
            mixed[source]["training_tokens"] += int(below[threshold])
        return mixed

    def copies(self, record: DocumentRecord) -> int:
        weight = self.weight(record.source)
        extra = record.source in self.thresholds and self._bucket(record) < self.thresholds[record.source]
        return int(weight) + extra


def run(config: ShardConfig, ctx: StageContext) -> dict:
    corpus_dir = ctx.inputs["dedup"]
    parts = list_parts(corpus_dir, ".txt")
    key = str(config.seed).encode()
    threshold = int(config.test_fraction * 2 ** 64)

    def documents():
        """(is a test document, its record, its bytes, its sentences) for each document, in order."""
        for part in parts:
            for record, doc in iter_documents_with_records(part):
                text = "\n".join(doc).encode("utf-8")
                digest = hashlib.blake2b(text, digest_size=8, key=key).digest()
                yield int.from_bytes(digest, "little") < threshold, record, text, len(doc)

    mix = _Mix(config.weights, config.seed)
    sources: dict[str, dict] = {}
    n_training = n_test = 0
    for is_test, record, text, _ in documents():
        counts = sources.setdefault(record.source, {"documents": 0, "tokens": 0, "test_documents": 0})
        tokens = len(text.split())
        counts["documents"] += 1
        counts["tokens"] += tokens
        counts["test_documents"] += is_test
        n_test += is_test
        n_training += not is_test
        if not is_test:
            mix.observe(record, tokens)
    if n_training + n_test == 0:
        raise DataError(f"{corpus_dir}: no documents to shard (all parts are empty)")
    for source in sorted(set(config.weights) - set(sources)):
        ctx.log.warning("shard: shard.weights.%s: no documents of that source reach the shard stage", source)
    for source, mixed in mix.settle().items():
        sources[source].update(mixed)
    n_copies = sum(c.get("training_documents", 0) for c in sources.values())
    asked_test = config.num_test_shards if config.test_fraction > 0 else 0
    if asked_test and n_test == 0:
        raise DataError(f"{corpus_dir}: no test documents for shard.test_fraction {config.test_fraction}: "
                            f"raise it or set it to 0")
    if n_training == 0:
        raise DataError(f"{corpus_dir}: all {n_test} documents went to the test split: lower shard.test_fraction")
    if n_copies == 0:
        raise ConfigError(f"shard.weights: every training document has weight 0 ({config.weights})")
    num_shards = _capped(config.num_shards, n_copies, config, "num_shards", "training", ctx)
    test_shards = _capped(asked_test, n_test, config, "num_test_shards", "test", ctx) if asked_test else 0
    buffer_bytes = max(MIN_SHARD_BUFFER, BUFFER_BUDGET // (num_shards + test_shards))
    training = _ShardSet(ctx.out_dir, "training", num_shards, buffer_bytes)
    test = _ShardSet(ctx.out_dir, "test", test_shards, buffer_bytes)
    sentences = 0
    with progress(sum(p.stat().st_size for p in parts), "shard", "B", quiet=ctx.quiet) as bar:
        for is_test, record, text, doc_sentences in documents():
            copies = 1 if is_test else mix.copies(record)
            if copies:
                (test if is_test else training).add(text + b"\n\n", record, copies)
            sentences += doc_sentences
            bar.update(len(text) + 2)
    training.close()
    test.close()
    training_tokens = sum(c.get("training_tokens", 0) for c in sources.values())
    for source, counts in sources.items():
        counts.setdefault("training_documents", 0)
        counts.setdefault("training_tokens", 0)
        counts["weight"] = mix.weight(source)
        counts["training_share"] = round(counts["training_tokens"] / max(1, training_tokens), 6)
    ctx.log.info("shard: %d training documents in %d shards (largest %.3f x mean), %d test documents in %d",
                 n_copies, num_shards, training.balance(), n_test, test_shards)
    if len(sources) > 1 or config.weights:
        ctx.log.info("shard: training token shares: %s", ", ".join(
            f"{s} {c['training_share']:.1%} (weight {c['weight']:g})" for s, c in sorted(sources.items())))
    return {
        "documents": n_training + n_test,
        "training_documents": n_copies,
        "test_documents": n_test,
        "training_shards": num_shards,
        "test_shards": test_shards,
        "training_max_over_mean": training.balance(),
        "test_max_over_mean": test.balance() if test_shards else 0.0,
        "sentences": sentences,
        "training_bytes": sum(training.sizes),
        "test_bytes": sum(test.sizes),
        "sources": dict(sorted(sources.items())),
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
