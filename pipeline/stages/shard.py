"""Stage `shard`: the deduplicated corpus split into `num_shards` training shards and `num_test_shards` test shards.

Two streaming passes, memory independent of the corpus size (O(number of shards)):
- the first, parallel over the parts (--workers, Dask), counts each split's documents: a split gets at most one
  shard per `min_documents_per_shard` documents (fewer than asked, with a warning), so that every shard can pair a
  segment A with a random segment B from another document (in a shard of one document the "random" B would come
  from A's own document);
- in both, each document goes to the test split when a hash of its text, keyed by `seed`, falls below `test_fraction`
  (so the split does not depend on document order or on --workers, and a repeated text lands on one side only);
- within its split, each document goes to the shard that is currently the smallest (a heap of shard sizes). This
  greedy rule keeps every shard within one document of the others: the largest ends at most (largest document)
  above the mean, so shards are balanced once documents are small against shards (5% for >= 20 documents of the
  largest size per shard). It also spreads consecutive articles over all shards;
- shard files are written through bounded in-memory buffers that are appended to the files when full, so any number
  of shards works without holding that many files open;
- each shard has its documents' records beside it (`training_0000.docs.jsonl`: source, id, title, and "copy": k
  for the k-th repeat), so every training document says where it came from;
- source weights: `weights` repeats or subsamples each source's training documents (`_SourceWeighting`), so that
  the sources' kept
  tokens (whitespace-separated, as the filter counts them) make the stated shares of the training split; the
  copies of a document go to different shards while there are shards enough (a "random next" segment B is not
  drawn from another copy of A's own document). The counts have each source's documents, tokens and training
  share. With every weight 1 (the default) the shards are those of the unweighted algorithm, byte for byte.
- rehydration (`rehydrate`, off by default; FineWeb-2's upsampling by duplicate count): each training document is
  first repeated by its cluster size as `rehydrate_table` says (the copies it had before deduplication: its
  publisher's count where its corpus published one, else dedup's `cluster_size`); the source weights, and in a mix
  the languages' alpha and weights, apply to the tokens after it. The counts have each source's
  `rehydrated_tokens` (its documents' tokens, each as many times as rehydration asks: None when off).

Several languages (the mix of `pipeline run --lang hu,fi,et`, pipeline/languages.py): the stage reads each
language's dedup output and the mix's vocabulary, and mixes the languages by size^alpha (`alpha`,
`language_weights`; wiki2bert_core/mixture.py), in WordPiece tokens, the units the model sees, so the HDF5 files
hold the stated shares:
- the first pass, parallel over the parts (--workers, Dask), counts each training document's WordPiece tokens;
- a language's size is its training tokens after the source weights; language l's rate r_l = share_l * (all
  languages' size) / size_l multiplies its sources' weights, and the documents are repeated and subsampled as
  for source weights (a language's hash histograms, keyed by its code too), so the mixed training split holds as
  many tokens as the languages together, in the shares of the formula to within a document;
- each language has its own shards, `training_<lang>_0000.txt`.. (wiki2bert_core/variant_dir.py: shard_name),
  as many as its share of `num_shards` (at least one), and its own test split, `test_<lang>_0000.txt`..
  (`num_test_shards` each, unweighted): every HDF5 instance is from one language, and every language is held out;
- `mixture.json` records alpha, the language weights, and each language's size, training tokens and share
  (wiki2bert_core/variant_dir.py: Mixture); the hdf5 stage copies it into each variant.json.

NVIDIA's sharder, by contrast, loads the whole corpus and balances with a loop that can fail to terminate.
"""
from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import heapq
from pathlib import Path

import numpy as np

from wiki2bert_core.config import SettingError, added_later, check_minimum
from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import write_json
from wiki2bert_core.mixture import DEFAULT_ALPHA, check_alpha, check_weights, language_shares, rates
from wiki2bert_core.variant_dir import MIXTURE_FILE, LanguageShare, Mixture, shard_name
from wiki2bert_core.wordpiece import load_tokenizer, one_tokenizer_thread, tokenizer_from_json
from pipeline.text_files import PUBLISHED, DocumentRecord, iter_documents_with_records, list_parts, records_path
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext, StageCounts

