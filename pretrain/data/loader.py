"""Pretraining batches from the HDF5 files of a variant directory (wiki2bert_core/variant_dir.py), in NVIDIA's layout
(wiki2bert_core/hdf5_format.py; files made by NVIDIA's own scripts work too).

Order: in epoch e, rank r of W reads the files permutation(seed, e)[r::W], each file's rows in the order
permutation(seed, e, file); micro-batches run on across file and epoch boundaries. A variant of several languages
(one file per language and shard) is read with its languages interleaved: each micro-batch holds every language by
its share of the epoch's reads, each language's files still read one after another (InterleavedCursor). `BatchPlan`, the DataLoader's
sampler, names the rows of each micro-batch (and the epoch they are read in) together with the position after it
(`DataState`); the training loop keeps the position of the last batch it consumed and a checkpoint stores that, so a
resumed run reads exactly the batches it would have read, whatever was prefetched and whatever the number of workers.
With dynamic masking (masking.py) the reader draws each sequence's masks from its epoch and its index among all the
training rows, so the masks too are those of the uninterrupted run.

A phase's own mixture of languages (a variant of several languages, `language_alpha` / `language_weights`:
`with_language_mixture`) reads each file's rows as many times an epoch as its language's rate asks for: the first
`rows` of the file's permutation when fewer than all, else whole permutations (each further one from its own
stream) and the first rows of one more; a repeated row has its own masks under dynamic masking. Files of a
language with no share are left out of the epochs. Without one, every row is read once an epoch, as above. A
scheduled language_alpha (pretrain/schedules.py) gives a mixture for each of its points: at the first step of a
point's progress, each rank leaves the rest of its epoch and starts the next epoch at the new mixture's rates.

With settings scheduled over the phase, `BatchPlan` also names the optimizer step each micro-batch belongs to (the
phase's global_batch schedule says how many micro-batches a step has), from the step the run starts at; the reader
masks it with that step's mask settings. A checkpoint is always at a step's end, so a resumed plan starts at a step's
first micro-batch and names the steps, mixtures and masks the uninterrupted run had.

Files are opened lazily in the process that reads them: an h5py handle opened before the DataLoader forks its
workers is shared by them and corrupts reads. A worker reads a whole file at once (as NVIDIA's loader does):
NVIDIA's files are gzip-compressed, where reading scattered rows would decompress each chunk again and again.
"""
from __future__ import annotations

import dataclasses
import signal
from collections import OrderedDict
from pathlib import Path

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.hdf5_format import (DATASETS, INPUT_IDS, INPUT_MASK, MASKED_LM_IDS, MASKED_LM_POSITIONS,
                                       NEXT_SENTENCE_LABELS, SEGMENT_IDS, TOKEN_DATASETS, layout_problems,
                                       out_of_range, read_rows)
from wiki2bert_core.mixture import language_shares
from wiki2bert_core.variant_dir import (PARAMS_FILE, data_dir_of, file_language, read_params, read_record,
                                        training_files)
from pretrain.data.masking import DynamicMasking
from pretrain.data.packing import pack_batch
from pretrain.schedules import PhaseSchedules, parse_schedule

# HDF5 dataset -> the model's argument name
MODEL_ARGS = {INPUT_IDS: "input_ids", SEGMENT_IDS: "token_type_ids", INPUT_MASK: "attention_mask",
              MASKED_LM_POSITIONS: "masked_lm_positions", MASKED_LM_IDS: "masked_lm_ids",
              NEXT_SENTENCE_LABELS: "next_sentence_labels"}
CHECK_ROWS = 256  # rows per file whose values are checked before training (all rows are, as they are read)
CACHED_FILES = 2  # per reading process and language: a micro-batch can end one file and start the next
# a fifth word in the seed of a file's further row permutations (repeated rows): distinct from the row order's
# [seed, epoch, file] and dynamic masking's [seed, epoch, index, 1]
_REPEAT_STREAM = 2
INTERLEAVE_BLOCK = 4096  # slots of an epoch of several languages whose share of each language is exact (InterleavedCursor)


