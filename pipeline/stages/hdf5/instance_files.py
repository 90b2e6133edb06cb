"""One HDF5 file of pretraining instances for one (variant, shard) of the hdf5 stage, in NVIDIA's layout.

The shard's documents are taken a window at a time (`window_tokens`; a shard below it is one window, by far the
usual case): the window's instances of all `dupe_factor` rounds are planned (pipeline/stages/hdf5/instances.py), shuffled
with one seeded permutation and built and written in blocks of whole HDF5 chunks, then the next window's are
appended. Memory is that of one window (its ids, ~40 bytes per instance) and one block, whatever the shard size.
The file is written under a temporary name, renamed into place and recorded as finished (pipeline/stages/hdf5/finished_files.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from wiki2bert_core.hdf5_format import MASKED_LM_POSITIONS, create_datasets, used_positions
from pipeline.stages.hdf5.malloc import reuse_freed_memory
from pipeline.stages.hdf5.finished_files import FinishedFiles
from pipeline.stages.hdf5.instances import (MaskingVocab, TokenRows, make_instances, plan_instances,
                                random_next_from_own_document)
from pipeline.stages.hdf5.tokenize import TokenFiles

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
    vocab: MaskingVocab
    max_seq_length: int
    max_predictions_per_seq: int
    config: Any  # the stage's Hdf5Config


def write_instance_file(task: InstanceFile) -> dict:
    """Write the file; returns its counts (recorded with it)."""
    reuse_freed_memory()
    config, seq, preds = task.config, task.max_seq_length, task.max_predictions_per_seq
    tokens = TokenFiles(task.tokens_dir)
    rng = _rng(config.random_seed, f"{task.name}/{seq}/{preds}")
    finished = FinishedFiles(task.finished_root)
    out_file = finished.path(task.relative)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    partial = out_file.with_name(out_file.name + ".tmp")
    counts = {"instances": 0, "random_next": 0, "random_next_own_document": 0, "masked_tokens": 0, "short_targets": 0,
              "document_rounds": 0}
    with h5py.File(partial, "w") as f:
        datasets = None
        for first, end in tokens.windows(config.window_tokens):
            docs = tokens.read(first, end, margin=seq)
            plan = plan_instances(docs, seq, config.short_seq_prob, config.dupe_factor, rng)
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
                block = make_instances(token_rows, plan.take(order[start:start + block_rows]), preds,
                                       config.masked_lm_prob, task.vocab, config.whole_word_masking, rng)
                for name, values in block.items():
                    datasets[name][at + start:at + start + len(values)] = values
                counts["masked_tokens"] += int(np.count_nonzero(used_positions(block[MASKED_LM_POSITIONS])))
            counts["instances"] += len(plan)
            counts["random_next"] += int(plan.random_next.sum())
            counts["random_next_own_document"] += random_next_from_own_document(docs, plan)
            counts["short_targets"] += plan.short_targets
            counts["document_rounds"] += plan.document_rounds
    partial.rename(out_file)
    counts["shard"] = task.shard_counts
    finished.record(task.relative, task.key, counts)
    return counts


def _rng(seed: int, name: str) -> np.random.Generator:
    words = np.frombuffer(hashlib.sha256(name.encode("utf-8")).digest(), dtype=np.uint32)
    return np.random.default_rng([seed, *words.tolist()])
