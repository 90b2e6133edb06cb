"""Stage hdf5: Google's instance algorithm (layout, NSP, masking, truncation, short sequences), NVIDIA's
layout, determinism across workers, whole-word masking, the vocabulary's own special ids, bring-your-own data."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from wiki2bert_core.errors import ConfigError
from wiki2bert_core.config import layered
from wiki2bert_core.errors import DataError
from wiki2bert_core.masking import Masking, MaskingVocab
from pipeline.stages.hdf5.instances import (FileDraws, InstancePlan, TokenizedDocuments, TokenRows, _truncate,
                                            make_instances, plan_instances, random_next_from_own_document)
from pipeline.stages.hdf5.stage import STAGE, Hdf5Config, Variant
from pipeline.tokenizer_files import lowercases
from pipeline.stages.hdf5.tokenize import TokenFiles, token_batches, tokenize_documents
from pipeline.tools.verify import verify_path
from wiki2bert_core.variant_dir import variant_dir_name
from wiki2bert_core.wordpiece import special_token_ids, wordpiece_tokenizer
from positional_tokens import PLACEHOLDER_IDS, SPECIALS, flat_documents, original_tokens, positional_vocab


def first_variant_dir_name(config: Hdf5Config) -> str:
    """The directory name of the config's first variant, for a vocabulary that does not lowercase."""
    v = config.variants[0]
    return variant_dir_name(v.max_seq_length, v.max_predictions_per_seq, config.masked_lm_prob, config.random_seed,
                            config.dupe_factor, config.whole_word_masking, lower_case=False)


@pytest.fixture(scope="module")
def positional():
    rnd = random.Random(1)
    docs = flat_documents([[rnd.randint(3, 30) for _ in range(rnd.randint(1, 20))] for _ in range(400)])
    vocab = positional_vocab(int(docs.ids[-1]) + 1)
    rng = np.random.default_rng(7)
    plan = plan_instances(docs, 128, 0.1, 5, rng)
    arrays = make_instances(TokenRows(np.pad(docs.ids, 128), 128), plan, Masking(vocab, 0.15, 20, False), rng,
                            FileDraws(rng))
    return docs, vocab, plan, arrays


def test_sequence_layout_and_truncation(positional):
    docs, vocab, plan, a = positional
    length = a["input_mask"].sum(axis=1)
    assert length.max() <= 128 and (a["input_mask"].astype(bool) == (np.arange(128) < length[:, None])).all()
    assert (a["input_ids"][:, 0] == vocab.cls_id).all()
    b_start = np.argmax(a["segment_ids"] == 1, axis=1)
    rows = np.arange(len(length))
    assert (a["input_ids"][rows, b_start - 1] == vocab.sep_id).all()
    assert (a["input_ids"][rows, length - 1] == vocab.sep_id).all()
    assert (b_start >= 3).all() and (b_start <= length - 2).all()  # A and B both have tokens
    in_b = (np.arange(128) >= b_start[:, None]) & (np.arange(128) < length[:, None])
    assert ((a["segment_ids"] == 1) == in_b).all()
    assert (a["input_ids"][np.arange(128) >= length[:, None]] == 0).all()
    truncated = (plan.a_len + plan.b_len) > 125
    assert truncated.any() and (length[truncated] == 128).all()
    for row in range(0, len(length), 37):
        tokens = original_tokens(a, row)
        seg_a, seg_b = tokens[1:b_start[row] - 1], tokens[b_start[row]:length[row] - 1]
        # each segment is one contiguous run of the shard (truncation only cuts its ends)
        assert (np.diff(seg_a) == 1).all() and (np.diff(seg_b) == 1).all()


