"""pretrain/data/loader.py: NVIDIA-layout HDF5 files, checks before training, file split across ranks, order by seed and
epoch, exact mid-epoch resume, workers that open files lazily. The writers of vocabularies and data are fixtures in conftest.py."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.variant_dir import VariantParams, find_vocab_file, training_files
from pretrain.data.loader import BatchPlan, DataState, make_loader, model_inputs, open_data
from hdf5_edits import rechunk

VOCAB_SIZE = 60


def rows_of(plan: BatchPlan, batches: int) -> list[list[tuple[int, int]]]:
    out = []
    for (pieces, _), _ in zip(plan, range(batches)):
        out.append([(f, int(r)) for f, rows, _ in pieces for r in rows])
    return out


def test_the_vocabulary_is_the_data_directorys_own_or_the_one_passed(tmp_path, write_dataset):
    variant = write_dataset(tmp_path / "data", [4])
    assert find_vocab_file(variant) == variant / "vocab.txt"
    assert find_vocab_file(tmp_path, vocab_dir=variant) == variant / "vocab.txt"
    with pytest.raises(ConfigError, match="no vocab.txt in this data directory; pass --vocab DIR"):
        find_vocab_file(tmp_path)
    with pytest.raises(ConfigError, match="vocab.txt: not found"):
        find_vocab_file(variant, vocab_dir=tmp_path)


def test_bad_data_is_refused_with_one_line_naming_the_file(tmp_path, write_dataset):
    empty = tmp_path / "empty"
    (empty / "training").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"empty/training: no HDF5 files"):
        training_files(empty)

    variant = write_dataset(tmp_path / "a", [4, 4], seq_len=32)
    with pytest.raises(ConfigError, match=r"training_0000\.hdf5: sequences of length 32, but this phase trains on "
                                          r"seq_len 128"):
        open_data(variant, 128, VOCAB_SIZE)
    with pytest.raises(DataError, match=r"training_0000\.hdf5: input_ids holds token id \d+, outside the "
                                          r"vocabulary of 20 tokens"):
        open_data(variant, 32, 20)
    with pytest.raises(ConfigError, match=r"2 HDF5 file\(s\) for 3 data-parallel ranks"):
        open_data(variant, 32, VOCAB_SIZE, world_size=3)

    with h5py.File(variant / "training" / "training_0001.hdf5", "a") as f:
        del f["masked_lm_ids"]
    with pytest.raises(DataError, match=r"training_0001\.hdf5: not NVIDIA's BERT layout: missing dataset masked_lm_ids$"):
        open_data(variant, 32, VOCAB_SIZE)
    (variant / "training" / "training_0001.hdf5").write_bytes(b"not hdf5")
    with pytest.raises(DataError, match=r"training_0001\.hdf5: not a readable HDF5 file"):
        open_data(variant, 32, VOCAB_SIZE)


@pytest.mark.parametrize("dataset, width, message", [
    ("input_ids", 16, r"input_ids: shape \(4, 16\), but input_mask and segment_ids have \(4, 32\)"),
    ("segment_ids", 16, r"segment_ids: shape \(4, 16\), but input_ids and input_mask have \(4, 32\)"),
    ("masked_lm_ids", 3, r"masked_lm_ids: shape \(4, 3\), but masked_lm_positions has \(4, 5\)"),
])
def test_a_dataset_of_another_width_is_the_one_named(tmp_path, write_dataset, dataset, width, message):
    """input_ids of another width than input_mask and segment_ids was reported as input_mask's fault."""
    variant = write_dataset(tmp_path / "a", [4], seq_len=32, max_predictions=5)
    with h5py.File(variant / "training" / "training_0000.hdf5", "a") as f:
        values = f[dataset][:, :width]
        del f[dataset]
        f[dataset] = values
    with pytest.raises(DataError, match=rf"training_0000\.hdf5: not NVIDIA.s BERT layout: {message}$"):
        open_data(variant, None, VOCAB_SIZE)


def test_ranks_read_disjoint_files_in_an_order_set_by_seed_and_epoch(tmp_path, write_dataset):
    data = open_data(write_dataset(tmp_path, [3] * 7), 32, VOCAB_SIZE, world_size=2)
    plans = [BatchPlan(data, 2, rank=r, world_size=2, seed=5) for r in (0, 1)]
    for epoch in (0, 1):
        files = [set(p.epoch_files(epoch)) for p in plans]
        assert not files[0] & files[1] and files[0] | files[1] == set(range(7))
    assert [p.epoch_files(0) for p in plans] != [p.epoch_files(1) for p in plans]  # reshuffled each epoch
    assert plans[0].epoch_files(3) == BatchPlan(data, 2, rank=0, world_size=2, seed=5).epoch_files(3)
    assert plans[0].epoch_files(0) != BatchPlan(data, 2, rank=0, world_size=2, seed=6).epoch_files(0)


