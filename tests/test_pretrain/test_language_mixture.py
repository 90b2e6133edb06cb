"""Data of several languages in pretraining: a phase's own mixture (language_alpha, language_weights) read from the
same files, deterministic and resumable on any number of ranks (pretrain/data/loader.py), held-out figures per
language (evaluate.py), their figure (`pretrain plot`)."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.mixture import language_shares
from wiki2bert_core.variant_dir import held_out_files
from pretrain.config import model_config
from pretrain.data.loader import BatchPlan, DataState, open_data, redistribute
from pretrain.model.bert.model import BertForPreTraining
from pretrain.run.evaluate import HeldOut, evaluate
from pretrain.tools.plots import plot_run
from language_variants import FILES, SIZES, VOCAB_SIZE, write_language_variant


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, write_vocab_dir, write_hdf5) -> Path:
    return write_language_variant(tmp_path_factory.mktemp("data") / "fi+hu" / "hdf5" / "seq_len_32",
                                  write_vocab_dir(tmp_path_factory.mktemp("vocab") / "vocab"), write_hdf5)


def read_epoch(data, world_size: int = 1, micro_batch: int = 4) -> list[tuple[str, int]]:
    """(file, row) of every read of epoch 0, all ranks."""
    reads = []
    for rank in range(world_size):
        for pieces, state in BatchPlan(data, micro_batch, rank, world_size, seed=7):
            if state["epoch"] > 0 and not any(epoch == 0 for _, _, epoch in pieces):
                break
            reads += [(data.files[f].path.name, int(r)) for f, rows, epoch in pieces if epoch == 0 for r in rows]
    return reads


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_a_phase_reads_each_language_by_its_own_alpha(mixed, alpha):
    """Each file's rows are read rate * rows times an epoch (a permutation cut short, or whole permutations and
    more), so that each language's share of the masked tokens read is size^alpha / sum (the file rows' rounding
    apart)."""
    data = open_data(mixed, 32, VOCAB_SIZE, language_alpha=alpha)
    expected = language_shares(SIZES, alpha)
    assert data.shares == pytest.approx(expected)
    record = json.loads((mixed / "variant.json").read_text())["languages"]
    held = language_shares({k: v["training_masked_tokens"] for k, v in record.items()}, 1.0)
    reads = Counter(name for name, _ in read_epoch(data))
    for f, rows in zip(data.files, data.epoch_rows):
        assert reads[f.path.name] == rows == round(expected[f.language] / held[f.language] * f.samples)
    read_share = {lang: sum(rows for f, rows in zip(data.files, data.epoch_rows) if f.language == lang) /
                  sum(FILES[lang]) * held[lang] for lang in FILES}
    total = sum(read_share.values())
    assert {lang: v / total for lang, v in read_share.items()} == pytest.approx(expected, abs=0.02)


def test_an_upsampled_language_reads_each_row_before_any_again_and_a_weight_0_leaves_it_out(mixed):
    data = open_data(mixed, 32, VOCAB_SIZE, language_alpha=0.0)  # fi: 1/5 of the rows, 1/2 of the reads
    reads = read_epoch(data)
    for f, rows in zip(data.files, data.epoch_rows):
        mine = [row for name, row in reads if name == f.path.name]
        assert rows > 2 * f.samples if f.language == "fi" else rows < f.samples
        physical = [row % f.samples for row in mine]
        assert all(Counter(physical[i:i + f.samples]) == Counter(range(f.samples))
                   for i in range(0, rows - f.samples + 1, f.samples))  # whole permutations first
    without = open_data(mixed, 32, VOCAB_SIZE, language_weights={"fi": 0})
    assert without.shares == {"fi": 0.0, "hu": 1.0}
    assert {name for name, _ in read_epoch(without)} == {f.path.name for f in without.files if f.language == "hu"}


@pytest.mark.parametrize("alpha", [1.0, 0.0])
def test_every_micro_batch_holds_each_language_by_its_share(mixed, alpha):
    """Read file after file, a micro-batch of a variant of several languages would hold one language for a whole
    file (the demo's model forgot each language as the next one's file came)."""
    data = open_data(mixed, 32, VOCAB_SIZE, language_alpha=alpha)
    language = {f.path.name: f.language for f in data.files}
    batches = []
    for pieces, state in BatchPlan(data, 8, seed=7):
        if state["epoch"] > 0:
            break
        batches.append(Counter(data.files[f].language for f, rows, _ in pieces for _ in rows))
    reads = Counter(language[name] for name, _ in read_epoch(data))
    for counts in batches:
        for lang in FILES:
            assert abs(counts[lang] - 8 * reads[lang] / sum(reads.values())) < 2


def test_a_mixture_resumes_exactly_and_on_another_number_of_ranks(mixed):
    data = open_data(mixed, 32, VOCAB_SIZE, language_alpha=0.0)
    plan = BatchPlan(data, 5, seed=3)
    states, batches = [], []
    for (pieces, state), _ in zip(plan, range(80)):
        states.append(state)
        batches.append([(f, int(r)) for f, rows, _ in pieces for r in rows])
    for k in (7, 33, 61):
        resumed = BatchPlan(data, 5, seed=3, state=DataState.from_dict(states[k - 1]))
        again = list(zip(resumed, range(80 - k)))
        assert [[(f, int(r)) for f, rows, _ in pieces for r in rows] for (pieces, _), _ in again] == batches[k:]
        assert [state for (_, state), _ in again] == states[k:]  # the checkpoints' positions too
    two = [BatchPlan(data, 5, rank, 2, seed=3) for rank in range(2)]
    saved = [DataState.from_dict(next(iter(p))[1]) for p in two]  # each rank after one micro-batch
    left = redistribute(saved, 3)
    assert sorted(name for s in left for name in s.files) == sorted(
        name for s in saved for name in s.files[s.files_done:])


@pytest.mark.parametrize("seed", range(6))
def test_every_rank_reads_every_language_with_as_many_files_as_ranks(mixed, seed):
    """Files dealt out to the ranks regardless of language could leave a rank one language for a whole epoch (fi's
    2 files on 2 ranks: a third of the seeds)."""
    data = open_data(mixed, 32, VOCAB_SIZE, language_alpha=0.0)  # half the reads each
    plans = [BatchPlan(data, 4, rank, 2, seed=seed) for rank in range(2)]
    for epoch in range(3):
        files = [plan.epoch_files(epoch) for plan in plans]
        assert sorted(i for mine in files for i in mine) == sorted(data.reading())
        for mine in files:
            assert Counter(data.files[i].language for i in mine) in (Counter(fi=1, hu=1), Counter(fi=1, hu=2))
    for plan in plans:
        for (pieces, _), _ in zip(plan, range(10)):
            assert {data.files[f].language for f, _, _ in pieces} == {"fi", "hu"}
    saved = [DataState.from_dict(next(iter(p))[1]) for p in plans]
    for state in redistribute(saved, 2):
        assert {data.files[plans[0].index[name]].language for name in state.files} == {"fi", "hu"}


def test_language_settings_need_data_of_several_languages_and_its_languages(mixed, write_dataset, tmp_path):
    with pytest.raises(ConfigError, match=r"^language_alpha: .* holds one language \(its variant.json records no "
                                          r"mixture\)"):
        open_data(write_dataset(tmp_path, [5]), 32, VOCAB_SIZE, language_alpha=0.5)
    with pytest.raises(ConfigError, match=r"^language_weights\.et: not a language of .*seq_len_32 \(fi, hu\)$"):
        open_data(mixed, 32, VOCAB_SIZE, language_weights={"et": 2})
    with pytest.raises(ConfigError, match=r"^language_weights\.fi: every language has weight 0$"):
        open_data(mixed, 32, VOCAB_SIZE, language_weights={"fi": 0, "hu": 0})
    other = tmp_path / "other"
    shutil.copytree(mixed, other)
    record = json.loads((other / "variant.json").read_text())
    del record["languages"]
    (other / "variant.json").write_text(json.dumps(record))
    with pytest.raises(DataError, match=r"other/variant\.json: no masked tokens per language"):
        open_data(other, 32, VOCAB_SIZE, language_alpha=1.0)


def test_held_out_figures_per_language_are_those_of_each_language_alone(mixed, one_torch_thread):
    """Each language's first samples / 2 instances; its figures are those of evaluating its files alone."""
    torch.manual_seed(0)
    tiny_bert = BertForPreTraining(model_config("tiny", VOCAB_SIZE, max_position_embeddings=32)).eval()
    files = held_out_files(mixed)
    both = HeldOut.read(files, 60, VOCAB_SIZE, 512)
    assert both.languages == ["fi", "hu"] and both.total == 60
    figures = evaluate(tiny_bert, both, 16, VOCAB_SIZE)
    for language in ("fi", "hu"):
        alone = evaluate(tiny_bert, HeldOut.read([f for f in files if f"_{language}_" in f.name], 30, VOCAB_SIZE, 512),
                         16, VOCAB_SIZE)
        for key in ("eval_mlm_accuracy", "eval_mlm_loss", "eval_mlm_unigram_baseline"):
            assert figures[f"{key}_{language}"] == pytest.approx(alone[key]), key
    halves = [HeldOut.read(files, 60, VOCAB_SIZE, 512, rank, 2) for rank in range(2)]
    assert torch.equal(torch.cat([h.columns["input_ids"] for h in halves]), both.columns["input_ids"])
    assert HeldOut.read(files[:1], 60, VOCAB_SIZE, 512).total == 30  # fi has no more


