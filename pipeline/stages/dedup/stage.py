"""Stage `dedup`: one copy of each cluster of exact and near duplicates, between `filter` and `vocab`/`shard`.

Exact duplicates have the same text up to whitespace and case; near duplicates are found by MinHash LSH over
shingles of `ngram` words (or letters of scripts written without spaces, `shingle_unit: characters`), with
`bands` x `rows` hash functions (FineWeb-2's 14 x 8 by default: a pair of Jaccard similarity J becomes a
candidate with probability 1 - (1 - J^rows)^bands, 1/2 near J = 0.72). A candidate pair merges when its
estimated Jaccard (the share of equal MinHash values) is at least `min_jaccard`; merged pairs make clusters
(connected components), and each cluster keeps one copy: the first source of `prefer_sources`, then the longest,
then the first in the input. The kept documents' records get `cluster_size` (1 for a unique document).

Passes, each parallel over `ctx.executor` but the third:
1. per input part (pipeline/stages/dedup/minhash.py): signatures, band keys and exact-text keys, written as
   records sorted by key (the part's bucket file) beside the signatures; a part's files are finished once its
   `.done.json` is written, and they live in the stage's cache dir, so a killed run's re-run reuses the parts
   that were done;
2. per partition of the key space (pipeline/stages/dedup/clusters.py): the partition's slice of every part's
   records, sorted; consecutive documents of a bucket are candidate pairs, confirmed by their signatures;
3. in the main process: connected components of the merged pairs and the copy each keeps;
4. per part: the records (and a text sample for the report) of the documents the decisions name;
5. per part: the kept documents and their records, and the removed ones' lines of `removed.jsonl`.
Memory: in pass 1, a part's signatures and records (~700 bytes a document) and the arrays of one batch of text
(~70 bytes a character of BATCH_CHARS, or of one longer document); in pass 2, a partition's records
(`partition_mib`) in its task, and in the main process the merged pairs, each once (8 bytes: a pair is found in up
to bands + 1 partitions, and the repeats are dropped as they come in); in pass 3, ~50 bytes per document in a
cluster (~90 while the clusters are made) and the name of each cluster's kept copy as JSON (~50 bytes): the main
process grows with the duplicates, never with the documents that have none (docs/performance.md#dedup).

Outputs: the kept documents (`part-*.txt` + `part-*.docs.jsonl`, the parts of the input), `removed.jsonl` (per
removed document in input order: its source, id (and piece, where the filter cut a long document) and title, the
source, id (and piece) of the copy kept in its place, `exact` or `near`, and the estimated Jaccard of the two)
and `report.json` (documents and tokens in and kept per source, exact and near counts, candidate pairs, the
cluster-size histogram and the largest clusters with a sample of their members, named as in removed.jsonl).
The bytes depend on the inputs and settings only, never on --workers or the executor.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Literal

import numpy as np

from wiki2bert_core.config import SettingError, changeable, check_minimum
from wiki2bert_core.errors import DataError
from wiki2bert_core.files import atomic_write, remove_tree, sha256_file, write_json
from wiki2bert_core.log import progress
from pipeline.stages import Stage, StageContext, StageCounts
from pipeline.stages.dedup.clusters import (PART_SHIFT, InputNumbers, PartFiles, SignatureReader, candidate_pairs,
                                            components, docids, kept_copies, local_of, merge_pair_keys, part_of)
from pipeline.stages.dedup.minhash import Shingler, estimated_jaccard, exact_key
from pipeline.text_files import (DocumentRecord, iter_documents_with_records, iter_records, list_parts,
                                 records_path, write_document, write_record)

FORMAT = 1  # of the signature pass's files: part of their cache key
BATCH_CHARS = 1 << 18  # characters of text signed at once (~60 bytes of arrays each)
RECORD_BYTES = 32  # memory per bucket record in a partition's task (key, docid, sort order, slack)
SAMPLE_CHARS = 400  # characters of each member shown for the report's largest clusters
SAMPLE_MEMBERS = 4  # members shown per cluster (the kept copy first)


@dataclasses.dataclass(frozen=True)
class DedupConfig:
    # minhash: exact duplicates, then near duplicates by MinHash LSH; exact: exact duplicates only (same text up
    # to whitespace and case); none: every document is kept (with cluster_size 1)
    method: Literal["minhash", "exact", "none"] = "minhash"
    # what shingles are made of: words, or characters: each letter of a script written without spaces (Han, kana,
    # Thai, ...) is a token of its own, the rest of the text still splits into words (the ja and zh profiles)
    shingle_unit: Literal["words", "characters"] = "words"
    ngram: int = 5  # tokens per shingle (FineWeb-2: 5 words)
    bands: int = 14  # LSH bands; a pair is a candidate when all `rows` values of one band agree
    rows: int = 8  # MinHash values per band; with bands: 1/2 the pairs at Jaccard (1/bands)^(1/rows) are candidates
    # a candidate pair merges only when its estimated Jaccard (share of equal MinHash values) is at least this;
    # null: every candidate merges, as datatrove does. 0.6 rejects 93% of the candidates at Jaccard 0.5 and
    # 0.4% of those at 0.7 (docs/pipeline.md, "Duplicates")
    min_jaccard: float | None = 0.6
    seed: int = 1  # seeds the hash functions
    # the copy a cluster keeps: the first of these sources it holds (in this order; then any other source), then
    # the longest text, then the first in the input
    prefer_sources: list[str] = dataclasses.field(default_factory=lambda: ["wikipedia"])
    # memory of one clustering task: the key space is split into a power of two of partitions, each holding at
    # most this many MiB of bucket records (~32 bytes a record, bands + 1 records a document)
    partition_mib: int = changeable(256)
    examples: int = 10  # clusters shown in report.json (the largest, and the largest with near duplicates)

    def __post_init__(self):
        check_minimum(self, 1, "ngram", "bands", "rows", "partition_mib")
        check_minimum(self, 0, "seed", "examples")
        if self.min_jaccard is not None and not 0.0 <= self.min_jaccard <= 1.0:
            raise SettingError("min_jaccard", f"{self.min_jaccard} is not between 0 and 1 (or null)")


@dataclasses.dataclass(frozen=True)
class _SignTask:
    index: int
    text: Path
    files: PartFiles
    method: str
    shingler: tuple  # Shingler's arguments
    prefer_sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class _PartitionTask:
    partition: int
    bits: int
    parts: list[PartFiles]
    min_jaccard: float | None
    numbers: InputNumbers


@dataclasses.dataclass(frozen=True)
class _ResolveTask:
    text: Path
    wanted: np.ndarray  # indices in the part whose records are needed, ascending
    sampled: np.ndarray  # those of them whose text is shown in the report


@dataclasses.dataclass(frozen=True)
class _WriteTask:
    index: int
    text: Path
    out_dir: Path
    removed_lines: Path
    files: PartFiles
    members: np.ndarray  # indices in the part of the documents in clusters, ascending
    cluster_size: np.ndarray  # of each
    kept: np.ndarray  # the docid each one's cluster keeps
    kept_names: "_Names"  # of the copies kept in place of this part's removed documents
    exact: np.ndarray  # whether each removed one is an exact duplicate of its kept copy
    signature_parts: dict  # part index -> PartFiles, for the estimated Jaccard of removed and kept


def run(config: DedupConfig, ctx: StageContext) -> StageCounts:
    parts = list_parts(ctx.inputs["filter"], ".txt")
    cache = ctx.cache_dir / "signatures"
    cache.mkdir(parents=True, exist_ok=True)
    key = _settings_key(config)
    tasks = [_SignTask(i, path, PartFiles(i, cache / f"{path.stem}.{key}"), config.method,
                       (config.ngram, config.bands, config.rows, config.seed, config.shingle_unit == "characters"),
                       tuple(config.prefer_sources))
             for i, path in enumerate(parts)]
    signed = []
    with progress(sum(p.stat().st_size for p in parts), "dedup: signatures", unit="B", quiet=ctx.quiet) as bar:
        for task, result in zip(tasks, ctx.executor.map(_sign_part, tasks)):
            signed.append(result)
            bar.update(task.text.stat().st_size)
    documents = sum(r["documents"] for r in signed)
    if documents == 0:
        raise DataError(f"{ctx.inputs['filter']}: no documents in {len(parts)} part file(s)")
    if documents >= 1 << 32:
        raise DataError(f"{ctx.inputs['filter']}: {documents:,} documents; dedup numbers them in 32 bits: at most "
                        f"{(1 << 32) - 1:,} a run")
    files = [t.files for t in tasks]
    _warn_of_settings_that_decide_nothing(config, files, {name for r in signed for name in r["sources"]}, ctx)
    numbers = InputNumbers([r["documents"] for r in signed])

    pair_keys, pair_counts = _merged_pairs(config, files, numbers, sum(r["records"] for r in signed), ctx)
    clusters = _Clusters.of(pair_keys, numbers, files)
    del pair_keys
    examples = clusters.examples(config.examples)
    names, shown = _resolve(parts, clusters, examples, ctx)

    removed_dir = ctx.scratch() / "removed"
    removed_dir.mkdir(exist_ok=True)
    removed_lines = [removed_dir / f"{path.stem}.jsonl" for path in parts]
    write_tasks = (clusters.write_task(i, path, ctx.out_dir, removed_lines[i], files, names)
                   for i, path in enumerate(parts))  # made as the executor takes them: each holds its part's share
    written = []
    with progress(len(parts), "dedup: writing", unit="part", quiet=ctx.quiet) as bar:
        for result in ctx.executor.map(_write_part, write_tasks):
            written.append(result)
            bar.update(1)
    with atomic_write(ctx.out_dir / "removed.jsonl", "wb") as out:
        for path in removed_lines:
            with open(path, "rb") as f:
                shutil.copyfileobj(f, out)

    report = _report(signed, written, clusters, pair_counts, examples, names, shown)
    write_json(ctx.out_dir / "report.json", report)
    remove_tree(ctx.cache_dir)  # the signed parts: only a killed run's re-run needs them
    totals = report["documents"]
    ctx.log.info("dedup: kept %d of %d documents; removed %d exact and %d near duplicates in %d clusters",
                 totals["kept"], totals["in"], totals["exact"], totals["near"], report["clusters"]["count"])
    return StageCounts({"documents_in": totals["in"], "documents_kept": totals["kept"],
                        "removed_exact": totals["exact"], "removed_near": totals["near"],
                        "clusters": report["clusters"]["count"], "largest_cluster": report["clusters"]["largest"]},
                       sources={name: {"documents_kept": row["documents_kept"], "removed": row["exact"] + row["near"]}
                                for name, row in report["sources"].items()})


def _warn_of_settings_that_decide_nothing(config: DedupConfig, files: list[PartFiles], sources: set[str],
                                          ctx: StageContext) -> None:
    """A warning for an `ngram` no document reaches (each document is then one shingle, its whole text: only copies
    with the same tokens merge) and for a `prefer_sources` (other than the default) that names no source here."""
    if config.method == "minhash":
        longest = 0
        for part in files:
            with np.load(part.info) as info:
                longest = max(longest, int(info["tokens"].max(initial=0)))
        if longest <= config.ngram:
            ctx.log.warning("dedup: dedup.ngram is %d and no document has more tokens (the longest: %d): each is one "
                            "shingle, its whole text, so only copies with the same tokens merge and near-duplicate "
                            "detection is off; lower dedup.ngram", config.ngram, longest)
    if config.prefer_sources not in ([], DedupConfig().prefer_sources) and not sources & set(config.prefer_sources):
        ctx.log.warning("dedup: dedup.prefer_sources names no source of this run (%s; its sources: %s): it decides "
                        "no cluster's kept copy", ", ".join(config.prefer_sources), ", ".join(sorted(sources)))


def _settings_key(config: DedupConfig) -> str:
    """What decides the signature pass's files besides the input's bytes."""
    settings = [FORMAT, config.method, config.shingle_unit, config.ngram, config.bands, config.rows, config.seed,
                config.prefer_sources]
    return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]


# --- pass 1: signatures ----------------------------------------------------------------------------

def _sign_part(task: _SignTask) -> dict:
    """Write the part's bucket records, signatures and document facts (or find them done); return its counts."""
    files = task.files
    inputs = {"text": sha256_file(task.text), "records": sha256_file(records_path(task.text))}
    try:
        done = json.loads(files.done.read_text(encoding="utf-8"))
        if done["inputs"] == inputs:
            return done["counts"]
    except (OSError, ValueError, KeyError):
        pass
    shingler = Shingler(*task.shingler)
    ranks = {source: rank for rank, source in enumerate(task.prefer_sources)}
    chars, exact, rank, doc_sources, tokens, signatures = [], [], [], [], [], []
    batch: list[str] = []

    def sign() -> None:
        if task.method == "minhash":
            batch_signatures, batch_tokens = shingler.batch(batch)
            signatures.append(batch_signatures)
            tokens.append(batch_tokens)
        else:
            tokens.append(shingler.token_counts(batch))
        batch.clear()

    batch_chars = 0
    for record, sentences in iter_documents_with_records(task.text):
        text = " ".join(sentences)
        batch.append(text)
        batch_chars += len(text)
        chars.append(len(text))
        exact.append(exact_key(text))
        rank.append(ranks.get(record.source, len(ranks)))
        doc_sources.append(record.source)
        if batch_chars >= BATCH_CHARS:
            sign()
            batch_chars = 0
    if batch:
        sign()
    doc_tokens = np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.int64)
    sources: dict[str, dict[str, int]] = {}
    for source, count in zip(doc_sources, doc_tokens.tolist()):
        totals = sources.setdefault(source, {"documents": 0, "tokens": 0})
        totals["documents"] += 1
        totals["tokens"] += count

    keys, docs = [np.zeros(0, dtype=np.uint64)], [np.zeros(0, dtype=np.uint32)]
    if task.method != "none":
        keys.append(np.array(exact, dtype=np.uint64))
        docs.append(np.arange(len(exact), dtype=np.uint32))
    if signatures:
        all_signatures = np.concatenate(signatures)
        signed = np.flatnonzero(doc_tokens > 0)  # a document without tokens has no shingles
        keys.append(shingler.band_keys(all_signatures[signed]).ravel())
        docs.append(np.repeat(signed.astype(np.uint32), shingler.bands))
        _save(files.signatures, all_signatures)
    all_keys, all_docs = np.concatenate(keys), np.concatenate(docs)
    order = np.argsort(all_keys, kind="stable")
    _save(files.keys, all_keys[order])
    _save(files.docs, all_docs[order])
    with atomic_write(files.info, "wb") as f:
        np.savez(f, rank=np.array(rank, dtype=np.int32), chars=np.array(chars, dtype=np.int64), tokens=doc_tokens,
                 exact=np.array(exact, dtype=np.uint64))
    counts = {"documents": len(chars), "records": len(all_keys), "sources": sources}
    write_json(files.done, {"inputs": inputs, "counts": counts})  # last: the part is done
    return counts