BUFFER_BUDGET = 4 << 20  # bytes of shard text held in memory at most, over all shards
MIN_SHARD_BUFFER = 16 << 10
HASH_BITS = 16
HASH_BUCKETS = 1 << HASH_BITS  # resolution of the fractional weights: a source's tokens in this many hash buckets
# FineWeb-2's rehydration: cluster size (the smallest of a range) -> copies; 1,000 and more: once, as the unique
# documents (FineWeb-2's finding: such clusters are mostly boilerplate)
FINEWEB2_REHYDRATION = {1: 1, 2: 2, 3: 3, 5: 5, 100: 8, 1000: 1}


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
    # several languages: each language's share of the training tokens is proportional to (its training tokens after
    # the source weights) ** alpha (wiki2bert_core/mixture.py: 1 keeps the languages' sizes, 0 makes them equal,
    # XLM-R's 0.3 upsamples the small ones), times its weight in language_weights
    alpha: float = added_later(DEFAULT_ALPHA)
    # several languages: a weight per language code multiplying its share (1 for one not named, 0 leaves it out of
    # training), e.g. {fi: 2}
    language_weights: dict[str, float] = added_later(default_factory=dict)
    # repeat each training document by its cluster size (its copies before deduplication: its publisher's count
    # where its corpus published one, e.g. FineWeb-2's minhash_cluster_size, else dedup's cluster_size) as
    # rehydrate_table says, before the source weights and the languages' alpha and weights; the test split is not
    # repeated
    rehydrate: bool = added_later(False)
    # cluster size -> copies of a document whose cluster is at least that size (and below the next key), with an
    # entry for 1, e.g. {1: 1, 2: 2, 10: 4}; {}: FineWeb-2's table (1 -> 1, 2 -> 2, 3-4 -> 3, 5-99 -> 5, 100-999 -> 8,
    # 1,000 and more -> 1)
    rehydrate_table: dict[int, int] = added_later(default_factory=dict)

    def __post_init__(self):
        table = {}
        for size, copies in self.rehydrate_table.items():  # the config layers give the keys as text
            if not str(size).isdigit() or int(size) < 1:
                raise SettingError(f"rehydrate_table.{size}", "a cluster size is a whole number of at least 1")
            if copies < 0:
                raise SettingError(f"rehydrate_table.{size}", f"copies must not be negative, got {copies}")
            table[int(size)] = copies
        if table and 1 not in table:
            raise SettingError("rehydrate_table", "needs an entry for cluster size 1 (the unique documents)")
        object.__setattr__(self, "rehydrate_table", dict(sorted(table.items())))
        check_alpha(self.alpha)
        check_weights(self.language_weights)
        check_minimum(self, 1, "num_shards", "min_documents_per_shard")
        check_minimum(self, 0, "seed")
        if not 0.0 <= self.test_fraction < 1.0:
            raise SettingError("test_fraction", f"{self.test_fraction} is not in [0, 1)")
        if self.test_fraction > 0 and self.num_test_shards < 1:
            raise SettingError("num_test_shards", "must be at least 1 when shard.test_fraction is above 0")
        check_weights(self.weights, "weights")


@dataclasses.dataclass(frozen=True)
class _Rehydration:
    """The copies rehydration makes of a document (ShardConfig.rehydrate_table); plain data (it pickles)."""
    sizes: tuple[int, ...]  # the table's cluster sizes, ascending (the first is 1)
    copies: tuple[int, ...]

    @classmethod
    def of(cls, config: ShardConfig) -> _Rehydration | None:
        """The config's rehydration; None when it is off."""
        table = config.rehydrate_table or FINEWEB2_REHYDRATION
        return cls(tuple(table), tuple(table.values())) if config.rehydrate else None

    def repeats(self, record: DocumentRecord) -> int:
        """The copies of a document: by its publisher's cluster size, else dedup's (1 without either)."""
        size = (record.extra.get(PUBLISHED) or {}).get("cluster_size", record.extra.get("cluster_size", 1))
        return self.copies[bisect.bisect_right(self.sizes, size) - 1]