def test_an_epoch_reads_every_row_once_across_file_boundaries(tmp_path, write_dataset):
    data = open_data(write_dataset(tmp_path, [7, 5, 9]), 32, VOCAB_SIZE)
    plan = BatchPlan(data, 4, seed=1)
    batches = rows_of(plan, 8)  # 32 rows: one epoch of 21, then 11 of the next
    flat = [r for b in batches for r in b]
    assert sorted(flat[:21]) == sorted((f, r) for f, n in enumerate([7, 5, 9]) for r in range(n))
    assert any(len({f for f, _ in b}) == 2 for b in batches)  # some batch spans two files
    assert flat[21:] != flat[:11]  # the next epoch has another order


def test_resuming_from_a_saved_state_continues_with_the_same_batches(tmp_path, write_dataset):
    data = open_data(write_dataset(tmp_path, [7, 5, 9]), 32, VOCAB_SIZE)
    plan = BatchPlan(data, 4, seed=3)
    states, batches = [], []
    for (pieces, state), _ in zip(plan, range(12)):
        states.append(state)
        batches.append([(f, int(r)) for f, rows, _ in pieces for r in rows])
    for k in (2, 5, 6):  # mid-file, at the epoch end, in the next epoch
        resumed = BatchPlan(data, 4, seed=3, state=DataState.from_dict(states[k - 1]))
        assert rows_of(resumed, 12 - k) == batches[k:]
    with pytest.raises(DataError, match="is gone"):
        BatchPlan(data, 4, seed=3, state=DataState(0, ("missing.hdf5",), 0, 0))


def test_loader_batches_match_the_files_and_do_not_depend_on_workers(tmp_path, write_dataset, write_hdf5):
    variant = write_dataset(tmp_path, [6, 5])
    write_hdf5(variant / "training" / "training_0001.hdf5", 5, dtype=np.int16, labels_2d=True, seed=1)
    data = open_data(variant, 32, VOCAB_SIZE)
    files = [h5py.File(f.path, "r") for f in data.files]  # handles open in the parent while workers fork
    try:
        expected = {k: [f[k][()] for f in files] for k in ("input_ids", "segment_ids", "next_sentence_labels")}
        runs = []
        for workers in (0, 2):
            loader = make_loader(data, 3, VOCAB_SIZE, seed=7, workers=workers)
            runs.append([batch for batch, _ in zip(loader, range(6))])
        plan = BatchPlan(data, 3, seed=7)
        for (pieces, state), batch in zip(plan, runs[1]):
            assert batch["data_state"] == state and batch["problem"] == ""
            want = np.concatenate([expected["input_ids"][f][rows] for f, rows, _ in pieces])
            assert batch["input_ids"].dtype == torch.int64 and np.array_equal(batch["input_ids"].numpy(), want)
            assert batch["next_sentence_labels"].shape == (3,)
        for a, b in zip(*runs):
            assert all(torch.equal(a[k], b[k]) for k in ("input_ids", "token_type_ids", "attention_mask",
                                                          "masked_lm_positions", "masked_lm_ids"))
    finally:
        for f in files:
            f.close()


def test_ids_beyond_the_vocabulary_past_the_checked_rows_name_file_and_row(tmp_path, write_dataset):
    variant = write_dataset(tmp_path, [300])
    path = variant / "training" / "training_0000.hdf5"
    with h5py.File(path, "a") as f:
        ids = f["input_ids"][()]
        ids[290, 1] = VOCAB_SIZE + 3
        f["input_ids"][...] = ids
    data = open_data(variant, 32, VOCAB_SIZE)  # only the first rows are checked up front
    problems = {batch["problem"] for batch, _ in zip(make_loader(data, 50, VOCAB_SIZE, workers=0), range(6))}
    assert problems - {""} == {f"{path}: row 290: input_ids holds a token id outside the vocabulary of 60 tokens"}


def test_a_file_whose_data_does_not_decompress_is_refused_with_one_line(tmp_path, write_dataset):
    variant = write_dataset(tmp_path, [40, 40], seq_len=32)
    path = variant / "training" / "training_0000.hdf5"
    with h5py.File(path, "r") as f:
        chunk = f["input_ids"].id.get_chunk_info(0)
    data = bytearray(path.read_bytes())
    data[chunk.byte_offset:chunk.byte_offset + chunk.size] = b"\xff" * chunk.size
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"training_0000\.hdf5: cannot read its datasets .*damaged") as e:
        open_data(variant, 32, VOCAB_SIZE)
    assert "\n" not in str(e.value)


