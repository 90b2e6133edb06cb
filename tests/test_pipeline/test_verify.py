"""`pipeline verify`: passes the stage's output with the right statistics, and catches each kind of damage."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.stages.hdf5.stage import Hdf5Config, Variant
from pipeline.tools.verify import verify_path
from wiki2bert_core.variant_dir import DOC_SENTENCES, SEGMENT_PAIR


@pytest.fixture(scope="module")
def variant_dir(tmp_path_factory, run_hdf5_stage, write_corpus, write_vocab) -> Path:
    tmp = tmp_path_factory.mktemp("verify")
    vocab_file = tmp / "vocab.txt"
    write_vocab(vocab_file)
    (tmp / "shard").mkdir()
    write_corpus(tmp / "shard" / "training_0000.txt", 120)
    out = run_hdf5_stage(tmp, tmp / "shard", vocab_file, Hdf5Config(variants=[Variant(64, 10)], dupe_factor=3))
    return next(out.iterdir())


@pytest.fixture
def damaged(variant_dir, tmp_path):
    """A copy of the variant directory; returns (its training file, the vocab)."""
    copy = tmp_path / variant_dir.name
    shutil.copytree(variant_dir, copy)
    vocab = {t: i for i, t in enumerate((copy / "vocab.txt").read_text(encoding="utf-8").split("\n")) if t}
    return copy / "training" / "training_0000.hdf5", vocab


def test_valid_output_passes_with_statistics(variant_dir):
    report = verify_path(variant_dir)
    assert report.ok, report.problems
    stats = report.stats[(64, 10, "segment-pair")]
    with h5py.File(variant_dir / "training" / "training_0000.hdf5") as f:
        assert stats.instances == len(f["input_ids"]) > 500
    assert abs(stats.masked / stats.eligible - 0.15 * 64 / 61) < 0.02
    assert abs(stats.masked_as_mask / stats.masked - 0.8) < 0.03
    assert abs(stats.masked_same / stats.masked - 0.1) < 0.03
    assert abs(stats.masked_other / stats.masked - 0.1) < 0.03
    assert 0.4 < stats.random_next / stats.instances < 0.7
    assert stats.recorded_instances == stats.instances and stats.random_next_own_document == 0
    result = CliRunner().invoke(app, ["verify", str(variant_dir)])
    assert result.exit_code == 0 and "OK: no problems" in result.output and "NSP random next" in result.output
    assert "random next from A's own document  0.0000 (0 rows; from variant.json)" in result.output


def test_random_next_from_own_document_is_reported(damaged):
    file, _ = damaged
    params_file = file.parent.parent / "variant.json"
    params = json.loads(params_file.read_text())
    params["random_next_own_document"]["training/training_0000.hdf5"] = 7
    params_file.write_text(json.dumps(params))
    assert verify_path(file.parent.parent).stats[(64, 10, "segment-pair")].random_next_own_document == 7
    del params["random_next_own_document"]
    params_file.write_text(json.dumps(params))
    result = CliRunner().invoke(app, ["verify", str(file.parent.parent)])
    assert "random next from A's own document  unknown" in result.output


def replace(f: h5py.File, name: str, values: np.ndarray) -> None:
    del f[name]
    f.create_dataset(name, data=values, compression="gzip")


def set_value(f: h5py.File, name: str, index, value) -> None:
    values = f[name][:]
    values[index] = value
    f[name][...] = values


def layout(f: h5py.File) -> tuple[np.ndarray, np.ndarray]:
    """Each row's real length and the position where segment B starts."""
    return f["input_mask"][:].sum(axis=1), np.argmax(f["segment_ids"][:] == 1, axis=1)


def wrong_dtype(f, vocab):
    replace(f, "input_ids", f["input_ids"][:].astype(np.float32))


def missing_dataset(f, vocab):
    del f["next_sentence_labels"]


def wrong_shape(f, vocab):
    replace(f, "masked_lm_ids", f["masked_lm_ids"][:, :5])


def input_ids_of_another_width(f, vocab):
    replace(f, "input_ids", f["input_ids"][:, :-2])


def id_out_of_vocab(f, vocab):
    set_value(f, "input_ids", (3, 2), len(vocab) + 5)


