"""Dynamic masking (RoBERTa's): the masks stored in NVIDIA-layout rows undone and new ones drawn every time a
sequence is read, BERT's way.

A sequence of `length` tokens (its [CLS] and [SEP]s included, as Google's create_pretraining_data counts) gets
min(max_predictions, max(1, round(rate * length))) positions to predict, never [CLS], [SEP] or [PAD]; each is
replaced by [MASK] 80% of the time, by a random token of the non-special vocabulary 10%, and kept 10%. With whole-word
masking, a word (a piece and the `##` pieces after it) is masked whole or not at all: words are taken in random
order while they still fit, as Google's whole-word masking does.

The draws of a sequence are a pure function of (seed, epoch, its index among all the training rows): they do not
depend on the rank or loader worker that reads it, nor on the other sequences of its micro-batch, so a resumed run
draws exactly what the uninterrupted one did, on any number of ranks and workers.
"""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import torch

from wiki2bert_core.hdf5_format import used_positions
from wiki2bert_core.wordpiece import SPECIAL_TOKENS

MASK_SHARE, RANDOM_SHARE = 0.8, 0.1  # of the positions to predict; the rest keep their token
_PLACEHOLDER = re.compile(r"\[unused\d+\]")
# a fourth, non-zero word in each sequence's seed: numpy's SeedSequence reads [a, b, c] as [a, b, c, 0], which is
# data.BatchPlan's row-order stream [seed, epoch, file]
_STREAM = 1


def predictions_needed(rate: float, length):
    """Positions to predict in a sequence of `length` tokens at `rate`, before the cap (numpy arrays too)."""
    return np.maximum(1, np.rint(rate * np.asarray(length))).astype(np.int64)


def default_max_predictions(rate: float, seq_len: int) -> int:
    """The cap that follows the rate: ceil(rate * seq_len), NVIDIA's 20 at 128 and 0.15 (the 1e-9: 0.15 * 100 is
    15.000000000000002 in floating point)."""
    return math.ceil(rate * seq_len - 1e-9)


def original_tokens(input_ids: np.ndarray, masked_lm_positions: np.ndarray, masked_lm_ids: np.ndarray) -> np.ndarray:
    """The rows' tokens before their stored masks: input_ids with masked_lm_ids put back at masked_lm_positions
    (slots of position 0 or id 0 are padding)."""
    tokens = input_ids.copy()
    used = used_positions(masked_lm_positions) & (masked_lm_ids != 0)
    rows = np.broadcast_to(np.arange(len(tokens))[:, None], used.shape)
    tokens[rows[used], masked_lm_positions[used]] = masked_lm_ids[used]
    return tokens


