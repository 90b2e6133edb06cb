"""`pretrain plan`: what a phase will draw from its data, per language and source, and how often it repeats each.

The run draws `steps` x `global_batch` sequences (a scheduled global_batch: each step's). An epoch reads each
training file's rows once, or, with a phase's own mixture of languages (language_alpha, language_weights), the file's
`epoch_rows` (pretrain/data/loader.py), so file f is read draws x epoch_rows_f / sum(epoch_rows) times over its rows
(a scheduled language_alpha: summed over its mixtures, each with the draws of its steps): its rows repeat
reads_f / rows_f times.
Per language, the plan prints the training instances and their real tokens (the input masks summed, each row once),
the sequences and tokens the run draws and the repeats of the instances.

The HDF5 instances do not record their source; the shard stage's record of each shard's documents does
(`<workdir>/<lang>/shard/<shard>.docs.jsonl` beside the variant's `hdf5/` directory: source, id, and "copy": k for a
document written again by the source weights or the pipeline's language mixture). The HDF5 file of a shard holds
`dupe_factor` instance sets of each document line, so a document of source s is seen, on average over its source,

    sum over the language's files f of (lines of s in f) x dupe_factor x reads_f / rows_f, over s's distinct documents

times in the run: its text's repeats. Past MAX_REPEATS a warning names the alternatives.
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import h5py
import numpy as np

from wiki2bert_core.errors import DataError
from wiki2bert_core.hdf5_format import INPUT_MASK
from wiki2bert_core.variant_dir import read_params
from wiki2bert_core.wordpiece import read_vocab
from pretrain.config import TrainConfig
from pretrain.data.loader import open_data
from pretrain.schedules import PhaseSchedules

MAX_REPEATS = 4  # Muennighoff et al. 2023 ("Scaling Data-Constrained Language Models"): up to ~4 epochs cost little
DOCS_SUFFIX = ".docs.jsonl"
ROWS_PER_READ = 1 << 16  # input-mask rows summed at a time


@dataclasses.dataclass(frozen=True)
class LanguagePlan:
    language: str  # "-" for data of one language
    instances: int  # training rows of its files
    tokens: int  # real tokens of those rows, each once
    drawn: float  # sequences the run draws from its files
    tokens_drawn: float
    repeats: float  # drawn / instances: times each instance is read


@dataclasses.dataclass(frozen=True)
class SourcePlan:
    language: str
    source: str
    documents: int  # distinct documents in the language's training shards
    lines: int  # document lines, the copies included
    repeats: float  # times a document's text is seen in the run, on average over the source (the module's formula)


@dataclasses.dataclass(frozen=True)
class DataPlan:
    phase: str
    steps: int
    global_batch: int | list | dict  # the setting: a number or a schedule
    drawn: int  # sequences the run draws
    seq_len: int
    dupe_factor: int | None  # None: no variant.json (NVIDIA's directory)
    languages: list[LanguagePlan]
    sources: list[SourcePlan]  # empty when the shard stage's records are not beside the variant
    shard_dir: Path | None


def data_plan(phase: str, data_dir: Path, config: TrainConfig) -> DataPlan:
    """The plan of a phase of `config` on the training files of `data_dir`."""
    data_dir = Path(data_dir)
    vocab = read_vocab(data_dir / "vocab.txt") if (data_dir / "vocab.txt").is_file() else None
    data = open_data(data_dir, config.seq_len, len(vocab) if vocab else 2 ** 31 - 1, 1, config.language_alpha,
                     config.language_weights)
    schedules = PhaseSchedules.of(config)
    firsts = [schedules.first_step_at(progress) for progress, _, _ in data.mixtures] + [config.steps + 1]
    reads = [0.0] * len(data.files)  # rows read from each file over the run
    for (_, epoch_rows, _), first, after in zip(data.mixtures, firsts, firsts[1:]):
        epoch_rows = epoch_rows or tuple(f.samples for f in data.files)
        drawn = schedules.sequences(first, after - 1) if after > first else 0
        reads = [read + drawn * rows / sum(epoch_rows) for read, rows in zip(reads, epoch_rows)]
    by_language: dict[str, list[tuple[int, float, int]]] = {}
    for f, read in zip(data.files, reads):
        by_language.setdefault(f.language or "-", []).append((f.samples, read, _real_tokens(f.path)))
    languages = [LanguagePlan(language, sum(n for n, _, _ in files), sum(t for _, _, t in files),
                              sum(r for _, r, _ in files), sum(r * t / n for n, r, t in files),
                              sum(r for _, r, _ in files) / sum(n for n, _, _ in files))
                 for language, files in by_language.items()]
    params = read_params(data_dir)
    dupe_factor = params.dupe_factor if params else None
    shard_dir = data_dir.resolve().parents[1] / "shard" if len(data_dir.resolve().parents) > 1 else None
    sources: list[SourcePlan] = []
    if dupe_factor and shard_dir is not None and all(_docs_file(shard_dir, f.path).is_file() for f in data.files):
        sources = _source_plans(data, reads, dupe_factor, shard_dir)
    else:
        shard_dir = None
    return DataPlan(phase, config.steps, config.global_batch, schedules.sequences(1, config.steps), data.seq_len,
                    dupe_factor, languages, sources, shard_dir)


def _docs_file(shard_dir: Path, hdf5_file: Path) -> Path:
    return shard_dir / (hdf5_file.name.split(".")[0] + DOCS_SUFFIX)


def _real_tokens(path: Path) -> int:
    """The real (not padding) tokens of an HDF5 file's rows."""
    with h5py.File(path, "r") as f:
        masks = f[INPUT_MASK]
        return sum(int(np.count_nonzero(masks[i:i + ROWS_PER_READ])) for i in range(0, masks.shape[0], ROWS_PER_READ))


