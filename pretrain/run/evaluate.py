"""Held-out evaluation: masked-LM and NSP accuracy and loss of a model on the first `samples` instances of the held-out
files (variant_dir.held_out_files; always the same ones), each rank a part, the sums all-reduced.

The figures are MLPerf's: MLM accuracy over all masked positions, MLM loss per masked position, NSP accuracy and
loss per instance (none for a model without the NSP head, trained MLM-only). Beside them, the baselines of the same
instances: the share of the most frequent masked token (the MLM accuracy of a model that always answers it, and which
token it is) and the majority NSP label's share. On the test split of a variant of several languages (its files named
by language, variant_dir.file_language), each language's first samples / languages instances are evaluated, and
each language gets its own MLM figures and baseline beside the overall ones (`eval_mlm_accuracy_hu`: PER_LANGUAGE).
Evaluation runs the padded layout under `torch.no_grad()` in eval
mode (no dropout) and inside `torch.random.fork_rng`, so the training's random streams continue as if it had not run.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from wiki2bert_core.hdf5_format import used_positions
from wiki2bert_core.masking import default_max_predictions
from wiki2bert_core.variant_dir import file_language
from pretrain.data.loader import BatchReader, open_files
from pretrain.data.masking import DynamicMasking
from pretrain.run.signals import StopSignal

EVAL_KEYS = ("eval_mlm_accuracy", "eval_mlm_loss", "eval_nsp_accuracy", "eval_nsp_loss",
             "eval_mlm_unigram_baseline", "eval_mlm_unigram_token", "eval_nsp_majority_baseline")
NSP_KEYS = ("eval_nsp_accuracy", "eval_nsp_loss", "eval_nsp_majority_baseline")  # none for a model without NSP head
# the figures each language of a held-out set of several languages gets, as `<key>_<language>`
PER_LANGUAGE = ("eval_mlm_accuracy", "eval_mlm_loss", "eval_mlm_unigram_baseline")
# sums of one evaluation, in this order
_SUMS = ("mlm_loss", "mlm_correct", "mlm_count", "nsp_loss", "nsp_correct", "nsp_count")
LANGUAGE = "language"  # the column of each instance's language (its index in HeldOut.languages)


@dataclasses.dataclass
class HeldOut:
    """This rank's part of the first `samples` instances of `files` (in file-name order; several languages: each
    language's first samples / languages), as int64 tensors under the model's argument names, and LANGUAGE."""
    columns: dict[str, torch.Tensor]
    total: int  # instances over all ranks
    largest_part: int  # the most instances a rank holds (every rank steps through as many batches)
    languages: list[str] = dataclasses.field(default_factory=list)  # several languages: theirs; else none

    @classmethod
    def read(cls, files: list[Path], samples: int, vocab_size: int, max_positions: int, rank: int = 0,
             world_size: int = 1, masking: DynamicMasking | None = None) -> HeldOut:
        """Read through the training's reader, with its checks: DataError naming the file if one is not in NVIDIA's
        layout or holds a value a model of `vocab_size` tokens cannot take, ConfigError if its sequences are longer
        than the model's `max_positions` (max_position_embeddings). `masking` (eval_mask_rate): the files' masks
        replaced by its draws for each instance (epoch 0, the instance's number among the `samples`), capped as its
        rate needs at the files' sequence length; None: the files' masks."""
        data = open_files(files, None, vocab_size)
        data.check_positions(max_positions)
        languages = sorted({file.language for file in data.files} - {None})
        left = {language: samples // len(languages) + (i < samples % len(languages))
                for i, language in enumerate(languages)} if languages else {None: samples}
        parts, total = [], 0  # (file index, its first instance among all, instances, language index)
        for index, file in enumerate(data.files):
            rows = min(file.samples, left[file.language])
            if rows:
                parts.append((index, total, rows, languages.index(file.language) if languages else 0))
                left[file.language] -= rows
                total += rows
        start, stop = rank * total // world_size, (rank + 1) * total // world_size
        pieces = [(index, np.arange(max(start, first) - first, min(stop, first + rows) - first), language)
                  for index, first, rows, language in parts if first < stop and start < first + rows] \
            or [(0, np.arange(0), 0)]
        columns = BatchReader(data, vocab_size).read([(index, rows) for index, rows, _ in pieces], whole_files=False)
        if masking is not None:
            masking = dataclasses.replace(masking, max_predictions=default_max_predictions(masking.rate, data.seq_len))
            columns = masking(columns, np.zeros(stop - start, dtype=np.int64), np.arange(start, stop))
        columns[LANGUAGE] = torch.from_numpy(np.concatenate([np.full(len(rows), language, dtype=np.int64)
                                                             for _, rows, language in pieces]))
        return cls(columns, total, -(-total // world_size), languages)

    def batches(self, batch_size: int):
        """This rank's instances in batches of `batch_size`, as many batches on every rank (those of the largest
        part): None once this rank's part is used up."""
        for start in range(0, self.largest_part, batch_size):
            batch = {k: v[start:start + batch_size] for k, v in self.columns.items()}
            yield batch if len(batch["input_ids"]) else None

    def target_counts(self, vocab_size: int) -> torch.Tensor:
        """This rank's count of each masked token id (the first `vocab_size` entries) and of each NSP label (the
        last two), float64, a row per language (one row for one language)."""
        rows = []
        for language in range(max(1, len(self.languages))):
            mine = self.columns[LANGUAGE] == language
            used = used_positions(self.columns["masked_lm_positions"][mine])
            rows.append(torch.cat([torch.bincount(self.columns["masked_lm_ids"][mine][used], minlength=vocab_size),
                                   torch.bincount(self.columns["next_sentence_labels"][mine].view(-1), minlength=2)]))
        return torch.stack(rows).double()


