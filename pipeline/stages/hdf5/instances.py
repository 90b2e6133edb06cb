"""BERT pretraining instances (masked LM + next sentence prediction) from tokenized documents, vectorised.

The algorithm is the one of Google's `create_pretraining_data.py`, in two steps:

1. `plan_instances` walks the documents once per `dupe_factor` round (a short Python loop per *chunk*, not
   per token) and records each instance as two token spans of the shard's flat id array: segment A
   (leading sentences of a chunk) and segment B (the rest of the chunk, or with probability 0.5 a run of
   sentences from a random other document, the unused sentences of the chunk being put back).
   `plan_doc_sentences` plans RoBERTa's DOC-SENTENCES instead (variants of sequence kind doc-sentences): one span
   of the most consecutive whole sentences of a document that fit, no segment B, NSP label 0, no short targets.
2. `make_instances` turns any batch of planned instances into NVIDIA's arrays with numpy: truncation of
   the longer segment at a random end, `[CLS] A [SEP] B [SEP]` (`[CLS] A [SEP]` without B), and masking of
   `min(max_predictions_per_seq, max(1, round(len * masked_lm_prob)))` tokens, each replaced by
   `[MASK]` 80%, kept 10%, a random vocabulary token 10%.

The arrays are NVIDIA's six datasets, as wiki2bert_core/hdf5_format.py defines them.

Planning first costs ~40 bytes per instance, so a whole shard's instances can be shuffled (as Google does)
and then built and written in small blocks: memory does not grow with shard size times `dupe_factor`.

Differences from Google's code (distributions are otherwise the same; the random streams are numpy's):
- random replacement tokens never are `[PAD]`/`[UNK]`/`[CLS]`/`[SEP]`/`[MASK]`, so a row's structure
  stays checkable (`pipeline verify`);
- with whole-word masking, a `##` piece at the start of segment B starts a word instead of joining the
  last word of segment A across `[SEP]`;
- a "random" segment B that comes from A's own document (10 draws all hit it: always so in a shard of one
  document) is labelled not-random, as NVIDIA's script does; Google's labels it random, a wrong label.
"""
from __future__ import annotations

import dataclasses
import itertools
from array import array
from bisect import bisect_left, bisect_right
from typing import Callable

import numpy as np

from wiki2bert_core.hdf5_format import (DTYPES, INPUT_IDS, INPUT_MASK, MASKED_LM_IDS, MASKED_LM_POSITIONS, NEXT_SENTENCE_LABELS,
                              SEGMENT_IDS)


@dataclasses.dataclass(frozen=True)
class TokenizedDocuments:
    """A shard's token ids as one flat array; sentence k is ids[sentence_starts[k]:sentence_starts[k + 1]],
    document d is sentences document_starts[d] .. document_starts[d + 1] - 1. No sentence or document is empty."""
    ids: np.ndarray  # [tokens], uint16 or int32
    sentence_starts: np.ndarray  # int64 [sentences + 1]
    document_starts: np.ndarray  # int64 [documents + 1]


class TokenRows:
    """Rows of `width` consecutive ids of a flat id array, starting anywhere in [-width, len(ids)] (0 outside the
    ids): a sliding-window view over `padded`, the ids with `width` zeros on each side (TokenFiles.read with
    margin=width reads a window's ids into such an array), made once for all the batches of instances drawn from
    them. Copying whole rows out of it is far faster than gathering each token."""

    def __init__(self, padded: np.ndarray, width: int):
        self.width = width
        self._windows = np.lib.stride_tricks.sliding_window_view(padded, width)

    def take(self, starts: np.ndarray) -> np.ndarray:
        """Row i: ids[starts[i]:starts[i] + width]."""
        return self._windows[starts + self.width]


@dataclasses.dataclass(frozen=True)
class InstancePlan:
    """Instance i is A = ids[a_start[i]:a_start[i] + a_len[i]] and B likewise, before truncation."""
    a_start: np.ndarray
    a_len: np.ndarray
    b_start: np.ndarray
    b_len: np.ndarray
    random_next: np.ndarray  # int8: 1 = B comes from another document
    short_targets: int  # (document, round) pairs that drew a short target length
    document_rounds: int
    paired: bool = True  # False: no segment B (b_len 0), `[CLS] A [SEP]` (plan_doc_sentences)

    def __len__(self) -> int:
        return len(self.a_start)

    def take(self, index: np.ndarray) -> InstancePlan:
        return InstancePlan(self.a_start[index], self.a_len[index], self.b_start[index], self.b_len[index],
                            self.random_next[index], self.short_targets, self.document_rounds, self.paired)


