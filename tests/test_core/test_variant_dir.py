"""wiki2bert_core/variant_dir.py: which files are the training and the held-out ones in a variant directory and in
NVIDIA's flat directories, where the vocabulary is, which directory a file belongs to, variant.json written and read
back."""
from __future__ import annotations

import dataclasses
import json

import pytest

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.variant_dir import (VariantParams, data_dir_of, find_vocab_file, held_out_files, held_out_split,
                                        is_variant_dir, read_params, read_record, training_files, variant_dir_name,
                                        write_variant_files)

PARAMS = VariantParams(max_seq_length=128, max_predictions_per_seq=20, masked_lm_prob=0.15, dupe_factor=5,
                       short_seq_prob=0.1, random_seed=12345, whole_word_masking=False, lower_case=True,
                       vocab_size=60, special_token_ids={"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4})


def touch(*paths):
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")


def test_a_variant_directory_trains_on_its_training_split_and_holds_out_its_test_split(tmp_path):
    variant = tmp_path / "variant"
    touch(variant / "training" / "training_0001.hdf5", variant / "training" / "training_0000.hdf5",
          variant / "training" / "notes.txt", variant / "test" / "test_0000.h5", variant / "stray.hdf5")
    assert is_variant_dir(variant)
    assert training_files(variant) == [variant / "training" / "training_0000.hdf5",
                                       variant / "training" / "training_0001.hdf5"]
    assert held_out_split(variant) == held_out_files(variant) == [variant / "test" / "test_0000.h5"]
    assert data_dir_of(variant / "training" / "training_0000.hdf5") == variant
    assert data_dir_of(variant / "test" / "test_0000.h5") == variant


def test_a_variant_directory_without_a_test_split_has_nothing_held_out(tmp_path):
    variant = tmp_path / "variant"
    touch(variant / "training" / "training_0000.hdf5")
    (variant / "test").mkdir()
    assert held_out_split(variant) == []  # training runs without evaluation
    with pytest.raises(ConfigError, match=r"variant/test: no HDF5 files \(\*\.hdf5\) to evaluate on"):
        held_out_files(variant)  # named for evaluation, it must have some


def test_a_flat_directory_is_both_training_and_held_out_files_but_has_no_split(tmp_path):
    flat = tmp_path / "nvidia"
    touch(flat / "part_1.hdf5", flat / "part_0.hdf5")
    assert not is_variant_dir(flat)
    assert training_files(flat) == held_out_files(flat) == [flat / "part_0.hdf5", flat / "part_1.hdf5"]
    assert held_out_split(flat) == []  # a training run on it evaluates only on eval_data
    assert data_dir_of(flat / "part_0.hdf5") == flat
    assert read_params(flat) is None and read_record(flat) is None  # the shapes come from the files
    with pytest.raises(ConfigError, match="nvidia: no vocab.txt in this data directory; pass --vocab DIR"):
        find_vocab_file(flat)


def test_an_explicit_vocabulary_beats_the_directorys_own(tmp_path):
    variant, other = tmp_path / "variant", tmp_path / "other"
    touch(variant / "vocab.txt", other / "vocab.txt", variant / "training" / "training_0000.hdf5")
    assert find_vocab_file(variant) == variant / "vocab.txt"
    assert find_vocab_file(variant, vocab_dir=other) == other / "vocab.txt"
    with pytest.raises(ConfigError, match="empty/vocab.txt: not found; --vocab takes a directory"):
        find_vocab_file(variant, vocab_dir=tmp_path / "empty")


def test_a_vocabulary_other_than_the_one_the_data_records_is_refused(tmp_path, write_vocab_dir):
    variant = write_vocab_dir(tmp_path / "variant")  # 60 tokens
    touch(variant / "training" / "training_0000.hdf5")
    same = write_vocab_dir(tmp_path / "same")
    (same / "vocab.txt").write_text((same / "vocab.txt").read_text().replace("\n", "\r\n"))  # the same tokens
    assert find_vocab_file(variant, vocab_dir=same) == same / "vocab.txt"
    bigger = write_vocab_dir(tmp_path / "bigger", size=80)
    with pytest.raises(ConfigError) as refused:
        find_vocab_file(variant, vocab_dir=bigger)
    assert str(refused.value) == (f"--vocab {bigger / 'vocab.txt'}: differs from {variant / 'vocab.txt'}, the "
                                  f"vocabulary the data's token ids index (80 tokens against 60); leave out --vocab")
    reordered = write_vocab_dir(tmp_path / "reordered")
    lines = (reordered / "vocab.txt").read_text().splitlines()
    lines[6], lines[7] = lines[7], lines[6]
    (reordered / "vocab.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"reordered/vocab.txt: differs from .*variant/vocab.txt, the vocabulary "
                                          r"the data's token ids index \(line 7: 'w2' against 'w1'\)"):
        find_vocab_file(variant, vocab_dir=reordered)
    # a variant directory without its vocab.txt still records the vocabulary's size and special token ids
    (variant / "vocab.txt").unlink()
    write_variant_files(variant, tmp_path / "nothing", PARAMS, {})
    assert find_vocab_file(variant, vocab_dir=same) == same / "vocab.txt"
    with pytest.raises(ConfigError) as refused:
        find_vocab_file(variant, vocab_dir=bigger)
    assert str(refused.value) == (
        f"--vocab {bigger / 'vocab.txt'}: 80 tokens, special token ids {{'[PAD]': 0, '[UNK]': 1, '[CLS]': 2, "
        f"'[SEP]': 3, '[MASK]': 4}}, but {variant / 'variant.json'} records the data's vocabulary as 60 tokens, "
        f"special token ids {{'[PAD]': 0, '[UNK]': 1, '[CLS]': 2, '[SEP]': 3, '[MASK]': 4}}; pass the vocabulary "
        f"the data was made with")
    flat = tmp_path / "nvidia"  # no record: --vocab is the only source
    touch(flat / "part_0.hdf5")
    assert find_vocab_file(flat, vocab_dir=bigger) == bigger / "vocab.txt"


def test_missing_directories_are_one_line_config_errors(tmp_path):
    (tmp_path / "a-file").write_text("x")
    for rule in (training_files, held_out_files):
        with pytest.raises(ConfigError, match=r"missing: does not exist$"):
            rule(tmp_path / "missing")
        with pytest.raises(ConfigError, match=r"a-file: not a directory$"):
            rule(tmp_path / "a-file")
    (tmp_path / "empty" / "training").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"empty/training: no HDF5 files"):
        training_files(tmp_path / "empty")


def test_variant_json_holds_the_parameters_then_the_counts_and_reads_back(tmp_path, write_vocab_dir):
    vocab_dir = write_vocab_dir(tmp_path / "vocab")
    variant = tmp_path / PARAMS.dir_name
    variant.mkdir()
    write_variant_files(variant, vocab_dir, PARAMS, {"training_instances": 7, "files": {"training/a.hdf5": 7}})
    assert variant.name == ("hdf5_lower_case_1_seq_len_128_max_pred_20_masked_lm_prob_0.15_random_seed_12345_"
                            "dupe_factor_5")
    record = json.loads((variant / "variant.json").read_text())
    assert list(record)[:3] == ["max_seq_length", "max_predictions_per_seq", "masked_lm_prob"]
    assert record["training_instances"] == 7 and (variant / "vocab.txt").is_file()
    assert (variant / "tokenizer.json").is_file()
    assert read_params(variant) == PARAMS and read_record(variant) == record
    assert variant_dir_name(512, 80, 0.15, 1, 5, True, False).endswith("_dupe_factor_5_whole_word_mask")

    (variant / "variant.json").write_text(json.dumps({**record, "max_seq_length": "128"}))
    with pytest.raises(DataError, match=r"variant.json: max_seq_length is '128', expected int"):
        read_params(variant)
    (variant / "variant.json").write_text("[1, 2]")
    with pytest.raises(DataError, match=r"variant.json: expected a JSON object"):
        read_params(variant)


def test_the_tokenizer_kind_is_recorded_only_when_not_wordpiece(tmp_path):
    """A WordPiece variant's variant.json is as before tokenizer_kind and word_start existed (and one without them
    reads as WordPiece); a Unigram or BPE one records both, and they read back."""
    assert "tokenizer_kind" not in PARAMS.to_dict() and "word_start" not in PARAMS.to_dict()
    assert (PARAMS.tokenizer_kind, PARAMS.word_start) == ("wordpiece", "")
    unigram = dataclasses.replace(PARAMS, tokenizer_kind="unigram", word_start="▁",
                                  special_token_ids={"[PAD]": 1, "[UNK]": 3, "[CLS]": 0, "[SEP]": 2, "[MASK]": 4})
    record = unigram.to_dict()
    assert (record["tokenizer_kind"], record["word_start"]) == ("unigram", "▁")
    assert VariantParams.from_dict(json.loads(json.dumps(record)), tmp_path / "variant.json") == unigram
