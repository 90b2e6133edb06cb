"""NVIDIA's BERT pretraining HDF5 layout, defined once: the dataset names, dtypes and shapes, the zero-padding of
the masked positions, and small helpers to create, check and read the datasets (the hdf5 stage writes it,
`pipeline verify` checks it, pretraining reads it; files made by NVIDIA's own scripts have the same layout).

One file holds N instances (L = max_seq_length, P = max_predictions_per_seq):

    input_ids            int32 [N, L]  token ids, [CLS] A [SEP] B [SEP], 0-padded
    input_mask           int8  [N, L]  1 on the real tokens, then 0
    segment_ids          int8  [N, L]  0 for [CLS] A [SEP], 1 for B [SEP], 0 in the padding
    masked_lm_positions  int32 [N, P]  sorted positions of the masked tokens, 0-padded
    masked_lm_ids        int32 [N, P]  the original tokens at those positions, 0-padded
    next_sentence_labels int8  [N]     1 = B is a random sentence, 0 = B follows A

Position 0 is always [CLS] and never masked, so a masked_lm_positions slot of 0 is an unused one (readers stop at
the first 0), and its masked_lm_ids slot is 0 too.
"""
from __future__ import annotations

import collections
import dataclasses

import h5py
import numpy as np

INPUT_IDS, INPUT_MASK, SEGMENT_IDS = "input_ids", "input_mask", "segment_ids"
MASKED_LM_POSITIONS, MASKED_LM_IDS, NEXT_SENTENCE_LABELS = "masked_lm_positions", "masked_lm_ids", \
    "next_sentence_labels"
DTYPES = {INPUT_IDS: np.dtype(np.int32), INPUT_MASK: np.dtype(np.int8), SEGMENT_IDS: np.dtype(np.int8),
          MASKED_LM_POSITIONS: np.dtype(np.int32), MASKED_LM_IDS: np.dtype(np.int32),
          NEXT_SENTENCE_LABELS: np.dtype(np.int8)}
DATASETS = tuple(DTYPES)
SEQUENCE_DATASETS = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS)  # [N, max_seq_length]
PREDICTION_DATASETS = (MASKED_LM_POSITIONS, MASKED_LM_IDS)  # [N, max_predictions_per_seq], 0-padded
TOKEN_DATASETS = (INPUT_IDS, MASKED_LM_IDS)  # hold vocabulary ids
UNUSED_POSITION = 0  # a masked_lm_positions slot holding this ([CLS]'s position) is padding
SUFFIXES = (".hdf5", ".h5")


def dataset_width(name: str, max_seq_length: int, max_predictions: int) -> tuple[int, ...]:
    """The shape of one row of dataset `name`."""
    if name == NEXT_SENTENCE_LABELS:
        return ()
    return (max_predictions,) if name in PREDICTION_DATASETS else (max_seq_length,)


def used_positions(masked_lm_positions):
    """True on the masked_lm_positions slots that hold a masked token (numpy or torch)."""
    return masked_lm_positions != UNUSED_POSITION


def create_datasets(f: h5py.File, rows: int, max_seq_length: int, max_predictions: int, chunk_rows: int,
                    **h5_options) -> dict[str, h5py.Dataset]:
    """The six datasets, empty, with `rows` rows chunked `chunk_rows` at a time (h5_options: compression...)."""
    datasets = {}
    for name, dtype in DTYPES.items():
        width = dataset_width(name, max_seq_length, max_predictions)
        datasets[name] = f.create_dataset(name, shape=(rows, *width), maxshape=(None, *width),
                                          chunks=(chunk_rows, *width), dtype=dtype, **h5_options)
    return datasets


def missing_datasets(f: h5py.File) -> list[str]:
    """The layout's datasets that `f` lacks (or holds as something other than a dataset)."""
    return [name for name in DATASETS if name not in f or not isinstance(f[name], h5py.Dataset)]


