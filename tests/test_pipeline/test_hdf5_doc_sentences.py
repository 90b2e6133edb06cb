"""Stage hdf5, sequence kind doc-sentences (RoBERTa's DOC-SENTENCES): whole consecutive sentences of one document up
to the length limit, `[CLS] ... [SEP]`, segment ids and NSP labels 0; checked against the shard text, in NVIDIA's
layout, deterministic across workers, beside segment-pair variants whose bytes it does not change."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from pathlib import Path

import h5py
import numpy as np
import pytest

from wiki2bert_core.config import layered
from wiki2bert_core.errors import ConfigError
from wiki2bert_core.hdf5_format import DTYPES
from wiki2bert_core.masking import Masking, MaskingVocab
from wiki2bert_core.variant_dir import DOC_SENTENCES, SEGMENT_PAIR, read_params, variant_dir_name
from wiki2bert_core.wordpiece import read_vocab, special_token_ids, wordpiece_tokenizer
from pipeline.config import DEFAULT_CONFIG_PATH, load_pipeline_config
from pipeline.runner import _hash_json, config_hash
from pipeline.stages.hdf5.instances import FileDraws, TokenRows, make_instances, plan_doc_sentences
from pipeline.stages.hdf5.stage import Hdf5Config, Variant
from pipeline.stages.hdf5.tokenize import tokenize_documents
from pipeline.tools.verify import verify_path
from positional_tokens import flat_documents, original_tokens, positional_vocab

WIDTH = 64


def doc_instances(docs, dupe_factor=1, seed=3, width=WIDTH, whole_word=False, vocab=None):
    plan = plan_doc_sentences(docs, width, dupe_factor)
    vocab = vocab or positional_vocab(int(docs.ids.max()) + 1)
    rng = np.random.default_rng(seed)
    return plan, make_instances(TokenRows(np.pad(docs.ids, width), width), plan, Masking(vocab, 0.15, 10, whole_word),
                                rng, FileDraws(rng))


def sentence_spans(docs) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """Token position -> (document, sentence) it is in, and each sentence's start token."""
    starts = docs.sentence_starts.tolist()
    doc_of_sentence = np.repeat(np.arange(len(docs.document_starts) - 1), np.diff(docs.document_starts))
    return {t: (int(doc_of_sentence[s]), s) for s in range(len(starts) - 1) for t in range(starts[s], starts[s + 1])}, \
        starts


@pytest.fixture(scope="module")
def positional():
    rnd = random.Random(2)
    lengths = [[rnd.randint(3, 30) for _ in range(rnd.randint(1, 40))] for _ in range(300)]
    lengths[5][2] = 150  # sentences longer than the limit: truncated
    lengths[9] = [200]
    docs = flat_documents(lengths)
    return docs, *doc_instances(docs)


def test_layout_is_cls_whole_sentences_sep(positional):
    docs, plan, a = positional
    length = a["input_mask"].sum(axis=1)
    rows = np.arange(len(length))
    vocab = positional_vocab(int(docs.ids.max()) + 1)
    assert (a["input_ids"][:, 0] == vocab.cls_id).all() and (a["input_ids"][rows, length - 1] == vocab.sep_id).all()
    assert ((a["input_ids"] == vocab.sep_id).sum(axis=1) == 1).all()  # one [SEP], at the end
    assert (a["segment_ids"] == 0).all() and (a["next_sentence_labels"] == 0).all() and not plan.paired
    assert (a["input_mask"].astype(bool) == (np.arange(WIDTH) < length[:, None])).all()
    assert (length <= WIDTH).all() and (length >= 3).all()
    where, starts = sentence_spans(docs)
    truncated = 0
    for row in rows:
        tokens = original_tokens(a, row)[1:length[row] - 1] - 10  # ids are positions + 10
        assert (np.diff(tokens) == 1).all()  # one consecutive run of the shard
        (first_doc, first), (last_doc, last) = where[int(tokens[0])], where[int(tokens[-1])]
        assert first_doc == last_doc  # of one document
        if tokens[0] == starts[first] and tokens[-1] + 1 == starts[last + 1]:
            continue  # whole sentences
        assert first == last and starts[first + 1] - starts[first] > WIDTH - 2 and length[row] == WIDTH
        truncated += 1
    assert truncated == 2


