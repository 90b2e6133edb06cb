"""BERT pretraining instances (masked LM + next sentence prediction) from tokenized documents, vectorised.

The algorithm is the one of Google's `create_pretraining_data.py`, in two steps:

1. `plan_instances` walks the documents once per `dupe_factor` round (a short Python loop per *chunk*, not
   per token) and records each instance as two token spans of the shard's flat id array: segment A
   (leading sentences of a chunk) and segment B (the rest of the chunk, or with probability 0.5 a run of
   sentences from a random other document, the unused sentences of the chunk being put back).
   `plan_doc_sentences` plans RoBERTa's DOC-SENTENCES instead (variants of sequence kind doc-sentences): one span
   of the most consecutive whole sentences of a document that fit, no segment B, NSP label 0, no short targets.
2. `make_instances` turns any batch of planned instances into NVIDIA's arrays with numpy: truncation of
   the longer segment at a random end, `[CLS] A [SEP] B [SEP]` (`[CLS] A [SEP]` without B), and masks
   (wiki2bert_core/masking.py, the loader's masking too) drawn from the file's random stream.

The arrays are NVIDIA's six datasets, as wiki2bert_core/hdf5_format.py defines them.

Planning first costs ~40 bytes per instance, so a whole shard's instances can be shuffled (as Google does)
and then built and written in small blocks: memory does not grow with shard size times `dupe_factor`.

Differences from Google's code (distributions are otherwise the same; the random streams are numpy's):
- random replacement tokens are never special tokens nor `[unusedN]` placeholders (wiki2bert_core/masking.py);
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

from wiki2bert_core.hdf5_format import (DTYPES, INPUT_IDS, INPUT_MASK, MASKED_LM_IDS, MASKED_LM_POSITIONS,
                                       NEXT_SENTENCE_LABELS, SEGMENT_IDS)
from wiki2bert_core.masking import MaskDraws, Masking


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


class FileDraws:
    """The masks' draws (wiki2bert_core/masking.py's MaskDraws) from a file's one random stream, block after block.
    The keys are float32: half the cost of float64 to draw and to partition (the instances' largest costs)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def keys(self, shape: tuple[int, int]) -> np.ndarray:
        return self.rng.random(shape, dtype=np.float32)

    def choices(self, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        split, pick = self.rng.random((2, len(selected)))
        return split, pick


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


def make_instances(token_rows: TokenRows, plan: InstancePlan, masking: Masking, rng: np.random.Generator,
                   draws: MaskDraws) -> dict[str, np.ndarray]:
    """NVIDIA's six arrays for the planned instances (of max_seq_length token_rows.width), in plan order: truncation
    drawn from `rng`, masks (masking.max_predictions wide) from `draws`."""
    n, width = len(plan), token_rows.width
    special = 3 if plan.paired else 2  # [CLS] A [SEP] B [SEP], or [CLS] A [SEP]
    a_start, a_len, b_start, b_len = _truncate(plan, width - special, rng)  # with B empty: A's own truncation
    rows, pos = np.arange(n), np.arange(width, dtype=np.int32)[None, :]
    length = (a_len + b_len + special).astype(np.int32)
    sep = a_len.astype(np.int32)[:, None] + 1  # position of the first [SEP]
    in_sequence = pos < length[:, None]
    in_b = pos > sep
    in_b &= in_sequence
    tokens = token_rows.take(a_start - 1)
    if plan.paired:
        np.copyto(tokens, token_rows.take(b_start - sep[:, 0] - 1), where=in_b)
    tokens *= in_sequence  # the padding; [CLS] and [SEP] are set below
    tokens = tokens.astype(DTYPES[INPUT_IDS])
    tokens[:, 0] = masking.vocab.cls_id
    tokens[rows, sep[:, 0]] = masking.vocab.sep_id
    tokens[rows, length - 1] = masking.vocab.sep_id
    input_ids, masked_positions, masked_ids = masking.apply(tokens, in_sequence, draws)
    return {
        INPUT_IDS: input_ids,
        INPUT_MASK: in_sequence.view(DTYPES[INPUT_MASK]),
        SEGMENT_IDS: in_b.view(DTYPES[SEGMENT_IDS]),
        MASKED_LM_POSITIONS: masked_positions.astype(DTYPES[MASKED_LM_POSITIONS], copy=False),
        MASKED_LM_IDS: masked_ids.astype(DTYPES[MASKED_LM_IDS], copy=False),
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


def _uniforms(rng: np.random.Generator, block: int = 1 << 16) -> Callable[[], float]:
    """Each call gives the next value of rng.random's stream, drawn a block at a time when needed (no Python
    frame per value)."""
    return itertools.chain.from_iterable(map(np.ndarray.tolist, map(rng.random, itertools.repeat(block)))).__next__