def test_next_sentence_share_and_provenance(positional):
    docs, vocab, plan, a = positional
    doc_of_token = np.repeat(np.arange(len(docs.document_starts) - 1),
                             np.diff(docs.sentence_starts[docs.document_starts]))
    length = a["input_mask"].sum(axis=1)
    b_start = np.argmax(a["segment_ids"] == 1, axis=1)
    for row in range(len(length)):
        tokens = original_tokens(a, row) - 10
        doc_a, doc_b = doc_of_token[tokens[1]], doc_of_token[tokens[b_start[row]]]
        if a["next_sentence_labels"][row] == 0:
            assert doc_a == doc_b and tokens[b_start[row]] > tokens[b_start[row] - 2]
        else:
            assert doc_a != doc_b
    # Google's rule: random when the chunk has one sentence, else with probability 0.5
    multi_docs = flat_documents([[10] * 40 for _ in range(300)])
    rng = np.random.default_rng(3)
    multi_plan = plan_instances(multi_docs, 128, 0.0, 5, rng)
    doc_ends = multi_docs.sentence_starts[multi_docs.document_starts[1:]]
    single = np.isin(multi_plan.a_start + multi_plan.a_len, doc_ends)  # A ends the document: a one-sentence chunk
    assert (multi_plan.random_next[single] == 1).all()
    assert abs(multi_plan.random_next[~single].mean() - 0.5) < 0.02
    assert 0.5 < plan.random_next.mean() < 0.7


def test_masking_statistics(positional):
    docs, vocab, plan, a = positional
    length = a["input_mask"].sum(axis=1)
    used = a["masked_lm_positions"] != 0
    k = used.sum(axis=1)
    assert (k == np.minimum(20, np.maximum(1, np.rint(length * 0.15)))).all()
    assert abs(k.sum() / (length - 3).sum() - 0.15) < 0.01
    rows, slots = np.nonzero(used)
    positions = a["masked_lm_positions"][rows, slots]
    assert (np.diff(a["masked_lm_positions"], axis=1)[used[:, 1:]] > 0).all()  # sorted
    assert not np.isin(a["masked_lm_ids"][rows, slots], [vocab.cls_id, vocab.sep_id, 0, 1, 4]).any()
    b_start = np.argmax(a["segment_ids"] == 1, axis=1)
    assert (positions != b_start[rows] - 1).all() and (positions < length[rows] - 1).all()
    current, label = a["input_ids"][rows, positions], a["masked_lm_ids"][rows, slots]
    n = len(rows)
    assert n > 50_000
    assert abs((current == vocab.mask_id).sum() / n - 0.8) < 0.01
    assert abs((current == label).sum() / n - 0.1) < 0.01
    other = (current != vocab.mask_id) & (current != label)
    assert abs(other.sum() / n - 0.1) < 0.01
    assert not np.isin(current[other], [0, 1, 2, 3, 4, *PLACEHOLDER_IDS]).any()  # nor special tokens nor [unusedN]
    assert (a["input_ids"] == vocab.mask_id).sum() == (current == vocab.mask_id).sum()  # [MASK] only where masked


def test_random_next_never_labels_b_from_its_own_document():
    """In a shard of one document every "random" B comes from A's own document: those rows are labelled not
    random (NVIDIA's rule; Google's labels them random). Few documents: the rare same-document draws too."""
    one = flat_documents([[12] * 30])
    plan = plan_instances(one, 128, 0.1, 5, np.random.default_rng(1))
    assert len(plan) > 20 and plan.random_next.sum() == 0
    two = flat_documents([[12] * 30, [7] * 3])
    plan = plan_instances(two, 128, 0.1, 50, np.random.default_rng(1))
    assert plan.random_next.sum() > 0 and random_next_from_own_document(two, plan) == 0
    unlabelled = dataclasses.replace(plan, random_next=np.ones_like(plan.random_next))
    assert random_next_from_own_document(two, unlabelled) > 0  # the measure sees own-document B


def test_short_sequence_share():
    docs = flat_documents([[20] * 60 for _ in range(1000)])
    plan = plan_instances(docs, 128, 0.1, 5, np.random.default_rng(5))
    assert plan.document_rounds == 5000 and abs(plan.short_targets / plan.document_rounds - 0.1) < 0.02
    none = plan_instances(docs, 128, 0.0, 1, np.random.default_rng(5))
    always = plan_instances(docs, 128, 1.0, 1, np.random.default_rng(5))
    assert none.short_targets == 0 and always.short_targets == 1000
    assert (always.a_len + always.b_len).mean() < 0.7 * (none.a_len + none.b_len).mean()