def evaluate(model: torch.nn.Module, held_out: HeldOut, batch_size: int, vocab_size: int,
             autocast_dtype=None, stop: StopSignal | None = None) -> dict[str, float | int] | None:
    """The EVAL_KEYS figures of `model` on `held_out` (and its baselines; without NSP_KEYS for a model without the
    NSP head), over the first `vocab_size` tokens (the tokenizer's; the model's rows beyond them pad its vocabulary
    to a multiple of 8 and are left out, as the export leaves them out), summed over all ranks when
    torch.distributed is initialized (every rank must call it).

    None when `stop` is agreed before one of the batches (every rank checks before each, as many times): the
    evaluation is abandoned on all ranks together, before the sums' all-reduce, and leaves no trace."""
    device = next(model.parameters()).device
    counts = held_out.target_counts(vocab_size).to(device)
    sums = torch.zeros(len(counts), len(_SUMS), dtype=torch.float64, device=device)  # a row per language
    was_training = model.training
    model.eval()
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad(), \
                torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            for batch in held_out.batches(batch_size):
                if stop is not None and stop.agreed():
                    return None
                if batch is not None:
                    batch = {k: v.to(device) for k, v in batch.items()}
                    sums.index_add_(0, batch[LANGUAGE], _row_sums(model, batch, vocab_size))
    finally:
        model.train(was_training)
    both = torch.cat([sums, counts], dim=1)
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(both)
    figures = _figures(both.sum(0))
    for language, row in zip(held_out.languages, both):
        figures |= {f"{key}_{language}": value for key, value in _figures(row).items() if key in PER_LANGUAGE}
    return figures if model.nsp_head else {k: v for k, v in figures.items() if k not in NSP_KEYS}


def _figures(sums: torch.Tensor) -> dict[str, float | int]:
    """The EVAL_KEYS figures of a row of sums: _SUMS, then the counts of each masked token id and NSP label."""
    s = dict(zip(_SUMS, sums[:len(_SUMS)].tolist()))
    token_counts, label_counts = sums[len(_SUMS):-2], sums[-2:]
    return {"eval_mlm_accuracy": s["mlm_correct"] / max(1.0, s["mlm_count"]),
               "eval_mlm_loss": s["mlm_loss"] / max(1.0, s["mlm_count"]),
               "eval_nsp_accuracy": s["nsp_correct"] / max(1.0, s["nsp_count"]),
               "eval_nsp_loss": s["nsp_loss"] / max(1.0, s["nsp_count"]),
               "eval_mlm_unigram_baseline": token_counts.max().item() / max(1.0, s["mlm_count"]),
               "eval_mlm_unigram_token": int(token_counts.argmax()),
               "eval_nsp_majority_baseline": label_counts.max().item() / max(1.0, s["nsp_count"])}


def _row_sums(model: torch.nn.Module, batch: dict[str, torch.Tensor], vocab_size: int) -> torch.Tensor:
    """[instances, _SUMS] of a batch: each instance's sums."""
    mlm_logits, nsp_logits = model.logits(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                                          batch["masked_lm_positions"])
    mlm_logits = mlm_logits[..., :vocab_size].float()
    valid = used_positions(batch["masked_lm_positions"])
    labels = batch["masked_lm_ids"].masked_fill(~valid, -100)
    nsp_labels = batch["next_sentence_labels"].view(-1)
    losses = F.cross_entropy(mlm_logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="none")
    sums = [losses.view(valid.shape).sum(1), ((mlm_logits.argmax(-1) == labels) & valid).sum(1), valid.sum(1)]
    if nsp_logits is None:  # no NSP head: its sums stay 0
        sums += [torch.zeros(len(valid), device=valid.device)] * 3
    else:
        sums += [F.cross_entropy(nsp_logits.float(), nsp_labels, reduction="none"),
                 nsp_logits.argmax(-1) == nsp_labels, torch.ones(len(nsp_labels), device=nsp_labels.device)]
    return torch.stack([value.double() for value in sums], dim=1)


def format_figures(figures: dict[str, float | int], digits: int = 4, separator: str = " ") -> str:
    """`key value` pairs (the token id as an integer), one `separator` between them."""
    return separator.join(f"{key} {value}" if isinstance(value, int) else f"{key} {value:.{digits}f}"
                    for key, value in figures.items())
