"""Token ids that say where they came from, for tests of the hdf5 stage's instances and masks."""
from __future__ import annotations

import numpy as np

from pipeline.stages.hdf5.instances import TokenizedDocuments
from wiki2bert_core.masking import MaskingVocab
from wiki2bert_core.wordpiece import placeholder_token

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

def flat_documents(sentence_lengths: list[list[int]], first_id: int = 10) -> TokenizedDocuments:
    """Documents (lists of sentence lengths) whose token ids are their positions in the flat array + first_id:
    every token says where it came from."""
    lengths = [n for doc in sentence_lengths for n in doc]
    return TokenizedDocuments(np.arange(first_id, first_id + sum(lengths), dtype=np.int32),
                              np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                              np.concatenate([[0], np.cumsum([len(d) for d in sentence_lengths])]).astype(np.int64))


PLACEHOLDER_IDS = range(5, 10)  # [unused0]..[unused4], below flat_documents' first id


def positional_vocab(total_ids: int) -> MaskingVocab:
    vocab = {t: i for i, t in enumerate(SPECIALS)} | {placeholder_token(i - 5): i for i in PLACEHOLDER_IDS} | \
        {f"t{i}": i for i in range(10, total_ids)}
    return MaskingVocab.from_vocab(vocab)


def original_tokens(arrays: dict, row: int) -> np.ndarray:
    tokens = arrays["input_ids"][row].copy()
    used = arrays["masked_lm_positions"][row] != 0
    tokens[arrays["masked_lm_positions"][row][used]] = arrays["masked_lm_ids"][row][used]
    return tokens
