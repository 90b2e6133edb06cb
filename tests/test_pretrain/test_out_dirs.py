"""One rule for every --out of `pretrain` (pretrain/out_dirs.py): no command writes into a directory that belongs to
something else (a phase or run directory, a model, an export, a data variant, a pipeline work or stage directory,
fine-tuning results) or lies inside one; the refusal is the same line and exit 2 from each, and nothing is touched."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import transformers

from model_dirs import write_hugging_face_dir, write_phase_dir
from wiki2bert_core.errors import ConfigError
from wiki2bert_core.wordpiece import SPECIAL_TOKENS
from pretrain.cli import main
from pretrain.config import model_config
from pretrain.finetune.run import finetune
from pretrain.model.bert.model import BertForPreTraining
from pretrain.tools.export import export_hf

TOKENS = [*SPECIAL_TOKENS, *(f"w{i}" for i in range(60 - len(SPECIAL_TOKENS)))]  # write_vocab_dir's 60 tokens
TINY = ["--preset", "tiny", "--set", "global_batch=8", "--set", "micro_batch=4", "--set", "loader_workers=0"]


@pytest.fixture(scope="module")
def owned(tmp_path_factory, write_dataset) -> dict[str, Path]:
    """A directory of each kind that belongs to something, and a task and model to fine-tune."""
    root = tmp_path_factory.mktemp("owned")
    torch.manual_seed(0)
    phase = write_phase_dir(root / "run" / "phase1", BertForPreTraining(model_config("tiny", len(TOKENS))), TOKENS)
    for name in ("githash.log", "gitdiff.log", "pip_freeze.txt"):
        (phase / name).write_text(f"the run's {name}\n")
    (phase / "metrics.jsonl").write_text('{"step": 1, "loss": 2.5}\n')
    variant = write_dataset(root / "data", [16])
    (variant / "variant.json").write_text("{}")
    stage = root / "work" / "hu" / "shard"
    stage.mkdir(parents=True)
    (stage / "_manifest.json").write_text("{}")
    (root / "work" / "hu" / ".lock").write_text("")
    results = root / "ft-results"
    results.mkdir()
    (results / "settings.json").write_text("{}")
    (results / "finetune.log").write_text("")
    model = write_hugging_face_dir(root / "hf-model", transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=len(TOKENS), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)),
                                   TOKENS)
    task = root / "task"
    task.mkdir()
    for split in ("train", "dev"):
        rows = [{"id": str(i), "Sent": f"w{i} w1", "label": str(i % 2)} for i in range(4)]
        (task / f"{split}.json").write_text(json.dumps(rows), encoding="utf-8")
    return {"phase": phase, "run": phase.parent, "model": model, "export": export_hf(phase, root / "export"),
            "variant": variant, "stage": stage, "work": stage.parent, "results": results, "task": task,
            "inside phase": phase / "tokenizer", "inside variant": variant / "training"}


def snapshot(root: Path) -> dict[Path, tuple[int, bytes]]:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}


def cli(monkeypatch, capsys, *args) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["pretrain", *map(str, args)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


KIND_OF = {"phase": "is a pretraining phase directory", "run": "is a pretraining run directory",
           "model": "is a Hugging Face model directory", "export": "is a model directory written by `pretrain export`",
           "variant": "is a data variant directory", "stage": "is a pipeline stage directory",
           "work": "is a pipeline work directory", "results": "is a directory of fine-tuning results",
           "inside phase": "lies inside the pretraining phase directory {phase}",
           "inside variant": "lies inside the data variant directory {variant}"}


@pytest.mark.parametrize("target", ["phase", "run", "model", "export", "variant", "stage", "work", "inside phase"])
def test_finetune_never_writes_into_a_directory_that_belongs_to_something_else(owned, target):
    """It used to overwrite a phase directory's githash.log, gitdiff.log and pip_freeze.txt and mix its results into
    the others, exit 0."""
    out = owned[target]
    before = snapshot(owned["phase"].parents[1])
    with pytest.raises(ConfigError) as refused:
        finetune([owned["model"]], [owned["task"]], out, seeds=1, overrides=["epochs=1"])
    assert str(refused.value) == (f"{out}: {KIND_OF[target].format(**owned)}, which pretrain finetune --out never "
                                  f"writes into; choose another --out")
    assert snapshot(owned["phase"].parents[1]) == before


@pytest.mark.parametrize("command, target", [
    ("export", "results"), ("export", "variant"), ("export", "work"), ("export", "model"),
    ("plot", "phase"), ("plot", "model"), ("plot", "inside variant"),
    ("phase1", "phase"), ("phase1", "model"), ("phase1", "results"), ("phase1", "inside variant"),
    ("merge", "model"), ("merge", "inside phase"),
])
def test_every_command_that_writes_an_out_dir_refuses_them_with_the_same_line(owned, monkeypatch, capsys, command,
                                                                               target):
    out = owned[target]
    args = {"export": ["export", owned["phase"], "--force"], "plot": ["plot", owned["run"]],
            "phase1": ["phase1", "--data", owned["variant"], *TINY],
            "merge": ["merge", owned["export"], owned["phase"], "--force"]}[command]
    before = snapshot(owned["phase"].parents[1])
    code, err = cli(monkeypatch, capsys, *args, "--out", out)
    writes = "replaces" if command in ("export", "merge") else "writes into"
    assert (code, err) == (2, f"error: {out}: {KIND_OF[target].format(**owned)}, which pretrain {command} --out never "
                              f"{writes}; choose another --out\n")
    assert snapshot(owned["phase"].parents[1]) == before


def test_a_run_directory_holds_other_outputs_beside_its_phases(owned, tmp_path, monkeypatch, capsys):
    """plot's default (RUN/plots, PHASE/plots) and an export beside the phases (scripts/demo.sh) are the run's own."""
    run = tmp_path / "run"
    phase = write_phase_dir(run / "phase1", BertForPreTraining(model_config("tiny", len(TOKENS))), TOKENS)
    (phase / "metrics.jsonl").write_text('{"step": 1, "loss": 2.5}\n')
    for plotted in (run, phase):
        code, err = cli(monkeypatch, capsys, "plot", plotted)
        assert code == 0 and (plotted / "plots" / "loss.png").is_file(), err
    assert cli(monkeypatch, capsys, "export", phase, "--out", run / "hf")[0] == 0
    code, err = cli(monkeypatch, capsys, "plot", run, "--out", phase / "plots")  # inside a phase of the run plotted
    assert code == 2 and f"lies inside the pretraining phase directory {phase}," in err, err