def test_truncation_matches_google_loop():
    """Lengths after truncation equal those of Google's one-token-at-a-time loop."""
    rng = np.random.default_rng(0)
    a_len, b_len = rng.integers(1, 300, 2000), rng.integers(1, 300, 2000)
    plan = InstancePlan(np.zeros(2000, np.int64), a_len, np.full(2000, 300), b_len, np.zeros(2000, np.int8), 0, 0)
    _, new_a, _, new_b = _truncate(plan, 125, rng)
    for la, lb, na, nb in zip(a_len, b_len, new_a, new_b):
        while la + lb > 125:
            if la > lb:
                la -= 1
            else:
                lb -= 1
        assert (la, lb) == (na, nb)


def test_whole_word_masking(tmp_path, write_corpus, write_vocab):
    vocab_file = tmp_path / "vocab.txt"
    vocab = write_vocab(vocab_file)
    (tmp_path / "shard").mkdir()
    write_corpus(tmp_path / "shard" / "training_0000.txt", 150, suffix_share=0.6)
    tokenizer = wordpiece_tokenizer(vocab)
    docs = tokenize_documents(tmp_path / "shard" / "training_0000.txt", tokenizer, special_token_ids(vocab))
    masking = MaskingVocab.from_vocab(vocab)
    subword = masking.continues_word

    def split_words(wwm: bool) -> int:
        rng = np.random.default_rng(11)
        plan = plan_instances(docs, 128, 0.1, 3, rng)
        a = make_instances(TokenRows(np.pad(docs.ids, 128), 128), plan, Masking(masking, 0.15, 20, wwm), rng,
                           FileDraws(rng))
        split = 0
        length = a["input_mask"].sum(axis=1)
        b_start = np.argmax(a["segment_ids"] == 1, axis=1)
        expected = np.minimum(20, np.maximum(1, np.rint(length * 0.15)))
        k = (a["masked_lm_positions"] != 0).sum(axis=1)
        assert (k <= expected).all() and (k >= 1).all()
        for row in range(len(length)):
            tokens = original_tokens(a, row)
            masked = np.zeros(128, bool)
            masked[a["masked_lm_positions"][row][a["masked_lm_positions"][row] != 0]] = True
            for p in range(2, length[row] - 1):
                joined = subword[tokens[p]] and p != b_start[row] and tokens[p - 1] != masking.sep_id
                if joined and masked[p] != masked[p - 1]:
                    split += 1
        return split

    assert split_words(True) == 0
    assert split_words(False) > 100


def test_special_token_ids_come_from_the_vocabulary(tmp_path, run_hdf5_stage, write_corpus, write_vocab):
    """Google's ids ([UNK]=100, [CLS]=101, ...) are nowhere assumed: here [PAD] is 3, [CLS] 250, [SEP] 7, ..."""
    vocab_file = tmp_path / "vocab.txt"
    vocab = write_vocab(vocab_file, special_at={"[PAD]": 3, "[UNK]": 100, "[CLS]": 250, "[SEP]": 7, "[MASK]": 301})
    assert [vocab[t] for t in SPECIALS] == [3, 100, 250, 7, 301]
    (tmp_path / "shard").mkdir()
    write_corpus(tmp_path / "shard" / "training_0000.txt", 60)
    config = Hdf5Config(variants=[Variant(64, 10)], dupe_factor=3)
    out = run_hdf5_stage(tmp_path, tmp_path / "shard", vocab_file, config)
    variant = out / first_variant_dir_name(config)
    with h5py.File(variant / "training" / "training_0000.hdf5") as f:
        ids, length, positions = f["input_ids"][:], f["input_mask"][:].sum(axis=1), f["masked_lm_positions"][:]
        assert (ids[:, 0] == 250).all()
        assert (ids[np.arange(len(ids)), length - 1] == 7).all()
        rows, slots = np.nonzero(positions)
        assert 0.75 < (ids[rows, positions[rows, slots]] == 301).mean() < 0.85  # [MASK] is 301 here, not 103
        assert not np.isin(f["masked_lm_ids"][:][rows, slots], [3, 250, 7, 301]).any()
    report = verify_path(variant)
    assert report.ok, report.problems


