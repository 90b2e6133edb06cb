"""BERT's masked-LM selection, the one implementation: which tokens of a sequence are predicted and what they become.

The hdf5 stage (static masks, written into the files: pipeline/stages/hdf5/instances.py) and the pretraining loader
(dynamic masks, drawn as sequences are read: pretrain/data/masking.py) both call `Masking.apply`. Each passes its own
random draws (`MaskDraws`: the stage one stream per file, the loader one stream per (seed, epoch, sequence)), so the
same draws give the same masks on both sides.

- How many: a sequence of `length` real tokens (its [CLS] and [SEP]s counted, as Google's create_pretraining_data.py
  counts) gets min(max_predictions, max(1, round(rate * length))) positions to predict.
- Which: never [CLS], [SEP] or [PAD] (the tokens playing those roles: `<s>`, `</s>`, `<pad>` in XLM-R's). Single
  tokens: the candidates with the smallest keys (one uniform per position), a uniformly random set. Whole words (a
  piece and the `##` pieces after it; for a Unigram or byte-level BPE vocabulary, a piece starting with its word-start
  marker, `▁` or `Ġ`, and the pieces after it without one; a continuation piece right after [CLS] or [SEP] starts a
  word): words in random order (one key per word), each taken whole if it still fits (one that would
  overflow is skipped, a shorter later one may still fit), as Google's whole-word masking does.
- What: each position to predict becomes [MASK] 80% of the time, a random token of the replacement pool 10%, and
  keeps its token 10% (pretraining's mask_replace and mask_random may set other shares).
- Packed: masked_lm_positions ascending, masked_lm_ids the original tokens there, both zero-padded to max_predictions
  (NVIDIA's layout: wiki2bert_core/hdf5_format.py).

The replacement pool is the vocabulary without its special tokens, its added tokens (those of its tokenizer.json)
and its `[unusedN]` placeholders; docs/pipeline.md
("Masking") says why, and what Google's and NVIDIA's scripts do instead.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Protocol

import numpy as np

from wiki2bert_core.hdf5_format import used_positions
from wiki2bert_core.wordpiece import is_placeholder, special_token_ids

MASK_SHARE, RANDOM_SHARE = 0.8, 0.1  # of the positions to predict; the rest keep their token


class MaskDraws(Protocol):
    """The uniforms in [0, 1) that masking consumes, from the caller's random streams, in this order."""

    def keys(self, shape: tuple[int, int]) -> np.ndarray:
        """[rows, width]: the order in which a row's candidates are taken, ascending. Single tokens: the key of
        position j is key j; whole words: the key of the row's word j (its j-th word) is key j. May be overwritten."""

    def choices(self, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Two uniforms for each selected position, given as flat indices (row * width + position), ascending: the
        one that says [MASK], random or kept, and the one that picks the random token."""


@dataclasses.dataclass(frozen=True)
class MaskingVocab:
    """What masking needs from the vocabulary: the special ids, the replacement pool, the `##` pieces."""
    cls_id: int
    sep_id: int
    pad_id: int
    mask_id: int
    # int32: every id but the special tokens', the added tokens' and the [unusedN] placeholders'
    replacement_ids: np.ndarray
    continues_word: np.ndarray  # bool [max id + 1]: the token continues a word (a `##` piece, or one without ▁/Ġ)

    @classmethod
    def from_vocab(cls, vocab: dict[str, int], special_ids: dict[str, int] | None = None, word_start: str = "",
                   added_ids=()) -> MaskingVocab:
        """`special_ids` by role (wordpiece.special_token_ids; default BERT's tokens), `word_start` the marker of a
        word's first piece ("": BERT's `##` continuations), `added_ids` the tokenizer's added tokens."""
        special_ids = special_ids or special_token_ids(vocab)
        excluded = set(special_ids.values()) | set(added_ids)
        continues_word = np.zeros(max(vocab.values()) + 1, dtype=bool)
        if word_start:
            continuing = [i for t, i in vocab.items() if not t.startswith(word_start) and i not in excluded]
        else:
            continuing = [i for t, i in vocab.items() if t.startswith("##")]
        continues_word[continuing] = True
        replacement = sorted(i for t, i in vocab.items() if i not in excluded and not is_placeholder(t))
        return cls(special_ids["[CLS]"], special_ids["[SEP]"], special_ids["[PAD]"], special_ids["[MASK]"],
                   np.array(replacement, dtype=np.int32), continues_word)


def predictions_needed(rate: float, length):
    """Positions to predict in a sequence of `length` tokens at `rate`, before the cap (numpy arrays too)."""
    return np.maximum(1, np.rint(rate * np.asarray(length))).astype(np.int64)


def default_max_predictions(rate: float, seq_len: int) -> int:
    """The cap that follows the rate: ceil(rate * seq_len), NVIDIA's 20 at 128 and 0.15 (the 1e-9: 0.15 * 100 is
    15.000000000000002 in floating point)."""
    return math.ceil(rate * seq_len - 1e-9)


def original_tokens(input_ids: np.ndarray, masked_lm_positions: np.ndarray, masked_lm_ids: np.ndarray) -> np.ndarray:
    """Rows' tokens before their stored masks: input_ids with masked_lm_ids put back at masked_lm_positions (slots of
    position 0 are padding; an id 0 in a used slot is a token, e.g. a SentencePiece model's <unk>)."""
    tokens = input_ids.copy()
    used = used_positions(masked_lm_positions)
    rows = np.broadcast_to(np.arange(len(tokens))[:, None], used.shape)
    tokens[rows[used], masked_lm_positions[used]] = masked_lm_ids[used]
    return tokens


@dataclasses.dataclass(frozen=True)
class Masking:
    """The masking settings: the pipeline's hdf5.masked_lm_prob, a variant's max_predictions_per_seq and
    hdf5.whole_word_masking; pretraining's mask_rate, max_predictions and whole_word_masking."""
    vocab: MaskingVocab
    rate: float
    max_predictions: int  # the width of masked_lm_positions
    whole_word: bool
    mask_share: float = dataclasses.field(default=MASK_SHARE, kw_only=True)  # of the positions to predict: [MASK]
    random_share: float = dataclasses.field(default=RANDOM_SHARE, kw_only=True)  # a random token; the rest keep theirs

    def apply(self, tokens: np.ndarray, in_sequence: np.ndarray, draws: MaskDraws
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Masks `tokens` [rows, width] (the original ids; masked in place) whose real tokens are `in_sequence`;
        returns (input_ids, masked_lm_positions, masked_lm_ids), all of tokens' dtype."""
        n, width = tokens.shape
        candidates = in_sequence & (tokens != self.vocab.cls_id)
        candidates &= tokens != self.vocab.sep_id
        candidates &= tokens != self.vocab.pad_id
        to_predict = np.minimum(self.max_predictions, predictions_needed(self.rate, np.count_nonzero(in_sequence, 1)))
        keys = draws.keys((n, width))
        if self.whole_word:
            selected = _whole_words(candidates, self.vocab.continues_word[tokens], keys, to_predict)
        else:
            selected = _tokens(candidates, keys, to_predict, self.max_predictions)
        flat = np.flatnonzero(selected)  # row-major: each row's positions ascending
        rows, positions = np.divmod(flat, width)
        flat_tokens = tokens.reshape(-1)
        labels = flat_tokens[flat]
        split, pick = draws.choices(flat)
        pool = self.vocab.replacement_ids
        replacement = pool[np.minimum((pick * len(pool)).astype(np.int64), len(pool) - 1)]
        flat_tokens[flat] = np.where(split < self.mask_share, self.vocab.mask_id,
                                     np.where(split < self.mask_share + self.random_share, replacement, labels))
        counts = np.bincount(rows, minlength=n)
        slots = np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)
        masked_positions = np.zeros((n, self.max_predictions), dtype=tokens.dtype)
        masked_ids = np.zeros((n, self.max_predictions), dtype=tokens.dtype)
        masked_positions[rows, slots] = positions
        masked_ids[rows, slots] = labels
        return tokens, masked_positions, masked_ids


def _tokens(candidates: np.ndarray, keys: np.ndarray, to_predict: np.ndarray, max_predictions: int) -> np.ndarray:
    """The min(to_predict[i], candidates) candidates of row i with the smallest keys: a uniformly random set, found
    by a per-row threshold (a partition of the `max_predictions` smallest keys, not a sort of the row)."""
    n, width = candidates.shape
    keys[~candidates] = 2.0
    top = min(max_predictions, width)
    smallest = np.partition(keys, top - 1, axis=1)[:, :top] if top < width else keys.copy()
    smallest.sort(axis=1)
    take = np.minimum(to_predict, np.count_nonzero(candidates, 1))
    threshold = np.where(take > 0, smallest[np.arange(n), np.maximum(take - 1, 0)], -1.0)
    selected = keys <= threshold[:, None]
    # equal keys at the threshold (with the hdf5 stage's float32 keys ~5e-6 of rows at seq 128, ~3e-5 at 512): then
    # the first `take` of a stable sort of the row's keys, the earlier position first
    tied = np.flatnonzero(np.count_nonzero(selected, 1) != take)
    if len(tied):
        order = np.argsort(keys[tied], axis=1, kind="stable")
        redone = np.zeros((len(tied), width), dtype=bool)
        np.put_along_axis(redone, order, np.arange(width)[None, :] < take[tied, None], axis=1)
        selected[tied] = redone
    return selected


def _whole_words(candidates: np.ndarray, continues_word: np.ndarray, keys: np.ndarray,
                 to_predict: np.ndarray) -> np.ndarray:
    """The words of each row in the order of their keys (word j: key j), each taken whole if it still fits in
    to_predict[i]. A word is a candidate that is not a `##` piece or follows a non-candidate, and the `##` pieces
    after it. Indexing is flat: numpy's 2-D fancy indexing is several times slower."""
    n, width = candidates.shape
    starts = candidates & ~continues_word
    starts[:, 1:] |= candidates[:, 1:] & ~candidates[:, :-1]
    starts[:, 0] |= candidates[:, 0]
    word = np.cumsum(starts, axis=1)
    word -= 1
    word[~candidates] = width  # a dummy word past the row's last one
    row_offset = (np.arange(n) * (width + 1))[:, None]
    flat_word = (word + row_offset).ravel()  # each position's word among all rows' (width + 1) words
    lengths = np.bincount(flat_word, minlength=n * (width + 1))  # of each word
    keys[lengths.reshape(n, width + 1)[:, :width] == 0] = 2.0  # after the row's last word
    flat_order = (np.argsort(keys, axis=1) + row_offset).ravel()  # the row's words by key
    sorted_lengths = lengths[flat_order].reshape(n, width)
    filled = np.zeros(n, dtype=np.int64)
    taken_sorted = np.zeros((n, width), dtype=bool)
    for column in range(int(np.count_nonzero(starts, 1).max(initial=0))):
        if (filled == to_predict).all():  # nothing fits any more (most rows are full after a few words)
            break
        fits = (sorted_lengths[:, column] > 0) & (filled + sorted_lengths[:, column] <= to_predict)
        filled += np.where(fits, sorted_lengths[:, column], 0)
        taken_sorted[:, column] = fits
    taken = np.zeros(n * (width + 1), dtype=bool)
    taken[flat_order[taken_sorted.ravel()]] = True
    return taken[flat_word].reshape(n, width)