@dataclasses.dataclass(frozen=True)
class DataFile:
    path: Path
    samples: int

    @property
    def language(self) -> str | None:
        """The language of a file of a variant of several languages (variant_dir.file_language), else None."""
        return file_language(self.path)


@dataclasses.dataclass(frozen=True)
class DataDirectory:
    """Checked HDF5 files of one data directory and their common shapes."""
    data_dir: Path
    files: list[DataFile]  # sorted by name; files without samples are left out
    seq_len: int  # the files' sequence length: the one the run trains at
    max_predictions: int
    # rows of each file one epoch reads: a phase's own mixture of languages (with_language_mixture); None: each once
    epoch_rows: tuple[int, ...] | None = None
    shares: dict[str, float] | None = None  # with epoch_rows: each language's share of the masked tokens read
    # a scheduled language_alpha: the (progress, epoch_rows, shares) of each mixture after the first, from that
    # share of the phase's steps on
    later_mixtures: tuple[tuple[float, tuple[int, ...], dict[str, float]], ...] = ()

    @property
    def samples(self) -> int:
        return sum(f.samples for f in self.files)

    @property
    def mixtures(self) -> list[tuple[float, tuple[int, ...] | None, dict[str, float] | None]]:
        """(progress, epoch_rows, shares) of every mixture of the phase, the first at progress 0."""
        return [(0.0, self.epoch_rows, self.shares), *self.later_mixtures]

    def reading(self, epoch_rows: tuple[int, ...] | None = None) -> list[int]:
        """The indices of the files an epoch reads (at `epoch_rows`; default the first mixture's)."""
        return [i for i, rows in enumerate(epoch_rows or self.epoch_rows or [f.samples for f in self.files]) if rows]

    def check_positions(self, max_position_embeddings: int) -> None:
        """ConfigError if the sequences are longer than a model of `max_position_embeddings` positions takes."""
        if self.seq_len > max_position_embeddings:
            raise ConfigError(f"{self.data_dir}: sequences of length {self.seq_len}, longer than the model's "
                              f"max_position_embeddings {max_position_embeddings}")


@dataclasses.dataclass(frozen=True)
class DataState:
    """Where one rank is in its stream: `files` is its file order (names) in `epoch`, of which `files_done` are
    finished, and `row` rows of the current file's permutation are read (languages interleaved: the first
    `files_done` are the finished ones, and `row` is the number of rows read this epoch; InterleavedCursor)."""
    epoch: int = 0
    files: tuple[str, ...] | None = None  # None: not started (computed from seed and epoch)
    files_done: int = 0
    row: int = 0

    def to_dict(self) -> dict:
        return {"epoch": self.epoch, "files": list(self.files or ()), "files_done": self.files_done,
                "row": self.row}

    @classmethod
    def from_dict(cls, d: dict) -> DataState:
        return cls(epoch=int(d["epoch"]), files=tuple(d["files"]) or None, files_done=int(d["files_done"]),
                   row=int(d["row"]))


def redistribute(states: list[DataState], world_size: int) -> list[DataState]:
    """The data positions of a checkpoint's ranks, dealt out to `world_size` ranks (a resume on another number of
    ranks): the files that the saved ranks had not finished in the earliest epoch any of them is in go round-robin
    to the new ranks, language after language (a file begun is read again from its first row); later epochs split
    as usual (BatchPlan.epoch_files). A rank that was already in a later epoch has its reads there repeated."""
    epoch = min(s.epoch for s in states)
    left = [name for s in states if s.epoch == epoch for name in (s.files or ())[s.files_done:]]
    left.sort(key=lambda name: file_language(name) or "")  # several languages: dealt as BatchPlan.epoch_files does
    return [DataState(epoch, tuple(left[r::world_size]), 0, 0) for r in range(world_size)]


