"""wiki2bert_core/masking.py, the one masking of the hdf5 stage and the pretraining loader: the same draws give the
same masks through either side's entry point (single tokens and whole words); the replacement pool leaves out the
special tokens and the [unusedN] placeholders; equal keys still give exactly the count, the earlier position first."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.stages.hdf5.instances import FileDraws, TokenRows, make_instances, plan_instances
from pipeline.stages.hdf5.tokenize import tokenize_documents
from pretrain.data.masking import DynamicMasking, SequenceDraws
from wiki2bert_core.masking import Masking, MaskingVocab, _tokens
from wiki2bert_core.wordpiece import SPECIAL_TOKENS, placeholder_token, special_token_ids, wordpiece_tokenizer

SEQ, PREDICTIONS, SEED = 64, 10, 5


@pytest.mark.parametrize("whole_word", [False, True])
def test_the_same_draws_give_the_same_masks_in_the_hdf5_stage_and_the_loader(whole_word, tmp_path, write_corpus,
                                                                             write_vocab):
    """The stage's instances built with the loader's draws of (seed, epoch, index) hold exactly the masks the loader
    draws for them: the loader undoes the stage's masks and draws them again."""
    vocab = write_vocab(tmp_path / "vocab.txt")
    write_corpus(tmp_path / "shard.txt", 60, suffix_share=0.5)
    docs = tokenize_documents(tmp_path / "shard.txt", wordpiece_tokenizer(vocab), special_token_ids(vocab))
    plan = plan_instances(docs, SEQ, 0.1, 2, np.random.default_rng(1))
    epochs, indices = np.full(len(plan), 3), np.arange(len(plan)) + 1000
    stage_masking = Masking(MaskingVocab.from_vocab(vocab), 0.15, PREDICTIONS, whole_word)
    stored = make_instances(TokenRows(np.pad(docs.ids, SEQ), SEQ), plan, stage_masking, np.random.default_rng(2),
                            SequenceDraws(SEED, epochs, indices, SEQ))
    batch = {name: torch.from_numpy(stored[key].astype(np.int64)) for name, key in
             [("input_ids", "input_ids"), ("attention_mask", "input_mask"), ("masked_lm_positions", "masked_lm_positions"),
              ("masked_lm_ids", "masked_lm_ids")]}
    loader_masking = DynamicMasking(MaskingVocab.from_vocab(vocab), 0.15, PREDICTIONS, whole_word, seed=SEED)
    read = loader_masking(batch, epochs, indices)
    for key in ("input_ids", "masked_lm_positions", "masked_lm_ids"):
        assert np.array_equal(read[key].numpy(), stored[key]), key
    assert len(plan) > 200 and (stored["input_ids"] == vocab["[MASK]"]).sum() > 500  # not vacuous
    other = loader_masking(batch, epochs + 1, indices)  # another epoch's draws: other masks
    assert not np.array_equal(other["masked_lm_positions"].numpy(), stored["masked_lm_positions"])


def test_random_tokens_are_never_special_tokens_nor_placeholders():
    """Google's layout ([PAD], [unused0..99], [UNK], [CLS], [SEP], [MASK], words): the pool is the words; over 40,000
    predictions the stage's random tokens cover it and hold nothing else."""
    words = [f"w{i}" for i in range(300)] + [f"##x{i}" for i in range(20)]
    tokens = ["[PAD]", *map(placeholder_token, range(100)), *SPECIAL_TOKENS[1:], *words]
    vocab = {t: i for i, t in enumerate(tokens)}
    masking_vocab = MaskingVocab.from_vocab(vocab)
    assert sorted(masking_vocab.replacement_ids.tolist()) == [vocab[w] for w in words]

    rng = np.random.default_rng(0)
    rows, width = 20_000, 128
    original = rng.integers(vocab["w0"], len(vocab), (rows, width)).astype(np.int32)
    original[:, 0], original[:, -1] = vocab["[CLS]"], vocab["[SEP]"]
    masking = Masking(masking_vocab, 0.15, 20, whole_word=False)
    input_ids, positions, _ = masking.apply(original.copy(), np.ones((rows, width), bool), FileDraws(rng))
    masked = np.take_along_axis(input_ids, positions.astype(np.int64), axis=1)[positions != 0]
    was = np.take_along_axis(original, positions.astype(np.int64), axis=1)[positions != 0]
    replaced = masked[(masked != vocab["[MASK]"]) & (masked != was)]
    assert len(masked) == rows * 19 and abs(len(replaced) / len(masked) - 0.1) < 0.01
    assert set(replaced.tolist()) == {vocab[w] for w in words}


def test_equal_keys_give_exactly_the_count_the_earlier_position_first():
    candidates = np.ones((3, 8), bool)
    candidates[2, :5] = False  # 3 candidates, fewer than to_predict
    keys = np.array([[0.5, 0.1, 0.3, 0.3, 0.3, 0.9, 0.3, 0.2],
                     [0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4],
                     [0.1, 0.1, 0.1, 0.1, 0.1, 0.7, 0.7, 0.7]], dtype=np.float32)
    selected = _tokens(candidates, keys, np.array([4, 3, 4]), max_predictions=5)
    assert selected.astype(int).tolist() == [[0, 1, 1, 1, 0, 0, 0, 1], [1, 1, 1, 0, 0, 0, 0, 0],
                                             [0, 0, 0, 0, 0, 1, 1, 1]]
