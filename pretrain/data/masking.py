"""Dynamic masking (RoBERTa's): the masks stored in NVIDIA-layout rows undone and new ones drawn every time a
sequence is read, by the one masking of wiki2bert_core/masking.py (the hdf5 stage's too).

The draws of a sequence are a pure function of (seed, epoch, its index among all the training rows): they do not
depend on the rank or loader worker that reads it, nor on the other sequences of its micro-batch, so a resumed run
draws exactly what the uninterrupted one did, on any number of ranks and workers.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from wiki2bert_core.masking import Masking, original_tokens
from pretrain.schedules import PhaseSchedules

# a fourth, non-zero word in each sequence's seed: numpy's SeedSequence reads [a, b, c] as [a, b, c, 0], which is
# data.BatchPlan's row-order stream [seed, epoch, file]
_STREAM = 1


class SequenceDraws:
    """The masks' draws (wiki2bert_core/masking.py's MaskDraws) of n sequences of `width` positions, each from its
    own stream seeded by (seed, epoch, index): 3 x width uniforms a sequence, the keys of its positions, then the
    [MASK]/random/kept draws and the random tokens' draws, read at the selected positions."""

    def __init__(self, seed: int, epochs: np.ndarray, indices: np.ndarray, width: int):
        self.uniforms = np.empty((3, len(indices), width))
        for k, (epoch, index) in enumerate(zip(epochs.tolist(), indices.tolist())):
            self.uniforms[:, k] = np.random.default_rng([seed, epoch, index, _STREAM]).random((3, width))

    def keys(self, shape: tuple[int, int]) -> np.ndarray:
        return self.uniforms[0]

    def choices(self, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.uniforms[1].reshape(-1)[selected], self.uniforms[2].reshape(-1)[selected]


@dataclasses.dataclass(frozen=True)
class DynamicMasking(Masking):
    """A run's masking (TrainConfig's mask_rate, mask_replace, mask_random, max_predictions, whole_word_masking)
    and its seed; called by the reader on each micro-batch. `schedules`: where the phase schedules mask_rate,
    mask_replace or mask_random, their values at the micro-batch's step (`at`)."""
    seed: int
    schedules: PhaseSchedules | None = dataclasses.field(default=None, kw_only=True)

    def at(self, step: int) -> DynamicMasking:
        """The masking of a micro-batch of optimizer step `step` (1-based)."""
        if self.schedules is None:
            return self
        return dataclasses.replace(self, rate=self.schedules.value("mask_rate", step),
                                   mask_share=self.schedules.value("mask_replace", step),
                                   random_share=self.schedules.value("mask_random", step))

    def __call__(self, batch: dict[str, torch.Tensor], epochs: np.ndarray, indices: np.ndarray
                 ) -> dict[str, torch.Tensor]:
        """`batch` (BatchReader.read's int64 tensors) with new masks: input_ids, masked_lm_positions and
        masked_lm_ids replaced; row k's are drawn for the sequence of index `indices[k]` read in epoch `epochs[k]`."""
        tokens = original_tokens(*(batch[k].numpy() for k in ("input_ids", "masked_lm_positions", "masked_lm_ids")))
        draws = SequenceDraws(self.seed, epochs, indices, tokens.shape[1])
        masked = self.apply(tokens, batch["attention_mask"].numpy() != 0, draws)
        return {**batch, **{k: torch.from_numpy(v) for k, v in
                            zip(("input_ids", "masked_lm_positions", "masked_lm_ids"), masked)}}