@dataclasses.dataclass(frozen=True)
class MaskingVocab:
    """What masking needs from the vocabulary: the ids never masked, [MASK], the replacement tokens, `##` pieces."""
    never_masked: np.ndarray  # [CLS], [SEP], [PAD]
    mask_id: int
    replacement_ids: np.ndarray  # every token but [PAD], [UNK], [CLS], [SEP], [MASK] and the [unusedN] placeholders
    continues_word: np.ndarray  # bool [len(vocab)]: the token is a `##` piece

    @classmethod
    def from_vocab(cls, vocab: dict[str, int]) -> MaskingVocab:
        continues_word = np.zeros(len(vocab), dtype=bool)
        continues_word[[i for t, i in vocab.items() if t.startswith("##")]] = True
        replacement = sorted(i for t, i in vocab.items() if t not in SPECIAL_TOKENS and not _PLACEHOLDER.fullmatch(t))
        return cls(np.array([vocab[t] for t in ("[CLS]", "[SEP]", "[PAD]")]), vocab["[MASK]"],
                   np.array(replacement, dtype=np.int64), continues_word)


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
    """The masking settings of a run (TrainConfig's masking, mask_rate, whole_word_masking, max_predictions, seed);
    called by the reader on each micro-batch."""
    vocab: MaskingVocab
    rate: float
    max_predictions: int  # the width of the batches' masked_lm_positions
    whole_word: bool
    seed: int

    def __call__(self, batch: dict[str, torch.Tensor], epochs: np.ndarray, indices: np.ndarray
                 ) -> dict[str, torch.Tensor]:
        """`batch` (BatchReader.read's int64 tensors) with new masks: input_ids, masked_lm_positions and
        masked_lm_ids replaced; row k's are drawn for the sequence of index `indices[k]` read in epoch `epochs[k]`."""
        tokens = original_tokens(*(batch[k].numpy() for k in ("input_ids", "masked_lm_positions", "masked_lm_ids")))
        n, width = tokens.shape
        real = batch["attention_mask"].numpy() != 0
        candidates = real & ~np.isin(tokens, self.vocab.never_masked)
        to_predict = np.minimum(self.max_predictions, predictions_needed(self.rate, real.sum(axis=1)))
        keys, split, pick = self.draws(epochs, indices, width)
        if self.whole_word:
            selected = _whole_words(candidates, self.vocab.continues_word[tokens], keys, to_predict)
        else:
            selected = _tokens(candidates, keys, to_predict)
        rows, positions = np.nonzero(selected)  # row-major: each row's positions ascending
        labels = tokens[rows, positions]
        replacement = self.vocab.replacement_ids[(pick[rows, positions] * len(self.vocab.replacement_ids)).astype(int)]
        u = split[rows, positions]
        masked = tokens.copy()
        masked[rows, positions] = np.where(u < MASK_SHARE, self.vocab.mask_id,
                                           np.where(u < MASK_SHARE + RANDOM_SHARE, replacement, labels))
        counts = np.bincount(rows, minlength=n)
        slots = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        masked_positions = np.zeros((n, self.max_predictions), dtype=np.int64)
        masked_ids = np.zeros((n, self.max_predictions), dtype=np.int64)
        masked_positions[rows, slots] = positions
        masked_ids[rows, slots] = labels
        return {**batch, "input_ids": torch.from_numpy(masked),
                "masked_lm_positions": torch.from_numpy(masked_positions), "masked_lm_ids": torch.from_numpy(masked_ids)}

    def draws(self, epochs: np.ndarray, indices: np.ndarray, width: int) -> np.ndarray:
        """[3, n, width] uniforms in [0, 1): each sequence's own stream, seeded by (seed, epoch, index): the keys
        that order its positions (or words), the [MASK]/random/kept draws, the random tokens."""
        draws = np.empty((3, len(indices), width))
        for k, (epoch, index) in enumerate(zip(epochs.tolist(), indices.tolist())):
            draws[:, k] = np.random.default_rng([self.seed, epoch, index, _STREAM]).random((3, width))
        return draws


def _tokens(candidates: np.ndarray, keys: np.ndarray, to_predict: np.ndarray) -> np.ndarray:
    """The to_predict[i] candidates of row i with the smallest keys: a uniformly random set."""
    order = np.argsort(np.where(candidates, keys, np.inf), axis=1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(order.shape[1])[None, :], axis=1)
    return candidates & (rank < to_predict[:, None])


def _whole_words(candidates: np.ndarray, continues_word: np.ndarray, keys: np.ndarray,
                 to_predict: np.ndarray) -> np.ndarray:
    """Google's whole-word masking: the words of each row in the order of their first piece's key, each taken whole
    if it still fits in to_predict[i] (one that would overflow is skipped; a shorter later one may fit). A word is a
    candidate that is not a `##` piece, or follows a non-candidate ([CLS], [SEP]), and the `##` pieces after it."""
    n, width = candidates.shape
    after_candidate = np.zeros_like(candidates)
    after_candidate[:, 1:] = candidates[:, :-1]
    starts = candidates & (~continues_word | ~after_candidate)
    word = np.maximum(np.cumsum(starts, axis=1) - 1, 0)  # each position's word (read on candidates only)
    rows = np.broadcast_to(np.arange(n)[:, None], (n, width))
    lengths = np.bincount((rows * width + word)[candidates], minlength=n * width).reshape(n, width)
    word_keys = np.full((n, width), np.inf)
    word_keys[rows[starts], word[starts]] = keys[starts]
    order = np.argsort(word_keys, axis=1)
    sorted_lengths = np.take_along_axis(lengths, order, axis=1)
    filled = np.zeros(n, dtype=np.int64)
    taken_sorted = np.zeros((n, width), dtype=bool)
    for column in range(int(starts.sum(axis=1).max(initial=0))):
        if (filled == to_predict).all():  # nothing fits any more (most rows are full after a few more words)
            break
        fits = (sorted_lengths[:, column] > 0) & (filled + sorted_lengths[:, column] <= to_predict)
        filled += np.where(fits, sorted_lengths[:, column], 0)
        taken_sorted[:, column] = fits
    taken = np.zeros((n, width), dtype=bool)
    np.put_along_axis(taken, order, taken_sorted, axis=1)
    return candidates & np.take_along_axis(taken, word, axis=1)