def open_data(data_dir: Path, seq_len: int | None, vocab_size: int, world_size: int = 1,
              language_alpha: float | list | None = None, language_weights: dict[str, float] | None = None
              ) -> DataDirectory:
    """The training files of a data directory (variant_dir.training_files), checked (see open_files), with a
    phase's own mixture of languages (with_language_mixture; a piecewise schedule of alpha: one for each of its
    points). ConfigError if fewer files are read than there are ranks."""
    files = open_files(training_files(data_dir), seq_len, vocab_size)
    (_, first), *later = parse_schedule("language_alpha", language_alpha).points
    data = with_language_mixture(files, first, language_weights or {})
    mixtures = [(progress, with_language_mixture(files, alpha, language_weights or {})) for progress, alpha in later]
    data = dataclasses.replace(data, later_mixtures=tuple((progress, mixture.epoch_rows, mixture.shares)
                                                          for progress, mixture in mixtures))
    for mixture in [data, *(mixture for _, mixture in mixtures)]:
        if len(mixture.reading()) < world_size:
            raise ConfigError(f"{data_dir}: {len(mixture.reading())} HDF5 file(s) for {world_size} data-parallel "
                              f"ranks; every rank needs at least one file (make more, smaller shards)")
    return data


def with_language_mixture(data: DataDirectory, alpha: float | None, weights: dict[str, float]) -> DataDirectory:
    """`data` read by a phase's own mixture of languages: language l's share of the masked tokens read is
    weight_l * size_l ** alpha / sum(...) (wiki2bert_core/mixture.py; sizes and the files' masked tokens from
    variant.json; alpha null: the pipeline's, weights 1 unless named), so each of its files' rows is read
    share_l / (its share of the files' masked tokens) times an epoch. Unchanged without alpha and weights.
    ConfigError for data of one language, a weight for a language it does not hold, or a share for a language
    without training instances."""
    if alpha is None and not weights:
        return data
    record = read_record(data.data_dir) or {}
    params = read_params(data.data_dir)
    setting = "language_alpha" if alpha is not None else f"language_weights.{next(iter(weights))}"
    if params is None or params.mixture is None:
        raise ConfigError(f"{setting}: {data.data_dir} holds one language (its variant.json records no mixture); "
                          "language_alpha and language_weights sample the languages of a run of several")
    languages = params.mixture.languages
    for language in weights:
        if language not in languages:
            raise ConfigError(f"language_weights.{language}: not a language of {data.data_dir} "
                              f"({', '.join(languages)})")
    try:
        masked = {language: int(record["languages"][language]["training_masked_tokens"]) if language in
                  record["languages"] else 0 for language in languages}
    except (KeyError, TypeError, ValueError):
        raise DataError(f"{data.data_dir / PARAMS_FILE}: no masked tokens per language (languages."
                        f"<language>.training_masked_tokens); not a variant.json of the hdf5 stage of several "
                        f"languages") from None
    held = language_shares(masked, 1.0)
    shares = language_shares({language: share.tokens for language, share in languages.items()},
                             params.mixture.alpha if alpha is None else alpha, weights)
    missing = [language for language, share in shares.items() if share and not held[language]]
    if missing:
        raise ConfigError(f"{setting}: gives {missing[0]} a share, but {data.data_dir} holds no training instances "
                          f"of it (its weight in the pipeline was 0)")
    if not any(shares.values()):
        raise ConfigError(f"{setting}: every language has weight 0")
    rate = {language: shares[language] / held[language] if held[language] else 0.0 for language in languages}
    rows = tuple(round(rate.get(f.language, 0.0) * f.samples) for f in data.files)
    return dataclasses.replace(data, epoch_rows=rows, shares=shares)