def no_cls(f, vocab):
    set_value(f, "input_ids", (2, 0), vocab["w5"])


def no_middle_sep(f, vocab):
    set_value(f, "input_ids", (6, layout(f)[1][6] - 1), vocab["w5"])


def no_last_sep(f, vocab):
    set_value(f, "input_ids", (7, layout(f)[0][7] - 1), vocab["w5"])


def unsorted_positions(f, vocab):
    set_value(f, "masked_lm_positions", (5, [0, 1]), f["masked_lm_positions"][5][[1, 0]])


def mask_on_cls(f, vocab):
    set_value(f, "masked_lm_positions", (8, 0), 0)


def mask_on_sep(f, vocab):
    positions = f["masked_lm_positions"][4]
    positions[0] = layout(f)[1][4] - 1
    set_value(f, "masked_lm_positions", 4, np.sort(positions))


def mask_on_padding(f, vocab):
    set_value(f, "masked_lm_positions", (int(np.argmin(layout(f)[0])), 9), 63)


def masked_id_out_of_vocab(f, vocab):
    set_value(f, "masked_lm_ids", (1, 0), -3)


def segment_ids_out_of_order(f, vocab):
    set_value(f, "segment_ids", (9, 1), 1)


def input_mask_with_hole(f, vocab):
    set_value(f, "input_mask", (10, 2), 0)


def special_token_inside(f, vocab):
    unmasked = np.setdiff1d(np.arange(1, 5), f["masked_lm_positions"][11])[0]
    set_value(f, "input_ids", (11, unmasked), vocab["[SEP]"])


def too_few_predictions(f, vocab):
    set_value(f, "masked_lm_positions", (12, slice(1, None)), 0)
    set_value(f, "masked_lm_ids", (12, slice(1, None)), 0)


def bad_nsp_label(f, vocab):
    set_value(f, "next_sentence_labels", 0, 2)


DAMAGE = {  # damage(open file, vocab) -> the message verify must give
    wrong_dtype: "input_ids: dtype float32, expected integers (int32)",
    missing_dataset: "missing dataset next_sentence_labels",
    wrong_shape: "masked_lm_ids: shape",
    input_ids_of_another_width: "input_ids: shape (",
    id_out_of_vocab: "input_ids outside the vocabulary",
    no_cls: "input_ids[0] is not [CLS]",
    no_middle_sep: "no [SEP] at the end of segment A",
    no_last_sep: "no [SEP] at the last real token",
    unsorted_positions: "masked_lm_positions not sorted",
    mask_on_cls: "has a 0 ([CLS]) before a later masked position",
    mask_on_sep: "masked position on [SEP]",
    mask_on_padding: "masked position outside the real tokens",
    masked_id_out_of_vocab: "masked_lm_ids outside the vocabulary",
    segment_ids_out_of_order: "segment_ids not 0s then 1s",
    input_mask_with_hole: "input_mask is not 1s followed by 0s",
    special_token_inside: "special token inside a segment",
    too_few_predictions: "number of masked positions is not",
    bad_nsp_label: "next_sentence_labels other than 0 and 1",
}


@pytest.mark.parametrize("damage", list(DAMAGE), ids=lambda fn: fn.__name__)
def test_damage_is_reported(damaged, damage):
    path, vocab = damaged
    with h5py.File(path, "a") as f:
        damage(f, vocab)
    report = verify_path(path.parent.parent)
    assert not report.ok
    assert any(DAMAGE[damage] in p and str(path) in p for p in report.problems), report.problems