def test_a_damaged_chunk_past_the_checked_rows_is_one_problem_line_not_a_crash(tmp_path, write_dataset):
    variant = write_dataset(tmp_path, [400])
    path = variant / "training" / "training_0000.hdf5"
    rechunk(path, 50)
    with h5py.File(path, "r") as f:
        chunk = f["segment_ids"].id.get_chunk_info(7)  # rows 350..399, past the rows checked before training
    data = bytearray(path.read_bytes())
    data[chunk.byte_offset:chunk.byte_offset + chunk.size] = b"\xff" * chunk.size
    path.write_bytes(bytes(data))
    opened = open_data(variant, 32, VOCAB_SIZE)
    for workers in (0, 1):
        batch = next(iter(make_loader(opened, 50, VOCAB_SIZE, workers=workers)))
        assert batch["problem"].startswith(f"{path}: cannot read its datasets (") and "damaged" in batch["problem"]
        assert "\n" not in batch["problem"] and set(batch) == {"problem", "data_state"}


@pytest.mark.parametrize("key, value, message", [
    ("masked_lm_positions", 32, "masked_lm_positions holds a position outside the sequence of 32 tokens"),
    ("masked_lm_positions", -1, "masked_lm_positions holds a position outside the sequence of 32 tokens"),
    ("segment_ids", 2, "segment_ids holds a value other than 0 or 1"),
    ("next_sentence_labels", 7, "next_sentence_labels holds a value other than 0 or 1"),
])
def test_values_the_model_cannot_take_past_the_checked_rows_name_file_and_row(tmp_path, key, value, message, write_dataset):
    variant = write_dataset(tmp_path, [300])
    path = variant / "training" / "training_0000.hdf5"
    with h5py.File(path, "a") as f:
        f[key][290] = value
    data = open_data(variant, 32, VOCAB_SIZE)  # only the first rows are checked up front
    problems = {batch["problem"] for batch, _ in zip(make_loader(data, 50, VOCAB_SIZE, workers=0), range(6))}
    assert problems - {""} == {f"{path}: row 290: {message}"}
    with h5py.File(path, "a") as f:
        f[key][3] = value
    with pytest.raises(DataError, match=rf"training_0000\.hdf5: row 3: {message} \({value}\)$"):
        open_data(variant, 32, VOCAB_SIZE)


def test_the_shapes_come_from_variant_json_else_from_the_files(tmp_path, write_dataset, write_hdf5):
    variant = write_dataset(tmp_path / "a", [4, 4], seq_len=32, max_predictions=5)
    data = open_data(variant, None, VOCAB_SIZE)  # no variant.json: the files'
    assert (data.seq_len, data.max_predictions, data.data_dir) == (32, 5, variant)
    params = VariantParams(32, 5, 0.15, 5, 0.1, 12345, False, False, VOCAB_SIZE, {"[PAD]": 0})
    (variant / "variant.json").write_text(json.dumps(dataclasses.asdict(params)))
    assert open_data(variant, None, VOCAB_SIZE).seq_len == 32
    other = dataclasses.replace(params, max_seq_length=64)
    (variant / "variant.json").write_text(json.dumps(dataclasses.asdict(other)))
    with pytest.raises(DataError, match=r"training_0000\.hdf5: 32 tokens and 5 masked positions per sample, but "
                                        r".*variant\.json says 64 and 5"):
        open_data(variant, None, VOCAB_SIZE)

    flat = tmp_path / "flat"
    write_hdf5(flat / "part_0.hdf5", 4, 32, 5)
    write_hdf5(flat / "part_1.hdf5", 4, 64, 10)
    with pytest.raises(DataError, match=r"part_1\.hdf5: 64 tokens and 10 masked positions per sample, other files "
                                        r"have 32 and 5; mixed HDF5 variants"):
        open_data(flat, None, VOCAB_SIZE)


def test_model_inputs_are_the_batch_without_its_position_and_a_problem_is_one_error(tmp_path, write_dataset):
    data = open_data(write_dataset(tmp_path, [6]), 32, VOCAB_SIZE)
    batch = next(iter(make_loader(data, 3, VOCAB_SIZE, workers=0)))
    inputs, state = model_inputs(batch)
    assert state == batch["data_state"] and set(inputs) == set(batch) - {"data_state", "problem"}
    assert all(isinstance(v, torch.Tensor) for v in inputs.values())
    with pytest.raises(DataError, match=r"^x\.hdf5: cannot read its datasets$"):
        model_inputs({"data_state": state, "problem": "x.hdf5: cannot read its datasets"})