def open_files(paths: list[Path], seq_len: int | None, vocab_size: int) -> DataDirectory:
    """Check every file's layout, that all have the shapes of their variant.json (else of the first file), and a
    sample of their values against `vocab_size` and the sequence length; one line naming the file on the first
    problem: DataError for a bad or damaged file, ConfigError for files that do not fit the settings. `seq_len`: the
    sequence length the run trains on, which the files' must equal; None: the data's."""
    data_dir = data_dir_of(paths[0])
    params = read_params(data_dir)
    shape = (params.max_seq_length, params.max_predictions_per_seq) if params else None
    files = []
    for path in paths:
        samples, file_shape = _inspect(path, seq_len, vocab_size)
        if params and file_shape != shape:
            raise DataError(f"{path}: {file_shape[0]} tokens and {file_shape[1]} masked positions per sample, but "
                            f"{data_dir / PARAMS_FILE} says {shape[0]} and {shape[1]}; a file of another variant?")
        if shape not in (None, file_shape):
            raise DataError(f"{path}: {file_shape[0]} tokens and {file_shape[1]} masked positions per sample, other "
                            f"files have {shape[0]} and {shape[1]}; mixed HDF5 variants in one directory?")
        shape = file_shape
        if samples:
            files.append(DataFile(path, samples))
    if not files:
        raise DataError(f"{data_dir}: the HDF5 files hold no samples")
    return DataDirectory(data_dir, files, *shape)


def _inspect(path: Path, seq_len: int | None, vocab_size: int) -> tuple[int, tuple[int, int]]:
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise DataError(f"{path}: not a readable HDF5 file ({e})") from None
    try:
        with f:
            return _check_layout(f, path, seq_len, vocab_size)
    except OSError as e:  # the file opens but a dataset's chunks do not decompress
        raise DataError(f"{path}: cannot read its datasets ({e}); the file is damaged") from None


def _check_layout(f: h5py.File, path: Path, seq_len: int | None, vocab_size: int) -> tuple[int, tuple[int, int]]:
    """(samples, (sequence length, masked positions)) of a file that has the layout, `seq_len` if given and no value
    out of range in its first rows."""
    problems = layout_problems(f)
    if problems:
        raise DataError(f"{path}: not NVIDIA's BERT layout: {problems[0]}")
    n, length = f[INPUT_IDS].shape
    if seq_len is not None and length != seq_len:
        raise ConfigError(f"{path}: sequences of length {length}, but this phase trains on seq_len {seq_len} "
                          f"(use the HDF5 variant made for {seq_len}, or seq_len null to train on the data's)")
    predictions = f[MASKED_LM_POSITIONS].shape[1]
    bad = out_of_range(read_rows(f, slice(0, CHECK_ROWS)), vocab_size, length)
    if bad and bad[0].dataset in TOKEN_DATASETS:
        raise DataError(f"{path}: {bad[0].dataset} holds token id {bad[0].value}, outside the vocabulary of "
                        f"{vocab_size} tokens; were these files made with another vocab.txt?")
    if bad:
        raise DataError(f"{path}: row {bad[0].rows[0]}: {bad[0].dataset} holds {bad[0].problem} ({bad[0].value})")
    return n, (length, predictions)


