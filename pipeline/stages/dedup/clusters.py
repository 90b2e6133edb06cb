"""From bucket records on disk to clusters: the candidate pairs of one partition of the key space, then the
connected components of all pairs and the copy each keeps.

A document is `part << 32 | index in its part` (a docid): ascending docids are the input order. Each part's
records are two arrays on disk, sorted by key: `keys` (uint64: a band key, or an exact-text key with the lowest
bit set) and `docs` (uint32, the index in the part). Partition p of 2**bits holds the keys whose top `bits` bits
are p, so it is a contiguous slice of every part's records, found by binary search in the memory-mapped keys:
a partition's task reads only its slices, and memory follows the partition, not the corpus.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from pipeline.stages.dedup.minhash import estimated_jaccard

PART_SHIFT = 32
LOCAL = np.uint64((1 << PART_SHIFT) - 1)
EXACT_BIT = np.uint64(1)
CONFIRM_PAIRS = 32768  # candidate pairs whose signatures are read at once: 2 x 32768 x 448 bytes at 112 hashes


def _beside_prefix(suffix: str) -> property:
    return property(lambda self: self.prefix.with_name(self.prefix.name + suffix))


@dataclasses.dataclass(frozen=True)
class PartFiles:
    """The files the signature pass writes for one input part: `prefix` + a suffix each."""
    index: int
    prefix: Path
    keys = _beside_prefix(".keys.npy")  # the part's bucket keys, ascending
    docs = _beside_prefix(".docs.npy")  # the index in the part of each key's document
    signatures = _beside_prefix(".sig.npy")  # (documents, bands * rows) uint32
    info = _beside_prefix(".info.npz")  # per document: source rank, characters, tokens, exact-text key
    done = _beside_prefix(".done.json")  # written last: the input's sha256 and the part's counts


def docids(part: int, local: np.ndarray) -> np.ndarray:
    return (np.uint64(part) << np.uint64(PART_SHIFT)) | local.astype(np.uint64)


def part_of(ids: np.ndarray) -> np.ndarray:
    return (ids >> np.uint64(PART_SHIFT)).astype(np.int64)


def local_of(ids: np.ndarray) -> np.ndarray:
    return (ids & LOCAL).astype(np.int64)


def partition_bounds(partition: int, bits: int) -> tuple[int, int | None]:
    """[lo, hi) of the keys in `partition` of 2**bits; hi None: to the end of the key space."""
    if bits == 0:
        return 0, None
    shift = 64 - bits
    return partition << shift, (partition + 1) << shift if partition + 1 < 1 << bits else None


def read_partition(parts: list[PartFiles], partition: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(keys, docids) of one partition, sorted by key and, within a key, by docid."""
    lo, hi = partition_bounds(partition, bits)
    keys, ids = [], []
    for part in parts:
        all_keys = np.load(part.keys, mmap_mode="r")
        start = int(np.searchsorted(all_keys, np.uint64(lo)))
        end = len(all_keys) if hi is None else int(np.searchsorted(all_keys, np.uint64(hi)))
        if end > start:
            keys.append(np.array(all_keys[start:end]))
            ids.append(docids(part.index, np.load(part.docs, mmap_mode="r")[start:end]))
    if not keys:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)
    keys_, ids_ = np.concatenate(keys), np.concatenate(ids)
    order = np.argsort(keys_, kind="stable")  # parts were read in order: equal keys stay in docid order
    return keys_[order], ids_[order]


class SignatureReader:
    """Signature rows of any documents, read from the parts' memory-mapped signature files."""

    def __init__(self, parts: dict[int, PartFiles]):
        self.parts = parts

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """The signatures of `ids` (any order, repeats allowed)."""
        unique, where = np.unique(ids, return_inverse=True)
        parts, starts = np.unique(part_of(unique), return_index=True)  # unique ascends: each part's are a slice
        rows = [np.load(self.parts[part].signatures, mmap_mode="r")[local_of(mine)]
                for part, mine in zip(parts.tolist(), np.split(unique, starts[1:]))]
        return np.concatenate(rows)[where]


