"""Micro-batches as the loader reads them from NVIDIA's HDF5 files, made up for the model tests."""
from __future__ import annotations

import torch


def nvidia_rows(lengths: list[int], length: int, predictions: int, vocab: int, seed: int = 0) -> dict:
    """Rows as NVIDIA's HDF5 files hold them: [CLS] A [SEP] B [SEP], then padding; masked positions inside."""
    g = torch.Generator().manual_seed(seed)
    k = len(lengths)
    batch = {key: torch.zeros(k, length, dtype=torch.long) for key in ("input_ids", "token_type_ids",
                                                                       "attention_mask")}
    batch["masked_lm_positions"] = torch.zeros(k, predictions, dtype=torch.long)
    batch["masked_lm_ids"] = torch.zeros(k, predictions, dtype=torch.long)
    for i, n in enumerate(lengths):
        batch["input_ids"][i, :n] = torch.randint(5, vocab, (n,), generator=g)
        batch["input_ids"][i, 0] = 2  # [CLS]
        batch["token_type_ids"][i, n // 2:n] = 1
        batch["attention_mask"][i, :n] = 1
        chosen = torch.randperm(n - 1, generator=g)[:min(predictions, max(1, (n - 1) // 3))] + 1
        batch["masked_lm_positions"][i, :len(chosen)] = chosen.sort().values
        batch["masked_lm_ids"][i, :len(chosen)] = torch.randint(5, vocab, (len(chosen),), generator=g)
    batch["next_sentence_labels"] = torch.randint(0, 2, (k,), generator=g)
    return batch