def test_special_tokens_spelled_in_text_become_unk(tmp_path, write_vocab):
    vocab = write_vocab(tmp_path / "vocab.txt")
    tokenizer = wordpiece_tokenizer(vocab)
    tokenizer.add_special_tokens(["[CLS]", "[SEP]", "[MASK]", "[PAD]"])
    (tmp_path / "t.txt").write_text("w1 [SEP] w2 [MASK] .\nw3 .\n\n", encoding="utf-8")
    docs = tokenize_documents(tmp_path / "t.txt", tokenizer, special_token_ids(vocab))
    assert docs.ids.tolist() == [vocab[t] for t in ("w1", "[UNK]", "w2", "[UNK]", ".", "w3", ".")]


def test_nvidia_layout_and_determinism_across_workers(tmp_path, run_hdf5_stage, write_corpus, write_vocab):
    vocab_file = tmp_path / "vocab.txt"
    write_vocab(vocab_file)
    shard = tmp_path / "shard"
    shard.mkdir()
    for i, name in enumerate(["training_0000", "training_0001", "test_0000"]):
        write_corpus(shard / f"{name}.txt", 40, seed=i)
    (shard / "training_0002.txt").write_text("\n\n", encoding="utf-8")  # an empty shard gives an empty file
    config = Hdf5Config(variants=[Variant(64, 10), Variant(128, 20)], dupe_factor=2)
    one = run_hdf5_stage(tmp_path, shard, vocab_file, config, workers=1, out_name="one")
    two = run_hdf5_stage(tmp_path, shard, vocab_file, config, workers=2, out_name="two")
    other_seed = run_hdf5_stage(tmp_path, shard, vocab_file, dataclasses.replace(config, random_seed=1),
                                out_name="seed")

    def digests(root: Path) -> dict[str, str]:
        return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file()}

    files = digests(one)
    assert files == digests(two)
    assert not (tmp_path / "cache-one" / "tokens").exists()
    name = first_variant_dir_name(config)
    assert name == "hdf5_lower_case_0_seq_len_64_max_pred_10_masked_lm_prob_0.15_random_seed_12345_dupe_factor_2"
    assert {f"{name}/training/training_0000.hdf5", f"{name}/training/training_0002.hdf5",
            f"{name}/test/test_0000.hdf5", f"{name}/vocab.txt", f"{name}/tokenizer.json",
            f"{name}/variant.json"} <= set(files)
    assert len(files) == 2 * 7  # each variant directory is self-contained: its vocabulary and tokenizer
    seed_name = name.replace("random_seed_12345", "random_seed_1")
    assert digests(other_seed)[f"{seed_name}/training/training_0000.hdf5"] != files[f"{name}/training/training_0000.hdf5"]
    expected = {"input_ids": ("int32", 64), "input_mask": ("int8", 64), "segment_ids": ("int8", 64),
                "masked_lm_positions": ("int32", 10), "masked_lm_ids": ("int32", 10), "next_sentence_labels": ("int8", None)}
    with h5py.File(one / name / "training" / "training_0000.hdf5") as f:
        assert set(f) == set(expected)
        n = len(f["next_sentence_labels"])
        assert n > 100
        for key, (dtype, width) in expected.items():
            assert f[key].dtype == np.dtype(dtype) and f[key].shape == ((n, width) if width else (n,))
            assert f[key].compression == "gzip"
    with h5py.File(one / name / "training" / "training_0002.hdf5") as f:
        assert f["input_ids"].shape == (0, 64)
    assert verify_path(one).ok


def test_token_rows_reach_past_both_ends_of_the_ids():
    ids = np.arange(1, 11, dtype=np.uint16)
    rows = TokenRows(np.pad(ids, 4), 4).take(np.array([-4, -2, 0, 7, 10]))
    assert rows.tolist() == [[0, 0, 0, 0], [0, 0, 1, 2], [1, 2, 3, 4], [8, 9, 10, 0], [0, 0, 0, 0]]