def test_sequences_fill_up_to_the_limit(positional):
    """Greedy: an instance ends where the next sentence of its document would not fit, so all but the last of
    each document are near the limit."""
    docs, plan, a = positional
    length = a["input_mask"].sum(axis=1)
    where, starts = sentence_spans(docs)
    ends = plan.a_start + plan.a_len  # untruncated spans: sentence boundaries
    not_last = np.array([e < len(docs.ids) and where[int(e)][0] == where[int(s)][0]
                         for s, e in zip(plan.a_start, ends)])
    next_length = np.array([starts[where[int(e)][1] + 1] - e if n else 0 for e, n in zip(ends, not_last)])
    assert (plan.a_len[not_last] + next_length[not_last] > WIDTH - 2).all()
    assert not_last.mean() > 0.6 and np.median(length[not_last]) > 0.85 * WIDTH
    assert len(plan) == len(a["input_ids"]) and plan.document_rounds == 300


def test_every_round_has_the_same_spans_with_new_masks():
    """No short sequences are injected (RoBERTa's rule): each round packs the documents alike; masks are drawn anew."""
    docs = flat_documents([[10] * 42 for _ in range(500)])  # 7 instances of 6 sentences each
    plan, a = doc_instances(docs, dupe_factor=3)
    assert plan.document_rounds == 1500 and plan.short_targets == 0 and (plan.a_len == 60).all()
    first_of = {}
    differ = 0
    for row, start in enumerate(plan.a_start.tolist()):
        if start in first_of:
            differ += not np.array_equal(a["masked_lm_positions"][row], a["masked_lm_positions"][first_of[start]])
        else:
            first_of[start] = row
    assert len(first_of) == 3500 == len(plan) // 3 and differ > 0.9 * (len(plan) - len(first_of))


def test_masking_as_for_pairs(positional):
    docs, plan, a = positional
    length = a["input_mask"].sum(axis=1)
    used = a["masked_lm_positions"] != 0
    k = used.sum(axis=1)
    assert (k == np.minimum(10, np.maximum(1, np.rint(length * 0.15)))).all()
    rows, slots = np.nonzero(used)
    positions = a["masked_lm_positions"][rows, slots]
    assert (positions > 0).all() and (positions < length[rows] - 1).all()  # never [CLS] or [SEP]
    current, label = a["input_ids"][rows, positions], a["masked_lm_ids"][rows, slots]
    vocab = positional_vocab(int(docs.ids.max()) + 1)
    assert abs((current == vocab.mask_id).mean() - 0.8) < 0.03 and abs((current == label).mean() - 0.1) < 0.03


def test_whole_word_masking(tmp_path, write_corpus, write_vocab):
    vocab = write_vocab(tmp_path / "vocab.txt")
    write_corpus(tmp_path / "t.txt", 80, suffix_share=0.6, sentences=(5, 20))
    docs = tokenize_documents(tmp_path / "t.txt", wordpiece_tokenizer(vocab), special_token_ids(vocab))
    masking = MaskingVocab.from_vocab(vocab)
    _, a = doc_instances(docs, dupe_factor=3, whole_word=True, vocab=masking)
    length = a["input_mask"].sum(axis=1)
    split = 0
    for row in range(len(length)):
        tokens = original_tokens(a, row)
        masked = np.isin(np.arange(WIDTH), a["masked_lm_positions"][row][a["masked_lm_positions"][row] != 0])
        split += sum(masking.continues_word[tokens[p]] and masked[p] != masked[p - 1] for p in range(2, length[row] - 1))
    assert split == 0 and (a["masked_lm_positions"] != 0).any()


