"""One HDF5 file of pretraining instances for one (variant, shard) of the hdf5 stage, in NVIDIA's layout.

The shard's documents are taken a window at a time (`window_tokens`; a shard below it is one window, by far the
usual case): the window's instances of all `dupe_factor` rounds are planned (pipeline/stages/hdf5/instances.py), shuffled
with one seeded permutation and built and written in blocks of whole HDF5 chunks, then the next window's are
appended. Memory is that of one window (its ids, ~40 bytes per instance) and one block, whatever the shard size.
The file is written under a temporary name, renamed into place and recorded as finished (pipeline/stages/hdf5/finished_files.py).

Each file has two random streams, seeded from `random_seed`, the shard's name and the variant: one for its instances
(random next sentences, the shuffle, truncation), one for their masks (wiki2bert_core/masking.py), so that a change
to the masking leaves the instances' sequences as they were.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
from pathlib import Path
from typing import Any, Callable, TypeVar

import h5py
import numpy as np

from wiki2bert_core.hdf5_format import MASKED_LM_POSITIONS, create_datasets, used_positions
from pipeline.stages.hdf5.malloc import reuse_freed_memory
from pipeline.stages.hdf5.finished_files import FinishedFiles
from pipeline.stages.hdf5.instances import (FileDraws, TokenRows, make_instances, plan_doc_sentences,
                                            plan_instances, random_next_from_own_document)
from wiki2bert_core.masking import Masking
from wiki2bert_core.variant_dir import SEGMENT_PAIR
from pipeline.stages.hdf5.tokenize import TokenFiles

T = TypeVar("T")
CHUNK_BYTES = 1 << 20  # HDF5 chunk of input_ids: fits h5py's default 1 MiB chunk cache
CHUNKS_PER_BLOCK = 4  # instances are built and written this many chunks at a time


@dataclasses.dataclass(frozen=True)
class InstanceFile:
    name: str  # "<split>_<shard>": seeds the file's random stream
    tokens_dir: Path  # the shard's TokenFiles
    finished_root: Path  # the file goes to FinishedFiles(finished_root) under `relative`
    relative: str  # "<variant dir>/<split>/<shard>.hdf5"
    key: str  # what decides the file's bytes
    shard_counts: dict  # the shard's tokenize counts, recorded with the file for a re-run that reuses it
    masking: Masking  # its max_predictions: the variant's max_predictions_per_seq
    max_seq_length: int
    sequence_kind: str  # wiki2bert_core.variant_dir.SEQUENCE_KINDS
    config: Any  # the stage's Hdf5Config


def write_instance_file(task: InstanceFile) -> dict:
    """Write the file; returns its counts (recorded with it)."""
    reuse_freed_memory()
    finished = FinishedFiles(task.finished_root)
    out_file = finished.path(task.relative)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    partial = out_file.with_name(out_file.name + ".tmp")
    counts = _write_hdf5(partial, functools.partial(_write_instances, task))
    partial.rename(out_file)
    counts["shard"] = task.shard_counts
    finished.record(task.relative, task.key, counts)
    return counts


def _write_instances(task: InstanceFile, f: h5py.File) -> dict:
    config, seq, preds = task.config, task.max_seq_length, task.masking.max_predictions
    tokens = TokenFiles(task.tokens_dir)
    paired = task.sequence_kind == SEGMENT_PAIR
    stream = f"{task.name}/{seq}/{preds}" + ("" if paired else f"/{task.sequence_kind}")
    rng = _rng(config.random_seed, stream)  # the instances: pairs, shuffle, truncation
    draws = FileDraws(_rng(config.random_seed, stream + "/masks"))  # their masks
    counts = {"instances": 0, "random_next": 0, "random_next_own_document": 0, "masked_tokens": 0, "short_targets": 0,
              "document_rounds": 0}
    datasets = None
    for first, end in tokens.windows(config.window_tokens):
        docs = tokens.read(first, end, margin=seq)
        plan = plan_instances(docs, seq, config.short_seq_prob, config.dupe_factor, rng) if paired \
            else plan_doc_sentences(docs, seq, config.dupe_factor)
        order = rng.permutation(len(plan))
        token_rows = TokenRows(docs.ids.base, seq)  # the ids with their zero margin
        at = counts["instances"]
        if datasets is None:
            chunk_rows = max(1, min(len(plan), CHUNK_BYTES // (4 * seq)))
            datasets = create_datasets(f, len(plan), seq, preds, chunk_rows, compression="gzip",
                                       compression_opts=config.gzip_level, shuffle=True, track_times=False)
        else:
            for dataset in datasets.values():
                dataset.resize(at + len(plan), axis=0)
        block_rows = chunk_rows * CHUNKS_PER_BLOCK
        for start in range(0, len(plan), block_rows):
            block = make_instances(token_rows, plan.take(order[start:start + block_rows]), task.masking, rng, draws)
            for name, values in block.items():
                datasets[name][at + start:at + start + len(values)] = values
            counts["masked_tokens"] += int(np.count_nonzero(used_positions(block[MASKED_LM_POSITIONS])))
        counts["instances"] += len(plan)
        counts["random_next"] += int(plan.random_next.sum())
        counts["random_next_own_document"] += random_next_from_own_document(docs, plan)
        counts["short_targets"] += plan.short_targets
        counts["document_rounds"] += plan.document_rounds
    f.flush()  # while the datasets are open: a failed write raises here, not (printed only) in their destructors
    return counts


def _write_hdf5(path: Path, fill: Callable[[h5py.File], T]) -> T:
    """fill(a new HDF5 file at `path`), the file closed. A failed write (a full disk) is an OSError naming the file,
    and the file is removed."""
    with open(path, "w+b", buffering=0) as raw:
        target = _DropWritesAfterAFailure(raw)
        try:
            with h5py.File(target, "w") as f:
                result = fill(f)
        except Exception:
            if target.failure is None:
                raise
    if target.failure is None:
        return result
    path.unlink(missing_ok=True)
    raise OSError(target.failure.errno, target.failure.strerror, str(path))


class _DropWritesAfterAFailure(io.RawIOBase):
    """The file as HDF5 writes it (h5py's file-object driver: the same bytes as its own). HDF5 cannot close a file
    whose writes fail: each close retries them, and HDF5 2.0 crashed the interpreter at the third (a full disk). So
    the first failed write raises, and those after it are dropped: the file closes, and the failure is `failure`."""

    def __init__(self, raw: io.FileIO):
        super().__init__()
        self.raw, self.position, self.failure = raw, 0, None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.raw.seek(self.position)
        n = self.raw.readinto(buffer)
        self.position += n
        return n

    def write(self, data) -> int:
        if self.failure is None:
            try:
                self.raw.seek(self.position)
                rest = memoryview(data)
                while rest:  # an unbuffered write may write part of it (the last bytes that fit on a disk)
                    rest = rest[self.raw.write(rest):]
            except OSError as e:
                self.failure = e
                raise
        self.position += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.raw.seek(0, io.SEEK_END)}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def truncate(self, size: int | None = None) -> int:
        size = self.position if size is None else size
        if self.failure is None:
            self.raw.truncate(size)
        return size

    def flush(self) -> None:
        if self.failure is None:
            self.raw.flush()


def _rng(seed: int, name: str) -> np.random.Generator:
    words = np.frombuffer(hashlib.sha256(name.encode("utf-8")).digest(), dtype=np.uint32)
    return np.random.default_rng([seed, *words.tolist()])