def test_a_window_read_with_a_margin_is_its_ids_between_zeros(tmp_path):
    files = TokenFiles(tmp_path / "tokens")
    files.write([(np.arange(1, 8, dtype=np.uint16), np.array([3, 4]), np.array([1, 1]))], np.uint16)
    docs = files.read(1, 2, margin=3)
    assert docs.ids.tolist() == [4, 5, 6, 7]
    assert docs.ids.base.tolist() == [0, 0, 0, 4, 5, 6, 7, 0, 0, 0]


def test_lowercasing_is_read_from_the_normalizer_objects():
    from tokenizers import Tokenizer, models, normalizers

    def tokenizer(normalizer):
        t = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
        if normalizer is not None:
            t.normalizer = normalizer
        return t
    assert lowercases(tokenizer(normalizers.BertNormalizer(lowercase=True)))
    assert not lowercases(tokenizer(normalizers.BertNormalizer(lowercase=False)))
    assert lowercases(tokenizer(normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase()])))
    assert not lowercases(tokenizer(normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()])))
    assert not lowercases(tokenizer(None))


def test_config_is_checked():
    with pytest.raises(ConfigError, match="max_predictions_per_seq"):
        layered(Hdf5Config, [({"variants": [{"max_seq_length": 128, "max_predictions_per_seq": 200}]}, "t")])
    with pytest.raises(ConfigError, match="masked_lm_prob"):
        Hdf5Config(masked_lm_prob=1.5)
    with pytest.raises(ConfigError, match="twice"):
        Hdf5Config(variants=[Variant(128, 20), Variant(128, 20)])