def test_config(tmp_path):
    with pytest.raises(ConfigError, match=r"^t\.variants\[1\]\.sequence_kind: 'pairs' is not one of "
                                          r"segment-pair, doc-sentences$"):
        layered(Hdf5Config, [({"variants": [{}, {"sequence_kind": "pairs"}]}, "t")])
    with pytest.raises(ConfigError, match=r"max_predictions_per_seq: must be in 1..max_seq_length-2$"):
        Hdf5Config(variants=[Variant(8, 7, DOC_SENTENCES)])
    assert Hdf5Config(variants=[Variant(3, 1, DOC_SENTENCES)])  # [CLS] one token [SEP]
    with pytest.raises(ConfigError, match=r"max_seq_length: 4 is less than 5 \(\[CLS\] A \[SEP\] B \[SEP\]\)$"):
        Hdf5Config(variants=[Variant(4, 1)])
    assert variant_dir_name(512, 80, 0.15, 1, 5, True, False, DOC_SENTENCES).endswith(
        "_dupe_factor_5_whole_word_mask_doc_sentences")
    with pytest.raises(ConfigError, match="twice"):
        Hdf5Config(variants=[Variant(128, 20, DOC_SENTENCES), Variant(128, 20, DOC_SENTENCES)])
    both = Hdf5Config(variants=[Variant(128, 20), Variant(128, 20, DOC_SENTENCES)])
    # a config of segment-pair variants hashes as it did before the key existed: its stage's output stays current
    pairs = load_pipeline_config(DEFAULT_CONFIG_PATH, "hu").stage_configs["hdf5"]
    before = dataclasses.asdict(pairs)
    before["variants"] = [{k: v for k, v in variant.items() if k != "sequence_kind"} for variant in before["variants"]]
    assert [v.sequence_kind for v in pairs.variants] == [SEGMENT_PAIR, SEGMENT_PAIR]
    assert config_hash(pairs) == _hash_json(before) != config_hash(both)


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def shard_sentences(path: Path, tokenizer) -> list[list[list[int]]]:
    """The documents of a shard text file, each a list of its sentences' token ids (the tokenizer's, one line
    at a time)."""
    documents: list[list[list[int]]] = [[]]
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            documents[-1].append(tokenizer.encode(line, add_special_tokens=False).ids)
        elif documents[-1]:
            documents.append([])
    return [d for d in documents if d]


def nvidia_labels(f: h5py.File, row: int) -> np.ndarray:
    """masked_lm_labels as NVIDIA's pretraining_dataset.__getitem__ makes them: -1, and masked_lm_ids at the
    positions before the first 0 of masked_lm_positions."""
    positions, ids = f["masked_lm_positions"][row].astype(np.int64), f["masked_lm_ids"][row].astype(np.int64)
    labels = np.full(f["input_ids"].shape[1], -1)
    padded = np.flatnonzero(positions == 0)
    index = padded[0] if len(padded) else len(positions)
    labels[positions[:index]] = ids[:index]
    return labels