def _save(path: Path, array: np.ndarray) -> None:
    """`array` as a .npy file, written through Python's file object: np.save's own write (tofile) reports a full
    disk as "N requested and M written", without the cause."""
    with atomic_write(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
        f.write(np.ascontiguousarray(array).data)


# --- pass 2: candidate pairs per partition --------------------------------------------------------------

def _merged_pairs(config: DedupConfig, files: list[PartFiles], numbers: InputNumbers, records: int,
                  ctx: StageContext) -> tuple[np.ndarray, dict]:
    """All pairs to merge, as unique pair keys (InputNumbers.pair_keys), and the candidate counts; the key space is
    split so that one partition's records take at most partition_mib. A pair comes from every partition holding a
    band key (or the exact-text key) its two documents share, up to bands + 1 times: the repeats are dropped as the
    partitions' pairs come in, so that what is held grows with the unique pairs (twice them at most)."""
    counts = {"exact_pairs": 0, "band_pairs": 0, "rejected_pairs": 0}
    if config.method == "none":
        return merge_pair_keys([]), counts
    bits = max(0, math.ceil(math.log2(max(1.0, records * RECORD_BYTES / (config.partition_mib << 20)))))
    min_jaccard = config.min_jaccard if config.method == "minhash" else None
    tasks = [_PartitionTask(p, bits, files, min_jaccard, numbers) for p in range(1 << bits)]
    merged, pending = merge_pair_keys([]), []
    with progress(len(tasks), "dedup: candidate pairs", unit="partition", quiet=ctx.quiet) as bar:
        for keys, partition_counts in ctx.executor.map(_partition_pairs, tasks):
            pending.append(keys)
            if sum(map(len, pending)) > len(merged):
                merged, pending = merge_pair_keys([merged, *pending]), []
            for name, value in partition_counts.items():
                counts[name] += value
            bar.update(1)
    merged = merge_pair_keys([merged, *pending])
    counts["merged_pairs"] = len(merged)
    return merged, counts


def _partition_pairs(task: _PartitionTask) -> tuple[np.ndarray, dict]:
    first, second, counts = candidate_pairs(task.parts, task.partition, task.bits, task.min_jaccard)
    return task.numbers.pair_keys(first, second), counts


# --- pass 3: clusters -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Clusters:
    """The documents in clusters of two or more, by docid (ascending), and what is decided for each."""
    ids: np.ndarray
    root: np.ndarray  # the index of its cluster's first document (the cluster's name)
    kept: np.ndarray  # the index of the copy its cluster keeps
    size: np.ndarray  # its cluster's size
    exact: np.ndarray  # whether its text is the kept copy's (up to whitespace and case)
    files: dict[int, PartFiles]

    @classmethod
    def of(cls, pair_keys: np.ndarray, numbers: InputNumbers, files: list[PartFiles]) -> "_Clusters":
        members, root = components(pair_keys)
        ids = numbers.docids(members)
        del members
        rank, length, exact_key_ = (np.zeros(len(ids), dtype=dtype) for dtype in (np.int32, np.int64, np.uint64))
        parts, starts = np.unique(part_of(ids), return_index=True)  # ids ascend: each part's are a slice
        for part, lo, hi in zip(parts.tolist(), starts.tolist(), [*starts[1:].tolist(), len(ids)]):
            with np.load(files[part].info) as info:
                locals_ = local_of(ids[lo:hi])
                rank[lo:hi], length[lo:hi], exact_key_[lo:hi] = (info[name][locals_]
                                                                 for name in ("rank", "chars", "exact"))
        kept = kept_copies(root, rank, length, ids)
        size = np.bincount(root, minlength=len(ids))[root]
        return cls(ids, root, kept, size, exact_key_ == exact_key_[kept], {f.index: f for f in files})

    def in_part(self, part: int) -> slice:
        lo, hi = (np.searchsorted(self.ids, np.uint64(p << PART_SHIFT)) for p in (part, part + 1))
        return slice(int(lo), int(hi))

    def examples(self, count: int) -> dict[str, list[np.ndarray]]:
        """The members shown of the `count` largest clusters, and of the largest with a near duplicate: the kept
        copy first, then (near duplicates first) the others in input order."""
        roots = np.flatnonzero(self.root == np.arange(len(self.ids)))
        by_size = roots[np.lexsort((roots, -self.size[roots]))]
        near_roots = np.unique(self.root[~self.exact])
        chosen = {"largest_clusters": by_size[:count],
                  "near_duplicate_clusters": by_size[np.isin(by_size, near_roots)][:count]}
        shown = {}
        for name, cluster_roots in chosen.items():
            shown[name] = []
            for root in cluster_roots:
                members = np.flatnonzero(self.root == root)
                kept = self.kept[root]
                others = members[members != kept]
                others = others[np.argsort(self.exact[others], kind="stable")]
                shown[name].append(np.concatenate(([kept], others[:SAMPLE_MEMBERS - 1])))
        return shown

    def write_task(self, index: int, text: Path, out_dir: Path, removed_lines: Path, files: list[PartFiles],
                   names: "_Names") -> _WriteTask:
        mine = self.in_part(index)
        kept_ids = self.ids[self.kept[mine]]
        removed = kept_ids != self.ids[mine]
        kept_of_removed = kept_ids[removed]
        return _WriteTask(index, text, out_dir, removed_lines, files[index], local_of(self.ids[mine]),
                          self.size[mine], kept_ids, names.subset(kept_of_removed),
                          self.exact[mine][removed],
                          {int(p): self.files[int(p)] for p in np.unique(part_of(kept_of_removed))})


# --- pass 4: records of the kept copies and of the examples ------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Names:
    """The DocumentRecord.identity() of documents, by docid: the JSON of each in one string, with where each ends
    (~50 bytes a document, where a dict per document takes ~500)."""
    ids: np.ndarray  # ascending
    ends: np.ndarray  # where each one's JSON ends in `text`
    text: str

    @classmethod
    def of(cls, ids: np.ndarray, identities: list[str]) -> "_Names":
        return cls(ids, np.cumsum([len(i) for i in identities], dtype=np.int64), "".join(identities))

    def __getitem__(self, docid: int) -> dict:
        at = int(np.searchsorted(self.ids, np.uint64(docid)))
        return json.loads(self.text[self.ends[at - 1] if at else 0:self.ends[at]])

    def subset(self, ids: np.ndarray) -> "_Names":
        wanted = np.unique(ids)
        return _Names.of(wanted, [json.dumps(self[docid]) for docid in wanted.tolist()])

    @classmethod
    def joined(cls, ids: np.ndarray, pieces: list["_Names"]) -> "_Names":
        """The names of `pieces` (consecutive runs of `ids`), under `ids`."""
        offsets = np.cumsum([0] + [len(piece.text) for piece in pieces[:-1]], dtype=np.int64)
        ends = [piece.ends + offset for piece, offset in zip(pieces, offsets)]
        return cls(ids, np.concatenate([np.zeros(0, dtype=np.int64), *ends]), "".join(p.text for p in pieces))


def _resolve(parts: list[Path], clusters: _Clusters, examples: dict, ctx: StageContext) -> tuple[_Names, dict]:
    """The names (DocumentRecord.identity()) of each cluster's kept copy and of the examples' members, and the
    examples' (title, text sample) by docid."""
    shown = [members for cluster_members in examples.values() for members in cluster_members]
    sampled = clusters.ids[np.concatenate([np.zeros(0, dtype=np.int64), *shown])]
    wanted = np.union1d(clusters.ids[clusters.kept], sampled)
    owners, starts = np.unique(part_of(wanted), return_index=True)  # wanted is sorted: by part
    tasks = [_ResolveTask(parts[part], local_of(mine), local_of(mine[np.isin(mine, sampled)]))
             for part, mine in zip(owners, np.split(wanted, starts[1:]))]
    names, texts = [], {}
    with progress(len(tasks), "dedup: cluster records", unit="part", quiet=ctx.quiet) as bar:
        for part, (part_names, part_texts) in zip(owners.tolist(), ctx.executor.map(_resolve_part, tasks)):
            names.append(part_names)
            texts.update({part << PART_SHIFT | local: value for local, value in part_texts.items()})
            bar.update(1)
    return _Names.joined(wanted, names), texts


def _resolve_part(task: _ResolveTask) -> tuple[_Names, dict[int, tuple]]:
    """The names of the wanted documents (by their index in the part) and the sampled ones' (title, text sample)."""
    wanted, sampled = set(task.wanted.tolist()), set(task.sampled.tolist())
    identities, texts = {}, {}
    if sampled:
        documents = ((record, " ".join(sentences)) for record, sentences in iter_documents_with_records(task.text))
    else:
        documents = ((record, None) for record in iter_records(task.text))
    for local, (record, text) in enumerate(documents):
        if local in wanted:
            identities[local] = json.dumps(record.identity())
            if local in sampled:
                texts[local] = (record.title, text[:SAMPLE_CHARS])
            if len(identities) == len(wanted):
                break
    return _Names.of(task.wanted, [identities[local] for local in task.wanted.tolist()]), texts


# --- pass 5: the kept documents -------------------------------------------------------------------------

def _write_part(task: _WriteTask) -> dict:
    """Write the part's kept documents with their records and its removed documents' lines; return the counts
    per source."""
    own = docids(task.index, task.members)
    removed = task.kept != own
    similarity = np.ones(int(removed.sum()))
    if task.files.signatures.exists() and removed.any():
        reader = SignatureReader({task.index: task.files, **task.signature_parts})
        similarity = estimated_jaccard(reader.rows(own[removed]), reader.rows(task.kept[removed]))
    removed_at = {int(local): n for n, local in enumerate(task.members[removed])}
    size_at = dict(zip(task.members.tolist(), task.cluster_size.tolist()))
    kept_of = task.kept[removed].tolist()
    with np.load(task.files.info) as info:
        tokens = info["tokens"]
    sources: dict[str, dict[str, int]] = {}
    text_path = task.out_dir / task.text.name
    with atomic_write(text_path) as out, atomic_write(records_path(text_path)) as records_out, \
            atomic_write(task.removed_lines) as removed_out:
        for local, (record, sentences) in enumerate(iter_documents_with_records(task.text)):
            totals = sources.setdefault(record.source, {"documents": 0, "tokens": 0, "exact": 0, "near": 0})
            if local in removed_at:
                n = removed_at[local]
                kind = "exact" if task.exact[n] else "near"
                totals[kind] += 1
                kept = {f"kept_{key}": value for key, value in task.kept_names[kept_of[n]].items()}
                removed_out.write(json.dumps({**record.identity(), "title": record.title, **kept, "duplicate": kind,
                                              "jaccard": round(float(similarity[n]), 3)}, ensure_ascii=False))
                removed_out.write("\n")
                continue
            totals["documents"] += 1
            totals["tokens"] += int(tokens[local])
            write_document(out, sentences)
            write_record(records_out, DocumentRecord(record.source, record.id, record.title,
                                                     {**record.extra, "cluster_size": size_at.get(local, 1)}))
    return sources


# --- report -----------------------------------------------------------------------------------------

def _report(signed: list[dict], written: list[dict], clusters: _Clusters, pair_counts: dict, examples: dict,
            names: _Names, shown: dict) -> dict:
    sources: dict[str, dict[str, int]] = {}
    for counts in signed:
        for source, totals in counts["sources"].items():
            row = sources.setdefault(source, {"documents_in": 0, "documents_kept": 0, "exact": 0, "near": 0,
                                              "tokens_in": 0, "tokens_kept": 0})
            row["documents_in"] += totals["documents"]
            row["tokens_in"] += totals["tokens"]
    for counts in written:
        for source, totals in counts.items():
            row = sources[source]
            row["documents_kept"] += totals["documents"]
            row["tokens_kept"] += totals["tokens"]
            row["exact"] += totals["exact"]
            row["near"] += totals["near"]
    total = {key: sum(row[key] for row in sources.values()) for key in next(iter(sources.values()))}
    cluster_sizes = clusters.size[clusters.root == np.arange(len(clusters.ids))]
    return {
        "documents": {"in": total["documents_in"], "kept": total["documents_kept"],
                      "removed": total["documents_in"] - total["documents_kept"], "exact": total["exact"],
                      "near": total["near"]},
        "tokens": {"in": total["tokens_in"], "kept": total["tokens_kept"],
                   "removed": total["tokens_in"] - total["tokens_kept"]},
        "sources": dict(sorted(sources.items())),
        "candidates": pair_counts,
        "clusters": {"count": len(cluster_sizes), "documents": int(cluster_sizes.sum()),
                     "largest": int(cluster_sizes.max(initial=0)), "sizes": _histogram(cluster_sizes)},
        **{name: [_shown_cluster(members, clusters, names, shown) for members in example_members]
           for name, example_members in examples.items()},
    }


def _histogram(sizes: np.ndarray) -> dict[str, int]:
    """Clusters by size, in bins (2^(k-1), 2^k]: "2", "3-4", "5-8", ..."""
    bins = np.ceil(np.log2(sizes)).astype(np.int64) if len(sizes) else np.zeros(0, dtype=np.int64)
    histogram = {}
    for k, count in zip(*np.unique(bins, return_counts=True)):
        lo, hi = (1 << int(k - 1)) + 1, 1 << int(k)
        histogram[str(hi) if lo == hi else f"{lo}-{hi}"] = int(count)
    return histogram


def _shown_cluster(members: np.ndarray, clusters: _Clusters, names: _Names, shown_texts: dict) -> dict:
    ids = clusters.ids[members]
    similarity = np.ones(len(members))
    kept_id = clusters.ids[clusters.kept[members[0]]]
    if all(clusters.files[int(p)].signatures.exists() for p in np.unique(part_of(ids))):
        reader = SignatureReader(clusters.files)
        similarity = estimated_jaccard(reader.rows(ids), reader.rows(np.full(len(ids), kept_id)))
    shown = []
    for member, docid, jaccard in zip(members, ids, similarity):
        title, sample = shown_texts[int(docid)]
        identity = names[int(docid)]
        shown.append({**identity, "title": title,
                      "duplicate": "kept" if docid == kept_id else "exact" if clusters.exact[member] else "near",
                      "jaccard": round(float(jaccard), 3), "text": sample})
    return {"size": int(clusters.size[members[0]]), "members": shown}


STAGE = Stage("dedup", DedupConfig, run, inputs=("filter",), tools=("numpy",))