def layout_problems(f: h5py.File) -> list[str]:
    """What keeps `f` from being read as the layout, [] if nothing: datasets that are missing, do not hold
    integers, or whose shapes do not fit together (shape_problems). The one rule of `pipeline verify` and
    pretraining. Integers of other widths than DTYPES' are read too, as NVIDIA's loader reads them (the values are
    checked against what the model takes: out_of_range)."""
    missing = missing_datasets(f)
    if missing:
        return [f"missing dataset{'s' if len(missing) > 1 else ''} {', '.join(missing)}"]
    problems = [f"{name}: dtype {f[name].dtype}, expected integers ({DTYPES[name]})"
                for name in DATASETS if f[name].dtype.kind not in "iu"]
    return problems + shape_problems({name: f[name].shape for name in DATASETS})


def shape_problems(shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """What is wrong with the shapes of a file's six datasets (name -> shape), each problem naming the dataset at
    fault: N (the rows) is what most datasets have, and a group's width (the sequence datasets', the masked
    positions') what most of the group has, so that one dataset of another width is named, not the ones that agree
    with each other; a tie goes to input_ids and masked_lm_positions. next_sentence_labels may be [N, 1]."""
    def most_common(values):
        return collections.Counter(values).most_common(1)[0][0]  # ties: the first of `values`

    n = most_common(shape[0] if shape else None for shape in shapes.values())
    problems = []
    for name, shape in shapes.items():
        dims = ((n,), (n, 1)) if name == NEXT_SENTENCE_LABELS else None
        if (shape not in dims) if dims else (len(shape) != 2 or shape[0] != n):
            problems.append(f"{name}: shape {shape}, expected {'(N,)' if dims else '(N, width)'} with N = {n}, the "
                            f"rows of the other datasets")
    if problems:
        return problems
    for group in (SEQUENCE_DATASETS, PREDICTION_DATASETS):
        width = most_common(shapes[name][1] for name in group)
        agree = [name for name in group if shapes[name][1] == width]
        problems += [f"{name}: shape {shapes[name]}, but {' and '.join(agree)} {'has' if len(agree) == 1 else 'have'} "
                     f"{(n, width)}" for name in group if shapes[name][1] != width]
    return problems


def read_rows(f: h5py.File, rows=slice(None)) -> dict[str, np.ndarray]:
    """The six datasets' `rows` (a slice or index array; all rows by default), as numpy arrays; next_sentence_labels
    as [N] also where a writer stored it as [N, 1]."""
    arrays = {name: f[name][rows] for name in DATASETS}
    labels = arrays[NEXT_SENTENCE_LABELS]
    arrays[NEXT_SENTENCE_LABELS] = labels.reshape(len(labels))
    return arrays


@dataclasses.dataclass(frozen=True)
class OutOfRange:
    """The rows of one dataset that hold a value the model cannot take."""
    dataset: str
    rows: np.ndarray  # their indices, ascending
    value: int  # the first such value
    problem: str  # what such a value is, e.g. "a token id outside the vocabulary of 30522 tokens"


def out_of_range(rows: dict[str, np.ndarray], vocab_size: int, max_seq_length: int) -> list[OutOfRange]:
    """The datasets among `rows` (read_rows' arrays) holding a value the model cannot take: a token id outside the
    vocabulary, a masked position outside the sequence, a segment id, input mask or next-sentence label other than 0
    or 1; the token ids first."""
    token = f"a token id outside the vocabulary of {vocab_size} tokens"
    limits = {**{name: (vocab_size, token) for name in TOKEN_DATASETS},
              MASKED_LM_POSITIONS: (max_seq_length, f"a position outside the sequence of {max_seq_length} tokens"),
              **{name: (2, "a value other than 0 or 1") for name in (SEGMENT_IDS, INPUT_MASK, NEXT_SENTENCE_LABELS)}}
    found = []
    for name, (limit, problem) in limits.items():
        values = rows[name].reshape(len(rows[name]), -1)
        bad = (values < 0) | (values >= limit)
        hits = np.flatnonzero(bad.any(axis=1))
        if len(hits):
            found.append(OutOfRange(name, hits, int(values[hits[0]][bad[hits[0]]][0]), problem))
    return found