class BatchPlan(Sampler):
    """An endless sampler of micro-batches for one data-parallel rank. Yields (pieces, state): pieces are
    (file index, rows, epoch) to read in that order, state the DataState after the micro-batch (as a dict). With
    `schedules` (settings scheduled over the phase), (pieces, state, step): the optimizer step (1-based) the
    micro-batch belongs to, counted from `first_step`, the step the run starts at."""

    def __init__(self, data: DataDirectory, micro_batch: int, rank: int = 0, world_size: int = 1,
                 seed: int = 0, state: DataState | None = None, schedules: PhaseSchedules | None = None,
                 first_step: int = 1):
        self.sizes = [f.samples for f in data.files]
        self.languages = [f.language for f in data.files]
        self.interleaved = len(set(self.languages) - {None}) > 1
        self.mixtures = [(progress, rows) for progress, rows, _ in data.mixtures]
        self.schedules, self.first_step = schedules, first_step
        self.data = data
        self._use_mixture(self._mixture_at(first_step))
        self.names = [f.path.name for f in data.files]
        self.micro_batch, self.rank, self.world_size, self.seed = micro_batch, rank, world_size, seed
        self.start = state or DataState()
        self.index = {name: i for i, name in enumerate(self.names)}
        if self.start.files is not None:
            missing = [name for name in self.start.files if name not in self.index]
            if missing:
                raise DataError(f"{data.data_dir}: {missing[0]} is gone, but the checkpoint's data position is "
                                    f"in a file order that uses it; resume with the same data")

    def _mixture_at(self, step: int) -> int:
        """The index of the mixture in effect at `step`."""
        if self.schedules is None:
            return 0
        progress = self.schedules.progress(step)
        return max(i for i, (start, _) in enumerate(self.mixtures) if start <= progress)

    def _use_mixture(self, index: int) -> None:
        self.mixture = index
        epoch_rows = self.mixtures[index][1]
        self.rows = list(epoch_rows or self.sizes)  # rows of each file an epoch reads
        self.reading = self.data.reading(epoch_rows)

    def epoch_files(self, epoch: int) -> list[int]:
        """The rank's files of an epoch: the epoch's permutation of the files read, dealt out in turn. Several
        languages are dealt language after language (a stable sort), so every rank reads every language that has
        as many files as there are ranks, and each language's files are spread evenly over the ranks."""
        order = [self.reading[int(i)] for i in np.random.default_rng([self.seed, epoch]).permutation(len(self.reading))]
        if self.interleaved:
            order.sort(key=lambda i: self.languages[i])
        return order[self.rank::self.world_size]

    def file_rows(self, epoch: int, file_index: int) -> np.ndarray:
        """The rows of a file an epoch reads, in order: a permutation of the file's rows, cut short or followed by
        further permutations (their rows numbered on from the file's size: row % size is the file's row)."""
        size, wanted = self.sizes[file_index], self.rows[file_index]
        rows = [np.random.default_rng([self.seed, epoch, file_index]).permutation(size)]
        for repeat in range(1, -(-wanted // size)):
            rows.append(np.random.default_rng([self.seed, epoch, file_index, repeat, _REPEAT_STREAM]).permutation(size)
                        + repeat * size)
        return np.concatenate(rows)[:wanted] if wanted != size else rows[0]

    def cursor(self, epoch: int, order: list[int] | None = None, files_done: int = 0, row: int = 0
               ) -> FileCursor | InterleavedCursor:
        """The rank's position at (epoch, its file order: default the epoch's, files_done, row) (DataState)."""
        order = self.epoch_files(epoch) if order is None else order
        if self.interleaved:
            return InterleavedCursor(self, epoch, order, row)
        return FileCursor(self, epoch, order, files_done, row)

    def __iter__(self):
        self._use_mixture(self._mixture_at(self.first_step))
        start = self.start
        cursor = self.cursor(start.epoch, None if start.files is None else [self.index[n] for n in start.files],
                             start.files_done, start.row)
        if self.first_step > 1 and self._mixture_at(self.first_step - 1) != self.mixture:  # resumed where one starts
            cursor = self.cursor(start.epoch + 1)
        step, left = self.first_step - 1, 0  # left: micro-batches of `step` still to come
        while True:
            if self.schedules is not None and not left:
                step, left = step + 1, self.schedules.accumulation(step + 1)
                mixture = self._mixture_at(step)
                if mixture != self.mixture:
                    self._use_mixture(mixture)
                    cursor = self.cursor(cursor.epoch + 1)
            pieces = cursor.take(self.micro_batch)
            state = cursor.state().to_dict()
            if self.schedules is None:
                yield pieces, state
            else:
                left -= 1
                yield pieces, state, step


class FileCursor:
    """A rank reading its files one after another (one language, or none named): each file's rows in
    BatchPlan.file_rows order; micro-batches run on across file and epoch boundaries."""

    def __init__(self, plan: BatchPlan, epoch: int, order: list[int], files_done: int, row: int):
        self.plan, self.epoch, self.order, self.done, self.row = plan, epoch, order, files_done, row
        self.rows: np.ndarray | None = None

    def take(self, n: int) -> list[tuple[int, np.ndarray, int]]:
        pieces = []
        while n:
            if self.done == len(self.order):
                self.epoch, self.order, self.done, self.row = self.epoch + 1, self.plan.epoch_files(self.epoch + 1), 0, 0
                continue
            if self.rows is None:
                self.rows = self.plan.file_rows(self.epoch, self.order[self.done])
            take = min(n, len(self.rows) - self.row)
            pieces.append((self.order[self.done], self.rows[self.row:self.row + take], self.epoch))
            self.row, n = self.row + take, n - take
            if self.row == len(self.rows):
                self.done, self.row, self.rows = self.done + 1, 0, None
        return pieces

    def state(self) -> DataState:
        return DataState(self.epoch, tuple(self.plan.names[i] for i in self.order), self.done, self.row)


class InterleavedCursor:
    """A rank reading a variant of several languages with the languages interleaved in every micro-batch (read file
    after file, a micro-batch would hold one language for thousands of steps: the model forgets the others). Each
    language's files in the rank's order are one stream of rows (each file's in BatchPlan.file_rows order); the
    epoch's slots take the streams' rows block by block: block b of B takes rows [R_l*b//B, R_l*(b+1)//B) of the
    stream of R_l rows, spread evenly over the block's slots, so every micro-batch holds each language by its share
    of the epoch's reads (within a row or two). A position is the epoch's slot (DataState.row); the state's `files`
    lists the files every stream has finished first (language by language, in stream order), then the rest in the
    rank's order, so `redistribute` deals out the unfinished ones and the streams read from it are the same."""

    def __init__(self, plan: BatchPlan, epoch: int, order: list[int], slot: int):
        self.plan = plan
        self._start(epoch, order, slot)

    def _start(self, epoch: int, order: list[int], slot: int) -> None:
        self.epoch, self.order = epoch, order
        languages = sorted({self.plan.languages[i] for i in order})
        self.streams = [[i for i in order if self.plan.languages[i] == language] for language in languages]
        self.ends = [np.cumsum([self.plan.rows[i] for i in stream]) for stream in self.streams]
        self.totals = [int(ends[-1]) for ends in self.ends]
        self.size = sum(self.totals)
        self.blocks = -(-self.size // INTERLEAVE_BLOCK)
        self.reading: list[tuple[int, np.ndarray] | None] = [None] * len(self.streams)  # each stream's file, rows
        self.slot = slot
        if slot < self.size:
            block = self._block_of(slot)
            self._enter(block)
            skipped = self.labels[:slot - self.block_start]
            self.at = [a + int(np.count_nonzero(skipped == s)) for s, a in enumerate(self.at)]
            self.offset = slot - self.block_start
        else:
            self.block, self.labels, self.offset, self.at = self.blocks, np.zeros(0, np.int64), 0, list(self.totals)

    def _firsts(self, block: int) -> list[int]:
        """Each stream's first row in `block`."""
        return [total * block // self.blocks for total in self.totals]

    def _block_of(self, slot: int) -> int:
        low, high = 0, self.blocks - 1  # the last block whose first slot is at most `slot`
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if sum(self._firsts(middle)) <= slot else (low, middle - 1)
        return low

    def _enter(self, block: int) -> None:
        """Start `block`: its slots' streams, each stream's rows at evenly spaced slots."""
        self.block, self.at = block, self._firsts(block)
        self.block_start = sum(self.at)
        counts = [after - first for first, after in zip(self.at, self._firsts(block + 1))]
        keys = np.concatenate([(np.arange(count) + 0.5) / count for count in counts])
        streams = np.repeat(np.arange(len(counts)), counts)
        self.labels = streams[np.argsort(keys, kind="stable")]
        self.offset = 0

    def take(self, n: int) -> list[tuple[int, np.ndarray, int]]:
        pieces = []
        while n:
            if self.slot == self.size:
                self._start(self.epoch + 1, self.plan.epoch_files(self.epoch + 1), 0)
                continue
            if self.offset == len(self.labels):
                self._enter(self.block + 1)
            take = min(n, len(self.labels) - self.offset)
            chunk = self.labels[self.offset:self.offset + take]
            for stream, count in enumerate(np.bincount(chunk, minlength=len(self.streams)).tolist()):
                pieces += self._stream_pieces(stream, self.at[stream], self.at[stream] + count)
                self.at[stream] += count
            self.offset, self.slot, n = self.offset + take, self.slot + take, n - take
        return pieces

    def _stream_pieces(self, stream: int, first: int, after: int) -> list[tuple[int, np.ndarray, int]]:
        """Rows [first, after) of a stream as (file index, rows, epoch), file by file."""
        pieces, ends = [], self.ends[stream]
        while first < after:
            k = int(np.searchsorted(ends, first, side="right"))
            file_index, file_first = self.streams[stream][k], int(ends[k - 1]) if k else 0
            if self.reading[stream] is None or self.reading[stream][0] != file_index:
                self.reading[stream] = file_index, self.plan.file_rows(self.epoch, file_index)
            last = min(after, int(ends[k]))
            pieces.append((file_index, self.reading[stream][1][first - file_first:last - file_first], self.epoch))
            first = last
        return pieces

    def state(self) -> DataState:
        finished = [stream[:int(np.searchsorted(ends, at, side="right"))]
                    for stream, ends, at in zip(self.streams, self.ends, self.at)]
        done = {i for files in finished for i in files}
        files = [i for files in finished for i in files] + [i for i in self.order if i not in done]
        return DataState(self.epoch, tuple(self.plan.names[i] for i in files), len(done), self.slot)


class BatchReader(Dataset):
    """Reads the micro-batches a BatchPlan names: a dict of int64 tensors under the model's argument names, plus
    `data_state` (the position after it) and `problem` ("" or one line naming a file and what is wrong with it:
    a value the model cannot take, or data that does not read); a batch with a problem holds nothing else.
    `masking`: the files' masks replaced by dynamic ones (None: read as written), those of the micro-batch's step
    where the plan names it."""

    def __init__(self, data: DataDirectory, vocab_size: int, pack: bool = False, masking: DynamicMasking | None = None):
        self.paths = [f.path for f in data.files]
        self.vocab_size, self.seq_len, self.pack, self.masking = vocab_size, data.seq_len, pack, masking
        self.sizes = [f.samples for f in data.files]
        self.first_index = np.cumsum([0] + self.sizes)  # of each file's rows among all rows
        self._cache: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self.cached_files = CACHED_FILES * max(1, len({f.language for f in data.files} - {None}))

    def __getitem__(self, item) -> dict:
        pieces, state, *step = item
        try:
            batch = self.read([(file_index, rows) for file_index, rows, _ in pieces])
        except DataError as e:
            return {"data_state": state, "problem": str(e)}
        if self.masking is not None:  # a repeated row (rows beyond the file's size) is another sequence to mask
            epochs = np.concatenate([np.full(len(rows), epoch) for _, rows, epoch in pieces])
            indices = np.concatenate([self.first_index[file_index] + rows % self.sizes[file_index]
                                      + rows // self.sizes[file_index] * self.first_index[-1]
                                      for file_index, rows, _ in pieces])
            batch = (self.masking.at(step[0]) if step else self.masking)(batch, epochs, indices)
        if self.pack:
            batch = pack_batch(batch)
        batch["data_state"] = state
        batch["problem"] = ""
        return batch

    def read(self, pieces: list[tuple[int, np.ndarray]], whole_files: bool = True) -> dict[str, torch.Tensor]:
        """The rows `pieces` name ((file index, rows) in that order) as int64 tensors under the model's argument
        names; DataError naming the file (and row) if they do not read or hold a value the model cannot take.
        `whole_files`: through the cache of whole files (training reads each file's rows in a permutation); else only
        the chunks that hold the rows' range are read (a held-out set read once)."""
        columns = {key: [] for key in DATASETS}
        for file_index, rows in pieces:
            rows = rows % self.sizes[file_index]  # a repeated row (with_language_mixture) is the file's row
            try:
                if whole_files:
                    arrays, offset = self._arrays(file_index), 0
                else:
                    offset = int(rows.min()) if len(rows) else 0
                    with h5py.File(self.paths[file_index], "r") as f:
                        arrays = read_rows(f, slice(offset, int(rows.max()) + 1 if len(rows) else 0))
            except OSError as e:  # a chunk the check before training did not read does not decompress
                raise DataError(f"{self.paths[file_index]}: cannot read its datasets ({e}); the file is damaged"
                                ) from None
            piece = {key: arrays[key][rows - offset] for key in DATASETS}
            bad = out_of_range(piece, self.vocab_size, self.seq_len)
            if bad:
                raise DataError(f"{self.paths[file_index]}: row {int(rows[bad[0].rows[0]])}: {bad[0].dataset} holds "
                                f"{bad[0].problem}")
            for key in DATASETS:
                columns[key].append(piece[key])
        return {MODEL_ARGS[key]: torch.from_numpy(np.concatenate(parts).astype(np.int64, copy=False))
                for key, parts in columns.items()}

    def _arrays(self, file_index: int) -> dict[str, np.ndarray]:
        if file_index in self._cache:
            self._cache.move_to_end(file_index)
        else:
            with h5py.File(self.paths[file_index], "r") as f:
                self._cache[file_index] = read_rows(f)
            while len(self._cache) > self.cached_files:
                self._cache.popitem(last=False)
        return self._cache[file_index]


def model_inputs(batch: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """A BatchReader batch's model inputs and its `data_state`; DataError (one line) if it has a problem."""
    if batch["problem"]:
        raise DataError(batch["problem"])
    return {k: v for k, v in batch.items() if k not in ("data_state", "problem")}, batch["data_state"]


def make_loader(data: DataDirectory, micro_batch: int, vocab_size: int, rank: int = 0, world_size: int = 1,
                seed: int = 0, workers: int = 2, state: DataState | None = None,
                pin_memory: bool = False, pack: bool = False, masking: DynamicMasking | None = None,
                schedules: PhaseSchedules | None = None, first_step: int = 1) -> DataLoader:
    """Micro-batches of `micro_batch` instances each; `pack`: in the packed layout of packing.py; `masking`: with
    dynamic masks (masking.py) instead of the files'; `schedules`: settings scheduled over the phase, from step
    `first_step` on (BatchPlan)."""
    return DataLoader(BatchReader(data, vocab_size, pack, masking),
                      sampler=BatchPlan(data, micro_batch, rank, world_size, seed, state, schedules, first_step),
                      batch_size=None, num_workers=workers, pin_memory=pin_memory,
                      prefetch_factor=4 if workers else None, worker_init_fn=_ignore_stop_signals,
                      # its own generator: creating the loader must not draw from the global torch RNG (dropout)
                      generator=torch.Generator().manual_seed(seed))


def _ignore_stop_signals(worker_id: int) -> None:
    """SIGINT/SIGTERM reach the whole process group; the main process stops at its next micro-batch, checkpoints
    and then shuts the workers down, so they must not die of the signal first (the loop would see a dead worker
    instead of the signal; they exit with the main process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