def candidate_pairs(parts: list[PartFiles], partition: int, bits: int, min_jaccard: float | None
                    ) -> tuple[np.ndarray, np.ndarray, dict]:
    """The pairs of one partition to merge, as two arrays of docids (in any order, repeats allowed), and what was found:
    consecutive members of a bucket (equal keys, in docid order) make a pair, as in datatrove; pairs of an
    exact-text bucket merge, pairs of a band bucket merge when their estimated Jaccard is at least min_jaccard
    (all of them when it is None)."""
    keys, ids = read_partition(parts, partition, bits)
    same = np.flatnonzero(keys[1:] == keys[:-1])
    first, second = ids[same], ids[same + 1]
    exact = (keys[same] & EXACT_BIT).astype(bool)
    counts = {"exact_pairs": int(exact.sum()), "band_pairs": int((~exact).sum()), "rejected_pairs": 0}
    merge = exact.copy()
    if min_jaccard is None:
        merge[:] = True
    else:
        reader = SignatureReader({p.index: p for p in parts})
        band = np.flatnonzero(~exact)
        for lo in range(0, len(band), CONFIRM_PAIRS):
            chunk = band[lo:lo + CONFIRM_PAIRS]
            similar = estimated_jaccard(reader.rows(first[chunk]), reader.rows(second[chunk])) >= min_jaccard
            merge[chunk] = similar
            counts["rejected_pairs"] += int((~similar).sum())
    return first[merge], second[merge], counts


class InputNumbers:
    """A document's number in the whole input (0, 1, ... across the parts, in input order) and back to its docid.
    Merged pairs are kept as one uint64 each, the two numbers' 32 bits side by side (`pair_keys`): 8 bytes a pair
    where a row of two docids takes 16, and a 1-D array that np.unique sorts in place of rows."""

    def __init__(self, part_documents: list[int]):
        self.starts = np.concatenate(([0], np.cumsum(part_documents, dtype=np.int64)))

    @property
    def documents(self) -> int:
        return int(self.starts[-1])

    def of(self, ids: np.ndarray) -> np.ndarray:
        return (self.starts[part_of(ids)] + local_of(ids)).astype(np.uint64)

    def docids(self, numbers: np.ndarray) -> np.ndarray:
        parts = np.searchsorted(self.starts, numbers, side="right") - 1
        return (parts.astype(np.uint64) << np.uint64(PART_SHIFT)) | (numbers - self.starts[parts]).astype(np.uint64)

    def pair_keys(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """The pairs (first[i], second[i]) of docids, each as smaller number << 32 | larger, unique and ascending."""
        a, b = self.of(first), self.of(second)
        return np.unique((np.minimum(a, b) << np.uint64(32)) | np.maximum(a, b))


def merge_pair_keys(keys: list[np.ndarray]) -> np.ndarray:
    """The union of sorted pair-key arrays, unique and ascending."""
    return np.unique(np.concatenate([np.zeros(0, dtype=np.uint64), *keys]))


def components(pair_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the input numbers of the pairs' documents, ascending; the index in that array of the smallest document of
    each one's connected component), from pair keys (InputNumbers.pair_keys). Union-find vectorised over all pairs
    at once: each round hooks every root onto the smallest root it shares a pair with and then shortcuts every
    document to its root, so the roots of a component at least halve each round."""
    nodes, inverse = np.unique(np.concatenate([pair_keys >> np.uint64(32), pair_keys & LOCAL]), return_inverse=True)
    u, v = inverse[:len(pair_keys)], inverse[len(pair_keys):]
    parent = np.arange(len(nodes))
    while len(u):
        pu, pv = parent[u], parent[v]
        apart = pu != pv
        u, v, pu, pv = u[apart], v[apart], pu[apart], pv[apart]
        if not len(u):
            break
        np.minimum.at(parent, np.maximum(pu, pv), np.minimum(pu, pv))
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
    return nodes, parent


def kept_copies(root: np.ndarray, rank: np.ndarray, length: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """For each document of a component, the index of the one its component keeps: the best source rank (lowest),
    then the longest, then the first in the input (smallest docid)."""
    order = np.lexsort((ids, -length, rank, root))
    firsts = np.ones(len(order), dtype=bool)
    firsts[1:] = root[order][1:] != root[order][:-1]
    kept_of_root = np.empty(len(root), dtype=np.int64)
    kept_of_root[root[order][firsts]] = order[firsts]
    return kept_of_root[root]
