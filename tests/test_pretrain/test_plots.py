"""`pretrain plot`: PNGs of a run's metrics (both phases on one axis), and one clear line for a run without any."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from pretrain.cli import main
from pretrain.tools.plots import FIGURES, plot_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_metrics(phase_dir: Path, steps: int, lr: float) -> None:
    phase_dir.mkdir(parents=True)
    rows = []
    for step in range(1, steps + 1):
        loss = 10 * math.exp(-step / steps)
        rows.append({"step": step, "loss": loss, "mlm_loss": loss - 0.7, "nsp_loss": 0.7, "mlm_accuracy": step / 100,
                     "nsp_accuracy": 0.5, "lr": lr * step / steps, "grad_norm": 1 / step, "tokens_per_s": 1e4,
                     "real_tokens_per_s": 7e3})
        if step % 5 == 0:
            rows.append({"step": step, "eval_mlm_accuracy": step / 110, "eval_mlm_loss": loss - 0.5,
                         "eval_nsp_accuracy": 0.55, "eval_nsp_loss": 0.69})
    (phase_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3')


def test_plot_writes_a_png_per_figure_for_both_phases(tmp_path, monkeypatch, capsys):
    write_metrics(tmp_path / "run" / "phase1", 20, 1e-3)
    write_metrics(tmp_path / "run" / "phase2", 10, 5e-4)
    monkeypatch.setattr(sys, "argv", ["pretrain", "plot", str(tmp_path / "run"), "--out", str(tmp_path / "png")])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    printed = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in printed) == sorted(FIGURES)
    for name in FIGURES:
        data = (tmp_path / "png" / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 5000
    # one phase directory alone, default output directory
    assert [p.name for p in plot_run(tmp_path / "run" / "phase2")] == list(FIGURES)
    assert (tmp_path / "run" / "phase2" / "plots" / "loss.png").is_file()


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "no metrics.jsonl"),
    (lambda d: (d / "phase1").mkdir() or (d / "phase1" / "metrics.jsonl").write_text(""), "hold no rows yet"),
])
def test_a_run_without_metrics_is_one_line(make, message, tmp_path, monkeypatch, capsys):
    make(tmp_path)
    monkeypatch.setattr(sys, "argv", ["pretrain", "plot", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "plots").exists()


@pytest.mark.parametrize("content, problem", [
    (PNG_SIGNATURE + bytes(range(256)) * 4, "line 1: not UTF-8 (byte 0 of the line)"),
    (bytes(range(256)) * 4, "line 1: not a JSON object"),
    (b'{"step": 1, "loss": 2.0}\n[1, 2, 3]\n{"step": 2, "loss": 1.0}\n', "line 2: not a JSON object"),
    (b'{"step": 1, "loss": 2.0}\n7\n', "line 2: not a JSON object"),
    (b'{"step": 1, "loss": 2.0}\nnot json\n{"step": 2, "loss": 1.0}\n', "line 2: not a JSON object"),
    (b'{"loss": 2.0}\n', "line 1: no step number"),
    (b'{"step": 1, "loss": "low"}\n', "line 1: loss is not a number"),
])
def test_a_metrics_file_that_is_not_metrics_rows_is_one_line_naming_file_and_line(content, problem, tmp_path,
                                                                                   monkeypatch, capsys):
    (tmp_path / "phase1").mkdir()
    (tmp_path / "phase1" / "metrics.jsonl").write_bytes(content)
    monkeypatch.setattr(sys, "argv", ["pretrain", "plot", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err == f"error: {tmp_path / 'phase1' / 'metrics.jsonl'}: {problem}\n", err
    assert not (tmp_path / "plots").exists()