@dataclasses.dataclass(frozen=True)
class MaskingVocab:
    """What masking needs from the vocabulary: special ids, replacement candidates, `##` pieces."""
    cls_id: int
    sep_id: int
    mask_id: int
    replacement_ids: np.ndarray  # int32: every id except [PAD], [UNK], [CLS], [SEP], [MASK]
    is_subword: np.ndarray  # bool [vocab size]: the token starts with "##"

    @classmethod
    def from_vocab(cls, vocab: dict[str, int]) -> MaskingVocab:
        special = {vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
        size = max(vocab.values()) + 1
        is_subword = np.zeros(size, dtype=bool)
        is_subword[[i for t, i in vocab.items() if t.startswith("##")]] = True
        replacement = np.array(sorted(set(vocab.values()) - special), dtype=np.int32)
        return cls(vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"], replacement, is_subword)


def plan_instances(docs: TokenizedDocuments, max_seq_length: int, short_seq_prob: float, dupe_factor: int,
                   rng: np.random.Generator) -> InstancePlan:
    """Google's create_instances_from_document for every document and round, as token spans."""
    max_tokens = max_seq_length - 3
    starts = docs.sentence_starts.tolist()
    doc_starts = docs.document_starts.tolist()
    n_docs = len(doc_starts) - 1
    uniform = _uniforms(rng)
    a_start, a_len, b_start, b_len = array("q"), array("q"), array("q"), array("q")
    random_next = array("b")
    short_targets = 0
    for d in range(n_docs):
        first, end = doc_starts[d], doc_starts[d + 1]
        for _ in range(dupe_factor):
            target = max_tokens
            if uniform() < short_seq_prob:
                target = 2 + int(uniform() * (max_tokens - 1))  # randint(2, max_tokens)
                short_targets += 1
            c = first
            while c < end:
                # The chunk is sentences c..m-1: the fewest that reach `target` tokens, or the rest of the document.
                m = bisect_left(starts, starts[c] + target, c + 1, end)
                size = m - c
                a_end = c + 1 if size < 2 else c + 1 + int(uniform() * (size - 1))
                a_start.append(starts[c])
                a_len.append(starts[a_end] - starts[c])
                if size == 1 or uniform() < 0.5:
                    r = d
                    for _ in range(10):
                        r = int(uniform() * n_docs)
                        if r != d:
                            break
                    r_first, r_end = doc_starts[r], doc_starts[r + 1]
                    s = r_first + int(uniform() * (r_end - r_first))
                    b_target = target - (starts[a_end] - starts[c])
                    s_end = bisect_left(starts, starts[s] + b_target, s + 1, r_end)
                    b_start.append(starts[s])
                    b_len.append(starts[s_end] - starts[s])
                    random_next.append(0 if r == d else 1)
                    c = a_end  # the chunk's unused sentences are put back
                else:
                    b_start.append(starts[a_end])
                    b_len.append(starts[m] - starts[a_end])
                    random_next.append(0)
                    c = m
    return InstancePlan(np.frombuffer(a_start, np.int64), np.frombuffer(a_len, np.int64),
                        np.frombuffer(b_start, np.int64), np.frombuffer(b_len, np.int64),
                        np.frombuffer(random_next, np.int8), short_targets, n_docs * dupe_factor)


def plan_doc_sentences(docs: TokenizedDocuments, max_seq_length: int, dupe_factor: int) -> InstancePlan:
    """RoBERTa's DOC-SENTENCES for every document and round, as token spans: from the document's first sentence on,
    each instance is the most consecutive whole sentences that fit in max_seq_length - 2 tokens, and at least one (a
    longer sentence is truncated by make_instances). No short sequences are injected (RoBERTa injects none), so
    every round has the same spans; make_instances draws other masks for each."""
    max_tokens = max_seq_length - 2
    starts = docs.sentence_starts.tolist()
    doc_starts = docs.document_starts.tolist()
    span_start, span_end = array("q"), array("q")
    for d in range(len(doc_starts) - 1):
        c, end = doc_starts[d], doc_starts[d + 1]
        while c < end:
            # sentences c..m-1: the most whose tokens fit, at least one
            m = max(c + 1, bisect_right(starts, starts[c] + max_tokens, c + 1, end + 1) - 1)
            span_start.append(starts[c])
            span_end.append(starts[m])
            c = m
    a_start = np.tile(np.frombuffer(span_start, np.int64), dupe_factor)
    a_len = np.tile(np.frombuffer(span_end, np.int64), dupe_factor) - a_start
    zeros = np.zeros(len(a_start), np.int64)
    return InstancePlan(a_start, a_len, zeros, zeros, zeros.astype(np.int8), 0,
                        (len(doc_starts) - 1) * dupe_factor, paired=False)


def random_next_from_own_document(docs: TokenizedDocuments, plan: InstancePlan) -> int:
    """Instances labelled random next whose segment B starts in segment A's document (measured on the spans)."""
    document_token_starts = np.asarray(docs.sentence_starts)[np.asarray(docs.document_starts)]
    labelled = plan.random_next == 1
    a_doc = np.searchsorted(document_token_starts, plan.a_start[labelled], side="right")
    b_doc = np.searchsorted(document_token_starts, plan.b_start[labelled], side="right")
    return int(np.count_nonzero(a_doc == b_doc))


def make_instances(token_rows: TokenRows, plan: InstancePlan, max_predictions_per_seq: int, masked_lm_prob: float,
                   vocab: MaskingVocab, whole_word_masking: bool, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """NVIDIA's six arrays for the planned instances (of max_seq_length token_rows.width), in plan order."""
    n, width = len(plan), token_rows.width
    special = 3 if plan.paired else 2  # [CLS] A [SEP] B [SEP], or [CLS] A [SEP]
    a_start, a_len, b_start, b_len = _truncate(plan, width - special, rng)  # with B empty: A's own truncation
    rows, pos = np.arange(n), np.arange(width, dtype=np.int32)[None, :]
    length = (a_len + b_len + special).astype(np.int32)
    sep = a_len.astype(np.int32)[:, None] + 1  # position of the first [SEP]
    in_sequence = pos < length[:, None]
    in_b = pos > sep
    in_b &= in_sequence
    candidates = in_sequence.copy()
    candidates[:, 0] = candidates[rows, sep[:, 0]] = candidates[rows, length - 1] = False
    tokens = token_rows.take(a_start - 1)
    if plan.paired:
        np.copyto(tokens, token_rows.take(b_start - sep[:, 0] - 1), where=in_b)
    tokens *= candidates
    tokens = tokens.astype(DTYPES[INPUT_IDS])
    tokens[:, 0] = vocab.cls_id
    tokens[rows, sep[:, 0]] = vocab.sep_id
    tokens[rows, length - 1] = vocab.sep_id

    to_predict = np.minimum(max_predictions_per_seq, np.maximum(1, np.rint(length * masked_lm_prob).astype(np.int64)))
    if whole_word_masking:
        word_start = candidates & (~vocab.is_subword[tokens] | (pos == 1) | (pos == sep + 1))
        selected = _select_whole_words(candidates, word_start, to_predict, rng)
    else:
        selected = _select_tokens(candidates, to_predict, max_predictions_per_seq, rng)

    flat = np.flatnonzero(selected)  # row-major: positions come out sorted within each row
    sel_rows, sel_pos = np.divmod(flat, width)
    flat_tokens = tokens.reshape(-1)
    labels = flat_tokens[flat]
    draw = rng.random(len(flat))
    random_tokens = vocab.replacement_ids[rng.integers(0, len(vocab.replacement_ids), len(flat))]
    flat_tokens[flat] = np.where(draw < 0.8, vocab.mask_id, np.where(draw < 0.9, labels, random_tokens))
    counts = np.bincount(sel_rows, minlength=n)
    slot = np.arange(len(flat)) - np.repeat(np.cumsum(counts) - counts, counts)
    masked_positions = np.zeros((n, max_predictions_per_seq), dtype=DTYPES[MASKED_LM_POSITIONS])
    masked_ids = np.zeros((n, max_predictions_per_seq), dtype=DTYPES[MASKED_LM_IDS])
    masked_positions[sel_rows, slot] = sel_pos
    masked_ids[sel_rows, slot] = labels
    return {
        INPUT_IDS: tokens,
        INPUT_MASK: in_sequence.view(DTYPES[INPUT_MASK]),
        SEGMENT_IDS: in_b.view(DTYPES[SEGMENT_IDS]),
        MASKED_LM_POSITIONS: masked_positions,
        MASKED_LM_IDS: masked_ids,
        NEXT_SENTENCE_LABELS: plan.random_next.astype(DTYPES[NEXT_SENTENCE_LABELS]),
    }


def _truncate(plan: InstancePlan, max_tokens: int, rng: np.random.Generator):
    """Google's truncate_seq_pair in closed form: it removes one token at a time from the longer segment
    (B on ties), from the front or the back with probability 0.5 each."""
    a_len, b_len = plan.a_len, plan.b_len
    excess = np.maximum(a_len + b_len - max_tokens, 0)
    gap = np.abs(a_len - b_len)
    shorter = np.minimum(a_len, b_len)
    rest = excess - gap  # removals once both are equally long: B, A, B, A, ...
    new_a = np.where(excess <= gap, np.where(a_len > b_len, a_len - excess, a_len), shorter - rest // 2)
    new_b = np.where(excess <= gap, np.where(a_len > b_len, b_len, b_len - excess), shorter - (rest + 1) // 2)
    a_front = rng.binomial(a_len - new_a, 0.5)
    b_front = rng.binomial(b_len - new_b, 0.5)
    return plan.a_start + a_front, new_a, plan.b_start + b_front, new_b


def _select_tokens(candidates: np.ndarray, to_predict: np.ndarray, max_predictions: int,
                   rng: np.random.Generator) -> np.ndarray:
    """A uniformly random set of to_predict[i] candidate positions per row: those with the smallest of one
    random key per position (the first ones of a shuffle)."""
    n, width = candidates.shape
    keys = rng.random((n, width))
    keys[~candidates] = 2.0
    top = min(max_predictions, width)
    smallest = np.partition(keys, top - 1, axis=1)[:, :top] if top < width else keys.copy()
    smallest.sort(axis=1)
    take = np.minimum(to_predict, candidates.sum(axis=1))
    threshold = np.where(take > 0, smallest[np.arange(n), np.maximum(take - 1, 0)], -1.0)
    selected = keys <= threshold[:, None]
    tied = np.flatnonzero(selected.sum(axis=1) != take)  # equal keys at the threshold (~1e-12 per row):
    if len(tied):  # then the first `take` of a sort of the `top` smallest, whatever order the sort gives ties
        first = np.argpartition(keys[tied], top - 1, axis=1)[:, :top] if top < width \
            else np.broadcast_to(np.arange(width), (len(tied), width))
        order = np.take_along_axis(first, np.argsort(np.take_along_axis(keys[tied], first, axis=1), axis=1), axis=1)
        redone = np.zeros((len(tied), width), dtype=bool)
        np.put_along_axis(redone, order, np.arange(top)[None, :] < take[tied, None], axis=1)
        selected[tied] = redone
    return selected


def _select_whole_words(candidates: np.ndarray, word_start: np.ndarray, to_predict: np.ndarray,
                        rng: np.random.Generator) -> np.ndarray:
    """Google's whole-word masking: words in random order, each taken whole when it still fits in
    to_predict[i] (words that would overflow are skipped, smaller later ones may still fit)."""
    n, width = candidates.shape
    word = np.cumsum(word_start, axis=1) - 1  # word index of each candidate position
    word = np.where(candidates, word, width)  # non-candidates go to a dummy word
    flat_word = (word + np.arange(n)[:, None] * (width + 1)).ravel()
    word_len = np.bincount(flat_word, minlength=n * (width + 1)).reshape(n, width + 1)[:, :width]
    keys = np.where(word_len > 0, rng.random((n, width)), 2.0)
    order = np.argsort(keys, axis=1)
    sorted_len = np.take_along_axis(word_len, order, axis=1)
    filled = np.zeros(n, dtype=np.int64)
    taken_sorted = np.zeros((n, width), dtype=bool)
    for column in range(int(word_start.sum(axis=1).max(initial=0))):
        fits = (sorted_len[:, column] > 0) & (filled + sorted_len[:, column] <= to_predict)
        filled += np.where(fits, sorted_len[:, column], 0)
        taken_sorted[:, column] = fits
    taken = np.zeros((n, width + 1), dtype=bool)
    np.put_along_axis(taken, order, taken_sorted, axis=1)
    return np.take_along_axis(taken, word, axis=1) & candidates


def _uniforms(rng: np.random.Generator, block: int = 1 << 16) -> Callable[[], float]:
    """Each call gives the next value of rng.random's stream, drawn a block at a time when needed (no Python
    frame per value)."""
    return itertools.chain.from_iterable(map(np.ndarray.tolist, map(rng.random, itertools.repeat(block)))).__next__
