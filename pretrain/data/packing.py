"""Packing whole instances into the rows of a micro-batch (`pack_sequences`), so that little compute goes to padding.

A micro-batch still holds `micro_batch` instances, exactly those the unpacked run reads (same order, same data
position, so `global_batch` counts sequences and resuming is unchanged); only their layout changes: they are placed
into as few rows of `seq_len` as first-fit decreasing finds. A pure function of the instances' lengths, so the
packing of a micro-batch is as deterministic as the micro-batch itself. Each instance keeps its own positions
(restarting at 0), segment ids, masked positions (relative to its own [CLS]) and NSP label, and the losses are
normalized over the same masked positions and instances as unpacked: packing changes no loss and no gradient.

A packed batch has R rows (R <= micro_batch, varying from batch to batch) and K = micro_batch instances:
input_ids, token_type_ids, attention_mask (the instances of a row numbered 1, 2, ...; 0 = padding),
position_ids [R, L]; cls_positions [K] (r * L + c of each instance's [CLS]); masked_lm_positions, masked_lm_ids
[K, P]; next_sentence_labels [K]. The instances are in row-major order.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def plan_rows(lengths: list[int], capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """First-fit decreasing: the row and the offset in it of each instance (lengths <= capacity). Longest first
    (ties by index), each into the first row with room, else into a new row."""
    row, offset = np.zeros(len(lengths), np.int64), np.zeros(len(lengths), np.int64)
    used: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = next((r for r, fill in enumerate(used) if fill + lengths[i] <= capacity), len(used))
        if r == len(used):
            used.append(0)
        row[i], offset[i] = r, used[r]
        used[r] += lengths[i]
    return row, offset


def pack_batch(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The packed layout (see above) of an unpacked micro-batch as the HDF5 files hold it (each row's real
    tokens first, then padding)."""
    instances, length = batch["input_ids"].shape
    lengths = batch["attention_mask"].sum(1)
    row, offset = plan_rows(lengths.tolist(), length)
    order = torch.from_numpy(np.lexsort((offset, row)))  # row-major
    row, offset = torch.from_numpy(row), torch.from_numpy(offset)
    start = row * length + offset
    columns = torch.arange(length)
    real = columns < lengths[:, None]  # [K, L]
    target = (start[:, None] + columns)[real]  # row-major position of each real token
    rows = int(row.max()) + 1 if instances else 0
    number = torch.empty(instances, dtype=torch.long)  # each instance's number within its row, 1, 2, ...
    number[order] = torch.cat([torch.arange(1, int(n) + 1) for n in torch.bincount(row, minlength=rows)])
    packed = {}
    for key, values in (("input_ids", batch["input_ids"]), ("token_type_ids", batch["token_type_ids"]),
                        ("attention_mask", number[:, None].expand(-1, length)),
                        ("position_ids", columns.expand(instances, -1))):
        flat = torch.zeros(rows * length, dtype=values.dtype)
        flat[target] = values[real]
        packed[key] = flat.view(rows, length)
    packed["cls_positions"] = start[order]
    for key in ("masked_lm_positions", "masked_lm_ids", "next_sentence_labels"):
        packed[key] = batch[key][order]
    return packed