def test_truncated_and_foreign_files_are_reported_not_raised(damaged):
    path, _ = damaged
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    (path.parent / "notes.h5").write_text("not hdf5", encoding="utf-8")
    result = CliRunner().invoke(app, ["verify", str(path.parent.parent)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)  # a report, not a traceback
    assert f"{path}: cannot read the file" in result.output
    assert "notes.h5: cannot read the file" in result.output


def test_vocab_from_option_and_missing_vocab(damaged, tmp_path, write_vocab):
    path, _ = damaged
    lone = tmp_path / "lone" / "a" / "b" / "c.hdf5"
    lone.parent.mkdir(parents=True)
    shutil.copyfile(path, lone)
    assert any("no vocab.txt" in p for p in verify_path(lone).problems)
    assert verify_path(lone, path.parent.parent / "vocab.txt").ok
    small = tmp_path / "small.txt"
    write_vocab(small, words=20)
    assert any("input_ids outside the vocabulary" in p for p in verify_path(lone, small).problems)
    empty = tmp_path / "empty"
    empty.mkdir()
    report = verify_path(empty)
    assert not report.ok and "no .hdf5/.h5 files" in report.problems[0]


@pytest.fixture(scope="module")
def doc_sentences_dir(tmp_path_factory, run_hdf5_stage, write_corpus, write_vocab) -> Path:
    tmp = tmp_path_factory.mktemp("verify_doc")
    vocab_file = tmp / "vocab.txt"
    write_vocab(vocab_file)
    (tmp / "shard").mkdir()
    write_corpus(tmp / "shard" / "training_0000.txt", 120)
    config = Hdf5Config(variants=[Variant(64, 10, DOC_SENTENCES)], dupe_factor=3)
    return next(run_hdf5_stage(tmp, tmp / "shard", vocab_file, config).iterdir())


def test_doc_sentences_pass_with_statistics(doc_sentences_dir):
    report = verify_path(doc_sentences_dir)
    assert report.ok, report.problems
    stats = report.stats[(64, 10, DOC_SENTENCES)]
    assert stats.instances > 300 and stats.random_next == 0
    mean_length = stats.real_tokens / stats.instances
    assert abs(stats.masked / stats.eligible - 0.15 * mean_length / (mean_length - 2)) < 0.02  # all but [CLS] [SEP]
    result = CliRunner().invoke(app, ["verify", str(doc_sentences_dir)])
    assert result.exit_code == 0 and "seq_len 64, max_pred 10, doc-sentences: 1 file" in result.output
    assert "segment ids and NSP labels 0" in result.output and "NSP random next" not in result.output


def doc_segment_id(f, vocab):
    set_value(f, "segment_ids", (3, 2), 1)


def doc_nsp_label(f, vocab):
    set_value(f, "next_sentence_labels", 4, 1)


def doc_sep_inside(f, vocab):
    unmasked = np.setdiff1d(np.arange(1, 5), f["masked_lm_positions"][5])[0]
    set_value(f, "input_ids", (5, unmasked), vocab["[SEP]"])


def doc_mask_on_sep(f, vocab):
    positions = f["masked_lm_positions"][6]
    positions[-1] = f["input_mask"][6].sum() - 1
    set_value(f, "masked_lm_positions", 6, positions)


DOC_DAMAGE = {
    doc_segment_id: "segment_ids not 0 (doc-sentences: one segment)",
    doc_nsp_label: "next_sentence_labels not 0 (doc-sentences: no next sentence)",
    doc_sep_inside: "special token inside a segment",
    doc_mask_on_sep: "masked position on [SEP]",
}


@pytest.mark.parametrize("damage", list(DOC_DAMAGE), ids=lambda fn: fn.__name__)
def test_doc_sentences_damage_is_reported(doc_sentences_dir, tmp_path, damage):
    copy = tmp_path / doc_sentences_dir.name
    shutil.copytree(doc_sentences_dir, copy)
    path = copy / "training" / "training_0000.hdf5"
    vocab = {t: i for i, t in enumerate((copy / "vocab.txt").read_text(encoding="utf-8").split("\n")) if t}
    with h5py.File(path, "a") as f:
        damage(f, vocab)
    report = verify_path(copy)
    assert not report.ok
    assert any(DOC_DAMAGE[damage] in p and str(path) in p for p in report.problems), report.problems


def test_rows_are_checked_as_the_recorded_kind(doc_sentences_dir, variant_dir, tmp_path):
    """Files of one kind recorded as the other are wrong: pairs have a segment B, doc-sentences have none."""
    for source, kind, message in ((doc_sentences_dir, SEGMENT_PAIR, "no segment B"),
                                  (variant_dir, DOC_SENTENCES, "segment_ids not 0 (doc-sentences")):
        copy = tmp_path / source.name
        shutil.copytree(source, copy)
        record = json.loads((copy / "variant.json").read_text())
        (copy / "variant.json").write_text(json.dumps({**record, "sequence_kind": kind}))
        assert any(message in p for p in verify_path(copy).problems)