def _source_plans(data, reads: list[float], dupe_factor: int, shard_dir: Path) -> list[SourcePlan]:
    lines: Counter = Counter()  # (language, source) -> document lines
    documents: Counter = Counter()  # (language, source) -> distinct documents
    seen: Counter = Counter()  # (language, source) -> sum of lines x dupe_factor x reads / rows over the files
    for f, read in zip(data.files, reads):
        language = f.language or "-"
        path = _docs_file(shard_dir, f.path)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                record = json.loads(line)
                key = (language, str(record["source"]))
            except (ValueError, KeyError, TypeError):
                raise DataError(f"{path}: line {number} is not a document record (JSON with a source)") from None
            lines[key] += 1
            documents[key] += "copy" not in record
            seen[key] += dupe_factor * read / f.samples
    return [SourcePlan(*key, documents[key], lines[key], seen[key] / max(1, documents[key])) for key in sorted(lines)]


def format_plan(plan: DataPlan) -> list[str]:
    """The plan as lines: the draws, a table per language, one per source (when the shards' records are there), and
    a warning for each language or source repeated more than MAX_REPEATS times."""
    batch = (f"{plan.global_batch:,} sequences" if isinstance(plan.global_batch, int) else
             f"global_batch {json.dumps(plan.global_batch)}")
    out = [f"{plan.phase}: {plan.steps:,} steps x {batch} = {plan.drawn:,} sequences of {plan.seq_len} tokens drawn"]
    out.append(f"{'language':<10} {'instances':>12} {'tokens':>15} {'drawn':>15} {'tokens drawn':>16} "
               f"{'repeats':>9}")
    for p in plan.languages:
        out.append(f"{p.language:<10} {p.instances:>12,} {p.tokens:>15,} {round(p.drawn):>15,} "
                   f"{round(p.tokens_drawn):>16,} {p.repeats:>9.2f}")
    if plan.sources:
        out.append(f"per source (documents of {plan.shard_dir}; the text of each is in dupe_factor {plan.dupe_factor} "
                   f"instance sets):")
        out.append(f"{'language':<10} {'source':<16} {'documents':>12} {'with copies':>12} {'text repeats':>13}")
        for s in plan.sources:
            out.append(f"{s.language:<10} {s.source:<16} {s.documents:>12,} {s.lines:>12,} {s.repeats:>13.2f}")
    else:
        out.append("per source: no shard stage records beside the variant (<workdir>/<lang>/shard/*.docs.jsonl)")
    over = [(p.language, "its instances are read", p.repeats) for p in plan.languages if p.repeats > MAX_REPEATS]
    over += [(f"{s.language} {s.source}", "its text is seen", s.repeats) for s in plan.sources
             if s.repeats > MAX_REPEATS]
    for what, seen, repeats in over:
        out.append(f"warning: {what}: {seen} {repeats:.1f} times, more than {MAX_REPEATS} (past which repeated data "
                   f"helps much less than new data)")
    if over:
        out.append("alternatives: more text, or repeat the best rather than all alike (rehydration: the pipeline's "
                   "shard.rehydrate repeats documents by their cluster size), related languages in the mixture, a "
                   "language_alpha or language_weights that give the repeated language a smaller share, a lower "
                   "dupe_factor with dynamic masking, or fewer steps")
    return out