class _ShardSet:
    """`count` shard files of a split (`training_0000.txt`.., or one language's `training_hu_0000.txt`..: shard_name)
    and their document records; add() appends a document to the smallest one (its copies to the smallest ones)."""

    def __init__(self, directory: Path, split: str, count: int, buffer_bytes: int, language: str | None = None):
        self.paths = [directory / f"{shard_name(split, i, language)}.txt" for i in range(count)]
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


class _SourceWeighting:
    """How many copies of each training document the source weights ask for. int(weight) copies, and one more for
    the documents whose hash of (seed, source, id) falls below the source's threshold: the threshold is set from a
    histogram of the source's tokens over HASH_BUCKETS hash buckets, so that the documents below it hold the
    fractional part of its tokens to within one bucket's (about 1/65,536 of the source), whatever the order of
    the documents; a document's decision depends only on its own hash. `weights` None: they are given to settle()
    (a language of a mix, whose rate is known once every language is counted; its code is hashed too). With
    `rehydration`, a document's copies are its rehydration copies times those of the weights, and the weights apply
    to the tokens of the rehydrated copies."""

    def __init__(self, weights: dict[str, float] | None, seed: int, language: str | None = None,
                 rehydration: _Rehydration | None = None):
        self.weights = weights
        self.rehydration = rehydration
        self.key = str(seed).encode()
        self.salt = f"{language}\0" if language else ""
        self.histograms: dict[str, np.ndarray] = {}  # source -> [tokens, documents] of each hash bucket
        self.thresholds: dict[str, int] = {}
        self.training: dict[str, list[int]] = {}  # source -> [tokens, documents] of its training split

    def weight(self, source: str) -> float:
        return (self.weights or {}).get(source, 1.0)

    def bucket(self, source: str, document_id: str) -> int:
        digest = hashlib.blake2b(f"{self.salt}{source}\0{document_id}".encode("utf-8", "surrogatepass"),
                                 digest_size=8, key=self.key, person=b"shard.weights").digest()
        return int.from_bytes(digest, "little") >> (64 - HASH_BITS)

    def repeats(self, record: DocumentRecord) -> int:
        """The copies rehydration makes of a training document (1 without rehydration)."""
        return 1 if self.rehydration is None else self.rehydration.repeats(record)

    def needs_bucket(self, source: str) -> bool:
        """Whether a training document of `source` needs its hash bucket: its weight has a fraction, or the weights
        come later (a mix's)."""
        return self.weights is None or bool(self.weight(source) % 1)

    def observe(self, source: str, tokens: np.ndarray, buckets: np.ndarray, repeats: np.ndarray) -> None:
        """First pass: training documents of `source`: their tokens, hash buckets (where its weight has a fraction,
        or in a mix) and rehydration copies."""
        totals = self.training.setdefault(source, [0, 0])
        copies = tokens * repeats
        totals[0] += int(copies.sum())
        totals[1] += int(repeats.sum())
        if self.needs_bucket(source):
            histogram = self.histograms.setdefault(source, np.zeros((2, HASH_BUCKETS), dtype=np.int64))
            np.add.at(histogram[0], buckets, copies)
            np.add.at(histogram[1], buckets, repeats)

    def settle(self, weights: dict[str, float] | None = None) -> dict[str, dict[str, int]]:
        """After the first pass (with the weights, if not given before): each fractional source's threshold;
        returns each source's training documents (copies) and tokens after the weights."""
        self.weights = self.weights if weights is None else weights
        weighted = {}
        for source, (tokens, documents) in self.training.items():
            whole = int(self.weight(source))
            weighted[source] = {"training_documents": whole * documents, "training_tokens": whole * tokens}
        for source, histogram in self.histograms.items():
            if not self.weight(source) % 1:
                continue
            below = np.concatenate([[0], np.cumsum(histogram[0])])  # tokens in the buckets below each threshold
            target = self.weight(source) % 1 * below[-1]
            self.thresholds[source] = threshold = int(np.argmin(np.abs(below - target)))
            weighted[source]["training_documents"] += int(histogram[1, :threshold].sum())
            weighted[source]["training_tokens"] += int(below[threshold])
        return weighted

    def copies(self, record: DocumentRecord) -> int:
        weight = self.weight(record.source)
        extra = record.source in self.thresholds and self.bucket(record.source, record.id) < self.thresholds[
            record.source]
        return (int(weight) + extra) * self.repeats(record)


