"""pretrain/data/masking.py and the loader with `masking: dynamic`: the stored masks undone give back the tokenized text;
new masks have the rate, the 80/10/10 split and the whole-word property (statistical bounds that can fail); they are
a function of seed, epoch and sequence only (not of workers, ranks or batches) and a stopped dynamic run resumes
exactly; bad settings are refused with one line."""
from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from wiki2bert_core.wordpiece import read_vocab, wordpiece_tokenizer
from pipeline.stages.hdf5.stage import Hdf5Config, Variant
from pretrain.data.loader import BatchPlan, make_loader, open_data
from pretrain.data.masking import DynamicMasking
from wiki2bert_core.masking import MaskingVocab, default_max_predictions, original_tokens
from pretrain.data.packing import pack_batch
from pretrain_cli import TINY, assert_refused, metrics, pretrain

VOCAB_SIZE = 60  # conftest's write_vocab_dir


def synthetic_batch(vocab: dict[str, int], rows: int, seq_len: int, lengths=None, seed: int = 0,
                    stored_predictions: int = 20) -> dict[str, torch.Tensor]:
    """[CLS] A [SEP] B [SEP] rows of random word and `##` tokens (real lengths `lengths`, default all seq_len), with
    no stored masks, as BatchReader.read gives them."""
    rng = np.random.default_rng(seed)
    words = np.array([i for t, i in vocab.items() if not t.startswith("[")])
    lengths = np.full(rows, seq_len) if lengths is None else np.asarray(lengths)
    ids = rng.choice(words, (rows, seq_len))
    real = np.arange(seq_len)[None, :] < lengths[:, None]
    sep = rng.integers(2, lengths - 2)
    ids[:, 0] = vocab["[CLS]"]
    ids[np.arange(rows), sep] = ids[np.arange(rows), lengths - 1] = vocab["[SEP]"]
    ids[~real] = vocab["[PAD]"]
    segments = (np.arange(seq_len)[None, :] > sep[:, None]) & real
    zeros = torch.zeros(rows, stored_predictions, dtype=torch.int64)
    return {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(segments.astype(np.int64)),
            "attention_mask": torch.from_numpy(real.astype(np.int64)), "masked_lm_positions": zeros,
            "masked_lm_ids": zeros.clone(), "next_sentence_labels": torch.zeros(rows, dtype=torch.int64)}


def masked_matrix(batch: dict[str, torch.Tensor]) -> np.ndarray:
    """bool [rows, seq_len]: the positions a batch predicts."""
    positions = batch["masked_lm_positions"].numpy()
    masked = np.zeros(batch["input_ids"].shape, dtype=bool)
    rows, slots = np.nonzero(positions)
    masked[rows, positions[rows, slots]] = True
    return masked


def dynamic(vocab: dict[str, int], rate: float = 0.15, seq_len: int = 128, whole_word: bool = False,
            seed: int = 0) -> DynamicMasking:
    return DynamicMasking(MaskingVocab.from_vocab(vocab), rate, default_max_predictions(rate, seq_len), whole_word,
                          seed)