def test_no_text_is_an_error(tmp_path, run_hdf5_stage, write_vocab):
    vocab_file = tmp_path / "vocab.txt"
    write_vocab(vocab_file)
    (tmp_path / "shard").mkdir()
    with pytest.raises(DataError, match="no training_"):
        run_hdf5_stage(tmp_path, tmp_path / "shard", vocab_file, Hdf5Config())
    (tmp_path / "shard" / "training_0000.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="no text"):
        run_hdf5_stage(tmp_path, tmp_path / "shard", vocab_file, Hdf5Config(), out_name="again")
    assert not (tmp_path / "cache-again" / "tokens").exists()  # the token cache goes, also on failure


def test_bring_your_own_text_and_vocab(tmp_path, write_corpus, write_vocab):
    vocab_file = tmp_path / "vocab.txt"
    vocab = write_vocab(vocab_file)
    text = tmp_path / "my_corpus.txt"
    write_corpus(text, 30)
    text.write_text(text.read_text(encoding="utf-8").replace("w1", "W1"), encoding="utf-8")  # uppercase words
    runner = CliRunner()
    out = tmp_path / "out"
    args = ["hdf5", "--input", str(text), "--vocab", str(vocab_file), "--out", str(out), "--lowercase",
            "--set", "hdf5.variants=[{max_seq_length: 64, max_predictions_per_seq: 10}]", "--set", "hdf5.dupe_factor=2",
            "--quiet"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    variant = out / "hdf5_lower_case_1_seq_len_64_max_pred_10_masked_lm_prob_0.15_random_seed_12345_dupe_factor_2"
    with h5py.File(variant / "training" / "training_my_corpus.hdf5") as f:
        assert vocab["[UNK]"] not in f["input_ids"][:]  # "W1..." was lowercased to known words
    result = runner.invoke(app, ["verify", str(out)])
    assert result.exit_code == 0, result.output
    assert "instances" in result.output and "OK: no problems" in result.output
    assert runner.invoke(app, args).exit_code != 0  # --out exists: refuses without --force
    assert runner.invoke(app, args + ["--force"]).exit_code == 0
    bad = runner.invoke(app, args + ["--force", "--set", "hdf5.dupe_factor=zero"])
    assert bad.exit_code != 0 and isinstance(bad.exception, ConfigError)
    corpus_dir = tmp_path / "corpus"  # a directory of *.txt files: one HDF5 file each
    corpus_dir.mkdir()
    for name in ("a.txt", "b.txt"):
        write_corpus(corpus_dir / name, 5, seed=len(name) + ord(name[0]))
    dir_args = ["hdf5", "--input", str(corpus_dir), "--vocab", str(vocab_file), "--out", str(tmp_path / "dir_out"),
                "--set", "hdf5.dupe_factor=1", "--quiet"]
    assert runner.invoke(app, dir_args).exit_code == 0
    assert sorted(p.name for p in (tmp_path / "dir_out").rglob("*.hdf5")) == ["training_a.hdf5", "training_a.hdf5",
                                                                             "training_b.hdf5", "training_b.hdf5"]


def test_token_files_windows(tmp_path, write_corpus, write_vocab):
    """A shard's tokens on disk read back a window of whole documents at a time, each window within the limit."""
    vocab = write_vocab(tmp_path / "vocab.txt")
    write_corpus(tmp_path / "t.txt", 80, seed=3)
    tokenizer = wordpiece_tokenizer(vocab)
    whole = tokenize_documents(tmp_path / "t.txt", tokenizer, special_token_ids(vocab))
    files = TokenFiles(tmp_path / "tokens")
    counts = files.write(token_batches(tmp_path / "t.txt", tokenizer, special_token_ids(vocab)), whole.ids.dtype)
    assert counts == {"documents": 80, "sentences": len(whole.sentence_starts) - 1, "input_tokens": len(whole.ids)}
    assert files.windows(len(whole.ids)) == [(0, 80)]
    windows = files.windows(500)
    assert len(windows) > 3 and windows[0][0] == 0 and windows[-1][1] == 80
    assert all(a[1] == b[0] for a, b in zip(windows, windows[1:]))
    for first, end in windows:
        part = files.read(first, end)
        t0 = whole.sentence_starts[whole.document_starts[first]]
        t1 = whole.sentence_starts[whole.document_starts[end]]
        assert len(part.ids) <= 500 or end - first == 1
        assert part.ids.tolist() == whole.ids[t0:t1].tolist() and part.ids.dtype == whole.ids.dtype
        assert part.sentence_starts.tolist() == (whole.sentence_starts[whole.document_starts[first]:
                                                 whole.document_starts[end] + 1] - t0).tolist()
        assert part.document_starts.tolist() == (whole.document_starts[first:end + 1]
                                                 - whole.document_starts[first]).tolist()


def test_a_shard_above_the_window_is_made_window_by_window(tmp_path, run_hdf5_stage, write_corpus, write_vocab):
    """Below the window the bytes do not depend on the window size; above it the file is still complete and valid,
    every document made into instances in each round (random next sentences then come from the same window)."""
    vocab_file = tmp_path / "vocab.txt"
    write_vocab(vocab_file)
    (tmp_path / "shard").mkdir()
    write_corpus(tmp_path / "shard" / "training_0000.txt", 120, seed=5)
    config = Hdf5Config(variants=[Variant(64, 10)], dupe_factor=2)
    runs = {name: run_hdf5_stage(tmp_path, tmp_path / "shard", vocab_file,
                                 dataclasses.replace(config, window_tokens=window), out_name=name)
            for name, window in (("default", config.window_tokens), ("huge", 10 ** 12), ("small", 1500))}
    variant = first_variant_dir_name(config)
    files = {name: out / variant / "training" / "training_0000.hdf5" for name, out in runs.items()}
    assert files["default"].read_bytes() == files["huge"].read_bytes()
    assert files["small"].read_bytes() != files["default"].read_bytes()
    report = verify_path(runs["small"] / variant)
    assert report.ok, report.problems
    summaries = {name: json.loads((out / variant / "variant.json").read_text()) for name, out in runs.items()}
    with h5py.File(files["small"]) as small, h5py.File(files["default"]) as default:
        assert len(small["input_ids"]) == summaries["small"]["training_instances"]
        assert abs(len(small["input_ids"]) - len(default["input_ids"])) < 0.05 * len(default["input_ids"])
