"""`pretrain plan`: the sequences a phase draws per language and how often each source's text is seen, against a
counted pass over the draws and the shards' document records of a generated two-language pipeline output."""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from wiki2bert_core.mixture import language_shares
from wiki2bert_core.variant_dir import LanguageShare, Mixture, VariantParams, write_variant_files
from pretrain.cli import main
from pretrain.config import load_train_config
from pretrain.data.loader import BatchPlan, open_data
from pretrain.tools.data_plan import data_plan

FILES = {"fi": [15, 13], "hu": [40, 35, 38]}  # rows of each training file
SOURCES = {"fi": {"wikipedia": 6, "web": 9}, "hu": {"wikipedia": 20, "web": 12}}  # documents per source and language
DUPE_FACTOR = 3
SPECIAL_IDS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


@pytest.fixture(scope="module")
def variant(tmp_path_factory, write_vocab_dir, write_hdf5) -> Path:
    """The hdf5 and shard stages' outputs of `pipeline run --lang fi,hu`: each training file with its shard's
    document records beside the variant (sources, some documents copied by the source weights)."""
    work = tmp_path_factory.mktemp("work") / "fi+hu"
    variant = work / "hdf5" / "seq_len_32"
    vocab = write_vocab_dir(tmp_path_factory.mktemp("vocab") / "vocab")
    rng = np.random.default_rng(0)
    languages, seed = {}, 0
    for language, rows in FILES.items():
        masked = 0
        documents = [(source, i) for source, n in SOURCES[language].items() for i in range(n)]
        for i, n in enumerate(rows):
            seed += 1
            arrays = write_hdf5(variant / "training" / f"training_{language}_{i:04d}.hdf5", n, seed=seed)
            masked += int(np.count_nonzero(arrays["masked_lm_positions"]))
            mine = documents[i::len(rows)]
            records = [{"source": source, "id": str(doc)} for source, doc in mine]
            records += [{"source": source, "id": str(doc), "copy": 1} for source, doc in mine
                        if source == "web" and rng.random() < 0.5]
            (work / "shard").mkdir(exist_ok=True)
            (work / "shard" / f"training_{language}_{i:04d}.docs.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in records))
        languages[language] = {"training_instances": sum(rows), "training_masked_tokens": masked,
                               "test_instances": 0, "test_masked_tokens": 0}
    shares = language_shares({k: v["training_masked_tokens"] for k, v in languages.items()}, 1.0)
    mixture = Mixture(0.3, {}, {lang: LanguageShare({"fi": 3_000, "hu": 30_000}[lang], 0, shares[lang])
                                for lang in FILES})
    params = VariantParams(32, 5, 0.15, DUPE_FACTOR, 0.1, 12345, False, False, 60, SPECIAL_IDS, mixture=mixture)
    write_variant_files(variant, vocab, params, {"languages": languages})
    return variant


def test_repeats_per_source_match_a_counted_pass_over_the_draws_and_the_shards(variant):
    settings = ["language_alpha=1.0", "micro_batch=1"]
    data = open_data(variant, None, 60, 1, 1.0, {})
    epoch = sum(data.epoch_rows)
    assert data.epoch_rows != tuple(f.samples for f in data.files)  # the phase's mixture reads other rows
    config = load_train_config("phase1", overrides=[*settings, f"global_batch={epoch}", "steps=3"])
    plan = data_plan("phase1", variant, config)

    reads = Counter()  # rows read from each file in the run's 3 x `epoch` draws, counted
    drawn = 0
    for pieces, _ in BatchPlan(data, 1, seed=config.seed):
        for f, rows, _ in pieces:
            reads[f] += len(rows)
            drawn += len(rows)
        if drawn == 3 * epoch:
            break
    lines, documents, seen = Counter(), Counter(), Counter()
    for f, datafile in enumerate(data.files):
        shard = variant.parents[1] / "shard" / datafile.path.name.replace(".hdf5", ".docs.jsonl")
        for record in map(json.loads, shard.read_text().splitlines()):
            key = (datafile.language, record["source"])
            lines[key] += 1
            documents[key] += "copy" not in record
            seen[key] += DUPE_FACTOR * reads[f] / datafile.samples
    assert {(s.language, s.source): (s.documents, s.lines) for s in plan.sources} == \
        {key: (documents[key], lines[key]) for key in lines}
    for s in plan.sources:
        assert s.repeats == pytest.approx(seen[s.language, s.source] / documents[s.language, s.source], rel=1e-12)
    for p in plan.languages:
        files = [f for f, datafile in enumerate(data.files) if datafile.language == p.language]
        assert p.drawn == pytest.approx(sum(reads[f] for f in files), rel=1e-12)
        assert p.instances == sum(data.files[f].samples for f in files)


def test_the_command_prints_the_plan_and_warns_past_4_repeats(variant, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pretrain", "plan", "--data", str(variant), "--set", "global_batch=64",
                                      "--set", "micro_batch=32", "--set", "steps=20"])
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert out.startswith("phase1: 20 steps x 64 sequences = 1,280 sequences of 32 tokens drawn\n")
    assert "hu         web" in out and "fi         wikipedia" in out
    assert "warning: hu: its instances are read 9.1 times, more than 4" in out  # 1,280 of 141 rows, no mixture
    assert "warning: fi web: its text is seen" in out
    assert "\nalternatives: more text, or repeat the best rather than all alike (rehydration: " in out


def test_a_damaged_document_record_is_one_line(variant, tmp_path, monkeypatch, capsys):
    import shutil

    copy = tmp_path / "fi+hu"
    shutil.copytree(variant.parents[1], copy)
    (copy / "shard" / "training_fi_0001.docs.jsonl").write_text('{"source": "web", "id": "1"}\nnot json\n')
    monkeypatch.setattr(sys, "argv", ["pretrain", "plan", "--data", str(copy / "hdf5" / "seq_len_32")])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err == (f"error: {copy}/shard/training_fi_0001.docs.jsonl: line 2 is not a "
                                            f"document record (JSON with a source)\n")