def test_undoing_the_stored_masks_gives_back_the_tokenized_text(tmp_path, run_hdf5_stage, write_corpus, write_vocab):
    """Instances of the pipeline's hdf5 stage (80/10/10 masks: [MASK], random and kept tokens): with the masks
    undone, segments A and B are runs of the tokenizer's ids of the corpus's documents; the loader's dynamic masks
    sit on the same text."""
    vocab_file = tmp_path / "vocab.txt"
    vocab = write_vocab(vocab_file)
    (tmp_path / "shard").mkdir()
    write_corpus(tmp_path / "shard" / "training_0000.txt", 40, seed=3)
    out = run_hdf5_stage(tmp_path, tmp_path / "shard", vocab_file,
                         Hdf5Config(variants=[Variant(64, 10)], dupe_factor=2))
    variant = next(out.glob("*seq_len_64*"))

    tokenizer = wordpiece_tokenizer(vocab)
    documents = (tmp_path / "shard" / "training_0000.txt").read_text(encoding="utf-8").split("\n\n")
    streams = [" " + " ".join(str(i) for line in doc.splitlines() if line
                              for i in tokenizer.encode(line, add_special_tokens=False).ids) + " "
               for doc in documents if doc.strip()]

    def in_text(segment: np.ndarray) -> bool:
        needle = " " + " ".join(map(str, segment.tolist())) + " "
        return any(needle in stream for stream in streams)

    def segments(row: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        sep = int(np.flatnonzero(row == vocab["[SEP]"])[0])
        return row[1:sep], row[sep + 1:length - 1]

    with h5py.File(variant / "training" / "training_0000.hdf5") as f:
        stored = {k: f[k][()] for k in ("input_ids", "input_mask", "masked_lm_positions", "masked_lm_ids")}
    lengths = stored["input_mask"].sum(axis=1)
    tokens = original_tokens(stored["input_ids"], stored["masked_lm_positions"], stored["masked_lm_ids"])
    assert len(tokens) > 100
    for row, length in zip(tokens, lengths):
        assert all(in_text(s) for s in segments(row, length))
    as_stored = [all(in_text(s) for s in segments(row, n)) for row, n in zip(stored["input_ids"], lengths)]
    assert sum(as_stored) < 0.1 * len(tokens)  # the check is not vacuous: the stored rows are masked
    changed = tokens != stored["input_ids"]
    assert 0.75 < (stored["input_ids"][changed] == vocab["[MASK]"]).mean() < 0.95  # [MASK]s and random tokens undone

    data = open_data(variant, 64, len(vocab))
    masking = dynamic(vocab, seq_len=64)
    plan = BatchPlan(data, 16, seed=1)
    for ((pieces, _), batch, _) in zip(plan, make_loader(data, 16, len(vocab), seed=1, workers=0, masking=masking),
                                       range(5)):
        read = batch["input_ids"].numpy()
        want = np.concatenate([tokens[rows] for f, rows, _ in pieces])
        again = original_tokens(read, batch["masked_lm_positions"].numpy(), batch["masked_lm_ids"].numpy())
        assert np.array_equal(again, want) and not np.array_equal(read, want)


@pytest.mark.parametrize("rate", [0.15, 0.4])
def test_dynamic_masks_have_the_rate_and_the_80_10_10_split_and_spare_the_special_tokens(rate, tmp_path,
                                                                                          write_vocab):
    vocab = write_vocab(tmp_path / "vocab.txt")
    masking = dynamic(vocab, rate)
    assert masking.max_predictions == {0.15: 20, 0.4: 52}[rate]  # NVIDIA's 20 at 128 and 0.15

    lengths = np.random.default_rng(1).integers(8, 129, 6000)
    batch = synthetic_batch(vocab, 6000, 128, lengths)
    out = masking(batch, np.zeros(6000, dtype=np.int64), np.arange(6000))
    positions, labels = out["masked_lm_positions"].numpy(), out["masked_lm_ids"].numpy()
    assert positions.shape == labels.shape == (6000, masking.max_predictions)
    masked = masked_matrix(out)
    count = (positions != 0).sum(axis=1)
    assert np.array_equal(count, np.minimum(masking.max_predictions, np.maximum(1, np.rint(rate * lengths))))
    assert (positions[:, 1:][positions[:, 1:] != 0] > positions[:, :-1][positions[:, 1:] != 0]).all()  # ascending
    assert ((positions != 0) == (np.arange(positions.shape[1]) < count[:, None])).all()  # then zero-padded
    before, after = batch["input_ids"].numpy(), out["input_ids"].numpy()
    specials = np.isin(before, [vocab[t] for t in ("[CLS]", "[SEP]", "[PAD]")])
    assert not (masked & specials).any() and np.array_equal(after[~masked], before[~masked])
    rows, slots = np.nonzero(positions)
    assert np.array_equal(labels[rows, slots], before[rows, positions[rows, slots]])

    now, was = after[masked], before[masked]
    predictions = len(now)
    mask, kept = (now == vocab["[MASK]"]).mean(), (now == was).mean()
    assert predictions > 50_000 and abs(mask - 0.8) < 0.01 and abs(kept - 0.1) < 0.008, (mask, kept)
    replaced = now[(now != vocab["[MASK]"]) & (now != was)]
    assert abs(len(replaced) / predictions - 0.1) < 0.008
    words = {i for t, i in vocab.items() if not t.startswith("[")}
    assert set(replaced.tolist()) <= words and len(set(replaced.tolist())) > 0.95 * len(words)

    full = masking(synthetic_batch(vocab, 4000, 128, seed=2), np.ones(4000, dtype=np.int64), np.arange(4000))
    share = masked_matrix(full)[:, 1:-1].sum(axis=0) / 4000  # per position: uniform over the sequence
    expected = np.rint(rate * 128) / 125  # 125 candidates: 128 less [CLS] and two [SEP]
    assert np.abs(share - expected).max() < 5 * np.sqrt(expected * (1 - expected) / 4000)


def test_whole_word_masking_masks_a_words_pieces_together(tmp_path, write_vocab):
    vocab = write_vocab(tmp_path / "vocab.txt")  # w0.. and ##s, ##ed, ##ing
    continues = MaskingVocab.from_vocab(vocab).continues_word
    batch = synthetic_batch(vocab, 2000, 128, np.random.default_rng(3).integers(16, 129, 2000))
    ids = batch["input_ids"].numpy()
    assert 0.005 < continues[ids].mean() < 0.05  # a few `##` pieces, some in a row, some after [CLS]/[SEP]

    def split_words(whole_word: bool) -> tuple[int, np.ndarray, np.ndarray]:
        out = dynamic(vocab, whole_word=whole_word)(batch, np.zeros(2000, dtype=np.int64), np.arange(2000))
        masked = masked_matrix(out)
        joined = continues[ids[:, 1:]] & ~np.isin(ids[:, :-1], [vocab["[CLS]"], vocab["[SEP]"]])
        return int((joined & (masked[:, 1:] != masked[:, :-1])).sum()), masked, masked.sum(axis=1)

    splits, masked, count = split_words(True)
    assert splits == 0
    assert split_words(False)[0] > 50  # the check is not vacuous
    lengths = batch["attention_mask"].numpy().sum(axis=1)
    to_predict = np.minimum(20, np.maximum(1, np.rint(0.15 * lengths)))
    assert (count <= to_predict).all() and count.sum() > 0.97 * to_predict.sum()
    assert abs(continues[ids][masked].mean() - continues[ids][batch["attention_mask"].numpy() == 1].mean()) < 0.01


def test_masks_are_a_function_of_seed_epoch_and_sequence_not_of_workers_ranks_or_packing(tmp_path, write_dataset):
    data = open_data(write_dataset(tmp_path, [7, 5, 9]), 32, VOCAB_SIZE)  # 21 rows an epoch
    vocab = read_vocab(data.data_dir / "vocab.txt")

    def read(masking: DynamicMasking, world_size: int = 1, workers: int = 0) -> dict[tuple[int, int], tuple]:
        """(epoch, index of the row among all rows) -> its input_ids and masks, over 12 micro-batches of 4 a rank."""
        seen = {}
        first = np.cumsum([0] + [f.samples for f in data.files])
        for rank in range(world_size):
            plan = BatchPlan(data, 4, rank, world_size, seed=3)
            loader = make_loader(data, 4, VOCAB_SIZE, rank, world_size, seed=3, workers=workers, masking=masking)
            for (pieces, _), batch, _ in zip(plan, loader, range(12)):
                keys = [(epoch, int(first[f] + r)) for f, rows, epoch in pieces for r in rows]
                for k, key in enumerate(keys):
                    seen[key] = tuple(batch[name][k].tolist() for name in
                                      ("input_ids", "masked_lm_positions", "masked_lm_ids"))
        return seen

    masking = DynamicMasking(MaskingVocab.from_vocab(vocab), 0.15, 5, False, seed=11)
    one = read(masking)
    assert {key for key in one if key[0] == 0} == {(0, i) for i in range(21)}
    for other in (read(masking, workers=2), read(masking, world_size=2)):
        shared = one.keys() & other.keys()
        assert len(shared) >= 40 and all(one[key] == other[key] for key in shared)
    again = [one[(0, i)] != one[(1, i)] for i in range(21) if (1, i) in one]
    assert len(again) >= 10 and sum(again) >= 0.7 * len(again)  # another epoch, other masks
    reseeded = read(DynamicMasking(MaskingVocab.from_vocab(vocab), 0.15, 5, False, seed=12))
    assert sum(reseeded[key] != one[key] for key in one) >= 0.7 * len(one)

    plain = make_loader(data, 4, VOCAB_SIZE, seed=3, workers=0, masking=masking)
    packed = make_loader(data, 4, VOCAB_SIZE, seed=3, workers=0, masking=masking, pack=True)
    for a, b, _ in zip(plain, packed, range(8)):
        want = pack_batch({k: v for k, v in a.items() if isinstance(v, torch.Tensor)})
        assert all(torch.equal(b[k], v) for k, v in want.items())


@pytest.mark.parametrize("extra, message", [
    (["--set", "masking=dynamic", "--set", "mask_rate=1.5"], "mask_rate: must be in (0, 1), got 1.5"),
    (["--set", "masking=dynamic", "--set", "mask_rate=0"], "mask_rate: must be in (0, 1), got 0"),
    (["--set", "masking=dynamic", "--set", "max_predictions=4"],
     "max_predictions 4: mask_rate 0.15 needs 5 in a sequence of 32 tokens"),
    (["--set", "mask_rate=0.3"], "mask_rate: applies to masking dynamic only"),
    (["--set", "whole_word_masking=true"], "whole_word_masking: applies to masking dynamic only"),
    (["--set", "masking=random"], "masking"),
])
def test_bad_masking_settings_exit_2_with_one_line(tmp_path, monkeypatch, capsys, write_dataset, extra, message):
    data = write_dataset(tmp_path / "data", [8, 8])
    assert_refused(monkeypatch, capsys, message, tmp_path / "r", "phase1", "--data", str(data), *TINY, *extra)


@pytest.mark.slow
def test_a_stopped_dynamic_run_resumes_with_exactly_the_losses_of_an_uninterrupted_one(tmp_path, write_dataset):
    """At mask_rate 0.3 (10 predictions a sequence, the files hold 5); the uninterrupted run reads in 2 loader
    workers, the stopped one in the training process, then in 2 workers."""
    data = write_dataset(tmp_path / "data", [40, 40, 40], seq_len=32)
    settings = [*TINY, "--set", "steps=6", "--set", "checkpoint_every=3", "--set", "masking=dynamic",
                "--set", "mask_rate=0.3"]
    whole = pretrain("phase1", "--data", str(data), "--out", str(tmp_path / "whole"), *settings)
    assert whole.returncode == 0, whole.stderr
    assert "dynamic masking: 0.3 of each sequence's tokens, at most 10, single tokens" in whole.stderr
    args = ("phase1", "--data", str(data), "--out", str(tmp_path / "stopped"), *settings)
    first = pretrain(*args, "--set", "steps_this_run=2", "--set", "loader_workers=0")
    assert first.returncode == 0, first.stderr
    second = pretrain(*args)
    assert second.returncode == 0 and "resumed from" in second.stderr, second.stderr
    static = pretrain("phase1", "--data", str(data), "--out", str(tmp_path / "static"), *TINY, "--set", "steps=2")
    assert static.returncode == 0, static.stderr

    expected, resumed = metrics(tmp_path / "whole" / "phase1"), metrics(tmp_path / "stopped" / "phase1")
    assert [m["step"] for m in resumed] == list(range(1, 7))
    for a, b in zip(expected, resumed):
        for key in ("loss", "mlm_loss", "nsp_loss", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-7), (a["step"], key)
    assert metrics(tmp_path / "static" / "phase1")[0]["mlm_loss"] != expected[0]["mlm_loss"]  # the masks are others