def _documents(parts: list[Path], key: bytes, threshold: int):
    """(is a test document, its record, its bytes, its sentences) for each document of `parts`, in order: a document
    goes to the test split when a hash of its text, keyed by the seed, falls below `threshold`."""
    for part in parts:
        for record, doc in iter_documents_with_records(part):
            text = "\n".join(doc).encode("utf-8")
            digest = hashlib.blake2b(text, digest_size=8, key=key).digest()
            yield int.from_bytes(digest, "little") < threshold, record, text, len(doc)


def run(config: ShardConfig, ctx: StageContext) -> StageCounts:
    if ctx.several_languages:
        return _run_languages(config, ctx)
    corpus_dir = ctx.inputs["dedup"]
    parts = list_parts(corpus_dir, ".txt")
    key = str(config.seed).encode()
    threshold = int(config.test_fraction * 2 ** 64)
    rehydration = _Rehydration.of(config)
    weighting = _SourceWeighting(config.weights, config.seed, rehydration=rehydration)
    sources: dict[str, dict] = {}
    tasks = [_CountTask(None, part, None, config.seed, threshold, rehydration, config.weights) for part in parts]
    with progress(sum(p.stat().st_size for p in parts), "shard: count", "B", quiet=ctx.quiet) as bar:
        for part, counted in zip(parts, ctx.executor.map(_count_part, tasks)):
            _add_counts(sources, weighting, *counted)
            bar.update(part.stat().st_size)
    n_training, n_test = _split_sizes(sources)
    if n_training + n_test == 0:
        raise DataError(f"{corpus_dir}: no documents to shard (all parts are empty)")
    for source in sorted(set(config.weights) - set(sources)):
        ctx.log.warning("shard: shard.weights.%s: no documents of that source reach the shard stage", source)
    for source, weighted in weighting.settle().items():
        sources[source].update(weighted)
    n_copies = sum(c.get("training_documents", 0) for c in sources.values())
    asked_test = _check_splits(corpus_dir, config, n_training, n_test)
    if n_copies == 0:
        raise ConfigError(f"shard.weights: every training document has weight 0 ({config.weights})")
    num_shards = _capped(config.num_shards, n_copies, config, "num_shards", "training", ctx)
    test_shards = _capped(asked_test, n_test, config, "num_test_shards", "test", ctx) if asked_test else 0
    buffer_bytes = max(MIN_SHARD_BUFFER, BUFFER_BUDGET // (num_shards + test_shards))
    training = _ShardSet(ctx.out_dir, "training", num_shards, buffer_bytes)
    test = _ShardSet(ctx.out_dir, "test", test_shards, buffer_bytes)
    with progress(sum(p.stat().st_size for p in parts), "shard", "B", quiet=ctx.quiet) as bar:
        sentences = _write(parts, key, threshold, weighting, training, test, bar)
    _finish_sources(sources, weighting)
    _say_rehydrated(sources, ctx)
    ctx.log.info("shard: %d training documents in %d shards (largest %.3f x mean), %d test documents in %d",
                 n_copies, num_shards, training.balance(), n_test, test_shards)
    if len(sources) > 1 or config.weights:
        ctx.log.info("shard: training token shares: %s", ", ".join(
            f"{s} {c['training_share']:.1%} (weight {c['weight']:g})" for s, c in sorted(sources.items())))
    return StageCounts({
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
    }, sources=dict(sorted(sources.items())))


def _split_sizes(sources: dict[str, dict]) -> tuple[int, int]:
    """(training documents, test documents) before the weights."""
    n_test = sum(c["test_documents"] for c in sources.values())
    return sum(c["documents"] for c in sources.values()) - n_test, n_test


def _check_splits(corpus_dir: Path, config: ShardConfig, n_training: int, n_test: int) -> int:
    """The test shards asked for (0 without a test split); DataError when a split the settings ask for is empty."""
    asked_test = config.num_test_shards if config.test_fraction > 0 else 0
    if asked_test and n_test == 0:
        raise DataError(f"{corpus_dir}: no test documents for shard.test_fraction {config.test_fraction}: "
                            f"raise it or set it to 0")
    if n_training == 0:
        raise DataError(f"{corpus_dir}: all {n_test} documents went to the test split: lower shard.test_fraction")
    return asked_test


def _write(parts: list[Path], key: bytes, threshold: int, weighting: _SourceWeighting, training: _ShardSet,
           test: _ShardSet, bar) -> int:
    """Second pass: each document of `parts` into its split's shards, a training one as many times as the source
    weights say;
    returns the sentences read."""
    sentences = 0
    for is_test, record, text, doc_sentences in _documents(parts, key, threshold):
        copies = 1 if is_test else weighting.copies(record)
        if copies:
            (test if is_test else training).add(text + b"\n\n", record, copies)
        sentences += doc_sentences
        bar.update(len(text) + 2)
    training.close()
    test.close()
    return sentences


def _finish_sources(sources: dict[str, dict], weighting: _SourceWeighting) -> None:
    """Each source's training documents and tokens (0 for one with none), weight and share of the training split,
    and its rehydrated tokens (None without rehydration)."""
    training_tokens = sum(c.get("training_tokens", 0) for c in sources.values())
    for source, counts in sources.items():
        if weighting.rehydration is None:
            counts["rehydrated_tokens"] = None
        counts.setdefault("training_documents", 0)
        counts.setdefault("training_tokens", 0)
        counts["weight"] = weighting.weight(source)
        counts["training_share"] = round(counts["training_tokens"] / max(1, training_tokens), 6)


def _say_rehydrated(sources: dict[str, dict], ctx: StageContext, language: str = "") -> None:
    """One line of each source's tokens before and after rehydration (none when it is off)."""
    if all(c["rehydrated_tokens"] is None for c in sources.values()):
        return
    ctx.log.info("shard: %srehydrated by cluster size: %s", f"{language}: " if language else "", ", ".join(
        f"{name} {c['tokens']:,} -> {c['rehydrated_tokens']:,} tokens "
        f"(x{c['rehydrated_tokens'] / max(1, c['tokens']):.3g})" for name, c in sorted(sources.items())))


COUNT_BATCH = 256  # documents encoded at once when counting a part's tokens


@dataclasses.dataclass(frozen=True)
class _CountTask:
    language: str | None  # None: a run of one language
    part: Path
    # the mix's tokenizer, built once per worker process (tokenizer_from_json); None: whitespace-separated tokens
    tokenizer_json: str | None
    seed: int
    test_threshold: int
    rehydration: _Rehydration | None
    weights: dict[str, float] | None = None  # a run of one language's source weights (None: a mix's, known later)


# a part's first-pass figures, a row a document: its source (an index into the part's source names), whether it is a
# test document, its tokens, the hash bucket of a training one whose weight has a fraction (every training one's in
# a mix; else -1), its rehydration copies
PART_COUNTS = np.dtype([("source", np.int32), ("test", np.bool_), ("tokens", np.int64), ("bucket", np.int64),
                        ("repeats", np.int64)])


def _count_part(task: _CountTask) -> tuple[list[str], np.ndarray]:
    """The first pass over a part (parallel over the parts): (its source names, PART_COUNTS of its documents)."""
    weighting = _SourceWeighting(task.weights, task.seed, task.language, task.rehydration)
    key = str(task.seed).encode()
    names: dict[str, int] = {}
    counts, documents = [], _documents([task.part], key, task.test_threshold)
    # a batch of documents at a time: an Encoding keeps every token's string and offsets; a whole part's were the
    # stage's peak memory
    while batch := list(itertools.islice(documents, COUNT_BATCH)):
        if task.tokenizer_json is None:
            tokens = [len(text.split()) for _, _, text, _ in batch]
        else:
            with one_tokenizer_thread():
                tokens = [len(encoding.ids) for encoding in tokenizer_from_json(task.tokenizer_json).encode_batch(
                    [text.decode("utf-8") for _, _, text, _ in batch], add_special_tokens=False)]
        counts.append(np.array([
            (names.setdefault(record.source, len(names)), is_test, n,
             weighting.bucket(record.source, record.id) if not is_test and weighting.needs_bucket(record.source) else -1,
             weighting.repeats(record)) for (is_test, record, _, _), n in zip(batch, tokens)], PART_COUNTS))
    return list(names), np.concatenate(counts) if counts else np.zeros(0, PART_COUNTS)


def _add_counts(sources: dict[str, dict], weighting: _SourceWeighting, names: list[str], counts: np.ndarray) -> None:
    """A part's first-pass figures (_count_part) into each source's counts and the source weighting, the sources in
    the order of their first document (of their first training document for the weighting), as document by
    document."""
    copies = counts["tokens"] * counts["repeats"]
    for index, name in enumerate(names):
        mine = counts["source"] == index
        totals = sources.setdefault(name, {"documents": 0, "tokens": 0, "test_documents": 0, "rehydrated_tokens": 0})
        totals["documents"] += int(mine.sum())
        totals["tokens"] += int(counts["tokens"][mine].sum())
        totals["test_documents"] += int(counts["test"][mine].sum())
        totals["rehydrated_tokens"] += int(copies[mine].sum())
    training = counts[~counts["test"]]
    _, firsts = np.unique(training["source"], return_index=True)
    for index in training["source"][np.sort(firsts)].tolist():
        mine = training[training["source"] == index]
        weighting.observe(names[index], mine["tokens"], mine["bucket"], mine["repeats"])


# --- several languages ------------------------------------------------------------------------------------------

def _run_languages(config: ShardConfig, ctx: StageContext) -> StageCounts:
    """The shards of a mix of languages (module docstring)."""
    dirs = ctx.by_language("dedup")
    parts = {lang: list_parts(directory, ".txt") for lang, directory in dirs.items()}
    key = str(config.seed).encode()
    threshold = int(config.test_fraction * 2 ** 64)
    tokenizer = load_tokenizer(ctx.inputs["vocab"])
    tokenizer_json = tokenizer.to_str()
    tokenizer_from_json(tokenizer_json, tokenizer)
    rehydration = _Rehydration.of(config)
    weightings = {lang: _SourceWeighting(None, config.seed, lang, rehydration) for lang in dirs}
    sources: dict[str, dict[str, dict]] = {lang: {} for lang in dirs}
    tasks = [_CountTask(lang, part, tokenizer_json, config.seed, threshold, rehydration)
             for lang in dirs for part in parts[lang]]
    with progress(sum(t.part.stat().st_size for t in tasks), "shard: count tokens", "B", quiet=ctx.quiet) as bar:
        for task, counted in zip(tasks, ctx.executor.map(_count_part, tasks)):
            _add_counts(sources[task.language], weightings[task.language], *counted)
            bar.update(task.part.stat().st_size)
    known = {name for per_language in sources.values() for name in per_language}
    for source in sorted(set(config.weights) - known):
        ctx.log.warning("shard: shard.weights.%s: no documents of that source reach the shard stage", source)
    sizes = {lang: sum(config.weights.get(source, 1.0) * tokens for source, (tokens, _) in weighting.training.items())
             for lang, weighting in weightings.items()}
    shares = language_shares(sizes, config.alpha, config.language_weights)
    rate = rates(sizes, shares, sum(sizes.values()))
    asked_test = config.num_test_shards if config.test_fraction > 0 else 0
    languages = {}
    for lang, weighting in weightings.items():
        weighted = weighting.settle({source: config.weights.get(source, 1.0) * rate[lang]
                                     for source in weighting.training})
        for source, counts in weighted.items():
            sources[lang][source].update(counts)
        n_training, n_test = _split_sizes(sources[lang])
        _check_splits(dirs[lang], config, n_training, n_test)
        languages[lang] = {"documents": n_training + n_test, "tokens": round(sizes[lang]),
                           "weight": config.language_weights.get(lang, 1.0), "target_share": round(shares[lang], 6),
                           "rate": round(rate[lang], 6),
                           "training_documents": sum(c["training_documents"] for c in weighted.values()),
                           "training_tokens": sum(c["training_tokens"] for c in weighted.values()),
                           "test_documents": n_test}
    training_tokens = sum(c["training_tokens"] for c in languages.values())
    if training_tokens == 0:
        raise ConfigError(f"shard.language_weights: every language has weight 0 ({config.language_weights})")
    for lang, counts in languages.items():
        counts["training_share"] = round(counts["training_tokens"] / training_tokens, 6)
        counts["training_shards"] = _capped(max(1, round(config.num_shards * counts["training_share"])),
                                            counts["training_documents"], config, "num_shards",
                                            f"{lang} training", ctx) if counts["training_documents"] else 0
        counts["test_shards"] = _capped(asked_test, counts["test_documents"], config, "num_test_shards",
                                        f"{lang} test", ctx) if asked_test else 0
    buffer_bytes = max(MIN_SHARD_BUFFER, BUFFER_BUDGET // sum(c["training_shards"] + c["test_shards"]
                                                              for c in languages.values()))
    sets = {}
    with progress(sum(p.stat().st_size for ps in parts.values() for p in ps), "shard", "B", quiet=ctx.quiet) as bar:
        for lang, counts in languages.items():
            sets[lang] = (_ShardSet(ctx.out_dir, "training", counts["training_shards"], buffer_bytes, lang),
                          _ShardSet(ctx.out_dir, "test", counts["test_shards"], buffer_bytes, lang))
            counts["sentences"] = _write(parts[lang], key, threshold, weightings[lang], *sets[lang], bar)
            _finish_sources(sources[lang], weightings[lang])
            _say_rehydrated(sources[lang], ctx, lang)
            counts["sources"] = dict(sorted(sources[lang].items()))
    mixture = Mixture(config.alpha, dict(sorted(config.language_weights.items())),
                      {lang: LanguageShare(c["tokens"], c["training_tokens"], c["training_share"])
                       for lang, c in languages.items()})
    write_json(ctx.out_dir / MIXTURE_FILE, mixture.to_dict())
    ctx.log.info("shard: languages (alpha %g): %s", config.alpha, ", ".join(
        f"{lang} {c['training_share']:.1%} of the training tokens (x{c['rate']:.3g})" for lang, c in languages.items()))
    total = {key: sum(c[key] for c in languages.values())
             for key in ("documents", "training_documents", "test_documents", "training_shards", "test_shards",
                         "sentences")}
    return StageCounts({**total, "training_bytes": sum(sum(training.sizes) for training, _ in sets.values()),
                        "test_bytes": sum(sum(test.sizes) for _, test in sets.values())}, languages=languages)


def _capped(asked: int, documents: int, config: ShardConfig, name: str, split: str, ctx: StageContext) -> int:
    """`asked` shards, or fewer so that each holds at least min_documents_per_shard documents (at least one shard)."""
    count = max(1, min(asked, documents // config.min_documents_per_shard))
    if count < asked:
        ctx.log.warning("shard: %d %s documents make %d shards, not shard.%s %d (at least %d documents a shard, "
                        "shard.min_documents_per_shard)", documents, split, count, name, asked,
                        config.min_documents_per_shard)
    return count


STAGE = Stage("shard", ShardConfig, run, inputs=("dedup",), mix_inputs=("vocab",))