def test_plot_draws_each_language_beside_its_baseline(tmp_path):
    phase = tmp_path / "run" / "phase1"
    phase.mkdir(parents=True)
    rows = [{"step": 10, "loss": 5.0}, {"step": 10, "eval_mlm_accuracy": 0.1, "eval_mlm_unigram_baseline": 0.05,
                                        "eval_mlm_accuracy_fi": 0.12, "eval_mlm_unigram_baseline_fi": 0.06,
                                        "eval_mlm_accuracy_hu": 0.09, "eval_mlm_unigram_baseline_hu": 0.04}]
    (phase / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    written = plot_run(tmp_path / "run")
    assert tmp_path / "run" / "plots" / "languages.png" in written


def test_a_repeated_row_gets_masks_of_its_own(mixed):
    """Dynamic masking: the second read of a row in an epoch (a repeat of an upsampled language) is another
    sequence to mask; the same read in a resumed run gets the same masks."""
    from pretrain.data.loader import BatchReader
    from pretrain.data.masking import DynamicMasking
    from wiki2bert_core.masking import MaskingVocab
    from wiki2bert_core.wordpiece import read_vocab

    data = open_data(mixed, 32, VOCAB_SIZE, language_alpha=0.0)
    masking = DynamicMasking(MaskingVocab.from_vocab(read_vocab(mixed / "vocab.txt")), 0.3, 10, False, 5)
    reader = BatchReader(data, VOCAB_SIZE, masking=masking)
    size = data.files[0].samples
    first, again = (reader[([(0, np.array([row]), 0)], {})] for row in (3, 3 + size))
    assert torch.equal(first["attention_mask"], again["attention_mask"])  # the same sequence
    assert not torch.equal(first["masked_lm_positions"], again["masked_lm_positions"])
    assert torch.equal(reader[([(0, np.array([3 + size]), 0)], {})]["masked_lm_positions"],
                       again["masked_lm_positions"])