def test_stage_writes_doc_sentences_beside_unchanged_pairs(tmp_path, run_hdf5_stage, write_corpus, write_vocab):
    vocab_file = tmp_path / "vocab.txt"
    vocab = write_vocab(vocab_file)
    shard = tmp_path / "shard"
    shard.mkdir()
    for i, name in enumerate(["training_0000", "training_0001", "test_0000"]):
        write_corpus(shard / f"{name}.txt", 30, seed=i, sentences=(10, 40))
    (shard / "training_0002.txt").write_text("\n\n", encoding="utf-8")  # an empty shard gives an empty file
    pairs = Hdf5Config(variants=[Variant(128, 20), Variant(64, 10)], dupe_factor=2)
    config = dataclasses.replace(pairs, variants=[*pairs.variants, Variant(128, 20, DOC_SENTENCES)])
    one = run_hdf5_stage(tmp_path, shard, vocab_file, config, workers=1, out_name="one")
    two = run_hdf5_stage(tmp_path, shard, vocab_file, config, workers=2, out_name="two")
    only_pairs = run_hdf5_stage(tmp_path, shard, vocab_file, pairs, out_name="pairs")
    seed = run_hdf5_stage(tmp_path, shard, vocab_file, dataclasses.replace(config, random_seed=7), out_name="seed")

    files = digests(one)
    assert files == digests(two)  # the same bytes whatever the number of workers
    assert {k: v for k, v in files.items() if "_doc_sentences/" not in k} == digests(only_pairs)
    name = "hdf5_lower_case_0_seq_len_128_max_pred_20_masked_lm_prob_0.15_random_seed_12345_dupe_factor_2"
    doc = one / f"{name}_doc_sentences"
    assert sorted(p.name for p in one.iterdir()) == sorted([name, f"{name}_doc_sentences",
                                                            name.replace("128_max_pred_20", "64_max_pred_10")])
    params = read_params(doc)
    assert params.sequence_kind == DOC_SENTENCES and read_params(one / name).sequence_kind == SEGMENT_PAIR
    assert params.short_seq_prob == 0.0 and read_params(one / name).short_seq_prob == 0.1  # none injected
    assert params.dir_name == doc.name
    record = json.loads((doc / "variant.json").read_text())
    assert record["random_next_share"] == 0 and record["training_instances"] > 100
    with h5py.File(doc / "training" / "training_0002.hdf5") as f:
        assert f["input_ids"].shape == (0, 128) and f["masked_lm_positions"].shape == (0, 20)
    seed_files = digests(seed)
    training = "_doc_sentences/training/training_0000.hdf5"
    assert seed_files[f"{name.replace('12345', '7')}{training}"] != files[f"{name}{training}"]

    report = verify_path(one)
    assert report.ok, report.problems
    assert set(report.stats) == {(128, 20, SEGMENT_PAIR), (64, 10, SEGMENT_PAIR), (128, 20, DOC_SENTENCES)}

    tokenizer = wordpiece_tokenizer(read_vocab(vocab_file))
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    for split, shard_name in (("training", "training_0000"), ("test", "test_0000")):
        documents = shard_sentences(shard / f"{shard_name}.txt", tokenizer)
        runs = {}  # every run of whole consecutive sentences of one document that fits -> how it ends
        for sentences in documents:
            for i in range(len(sentences)):
                run = []
                for j, sentence in enumerate(sentences[i:], i):
                    run += sentence
                    if len(run) > 126:
                        break
                    runs[tuple(run)] = ("document end" if j + 1 == len(sentences) else
                                        "full" if len(run) + len(sentences[j + 1]) > 126 else "open")
        with h5py.File(doc / split / f"{shard_name}.hdf5") as f:
            expected = {"input_ids": 128, "input_mask": 128, "segment_ids": 128, "masked_lm_positions": 20,
                        "masked_lm_ids": 20, "next_sentence_labels": None}
            assert set(f) == set(expected)
            n = len(f["input_ids"])
            for key, width in expected.items():
                assert f[key].dtype == DTYPES[key] and f[key].shape == ((n, width) if width else (n,))
            ids, mask = f["input_ids"][:], f["input_mask"][:]
            assert (f["segment_ids"][:] == 0).all() and (f["next_sentence_labels"][:] == 0).all()
            length = mask.sum(axis=1)
            ends = []
            for row in range(n):
                labels = nvidia_labels(f, row)  # what NVIDIA's loader trains on: the original tokens back
                tokens = np.where(labels >= 0, labels, ids[row])
                assert tokens[0] == cls_id and tokens[length[row] - 1] == sep_id
                ends.append(runs[tuple(tokens[1:length[row] - 1].tolist())])  # whole sentences of one document
            ends = np.array(ends)
            # up to the limit: the next sentence would not fit, bar the ends of documents
            assert not (ends == "open").any() and (ends == "full").mean() > 0.5
            assert np.median(length[ends == "full"]) > 0.85 * 128
