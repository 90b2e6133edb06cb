"""`pretrain plot`: PNG figures of a run's metrics.jsonl (loss, accuracy, learning rate, gradient norm, throughput
against step), phase 1 and phase 2 on one step axis (phase 2's steps follow phase 1's last)."""
from __future__ import annotations

import json
from pathlib import Path

from wiki2bert_core.charts import new_figure, save_png
from wiki2bert_core.errors import ConfigError, DataError
from pretrain.config import PHASES

# figure file -> (title, y label, log scale, [(metrics.jsonl key, legend label)])
FIGURES = {
    "loss.png": ("Loss (MLM + NSP)", "cross-entropy (nats)", True,
                 [("loss", "train loss"), ("mlm_loss", "train MLM"), ("nsp_loss", "train NSP"),
                  ("eval_mlm_loss", "held-out MLM"), ("eval_nsp_loss", "held-out NSP")]),
    "accuracy.png": ("Masked-LM and next-sentence accuracy", "accuracy (fraction)", False,
                     [("mlm_accuracy", "train MLM"), ("nsp_accuracy", "train NSP"),
                      ("eval_mlm_accuracy", "held-out MLM"), ("eval_nsp_accuracy", "held-out NSP")]),
    "lr.png": ("Learning rate", "learning rate", False, [("lr", "lr")]),
    "grad_norm.png": ("Gradient norm (before clipping)", "global L2 norm", True, [("grad_norm", "grad norm")]),
    "throughput.png": ("Throughput", "tokens per second (all ranks)", False,
                       [("real_tokens_per_s", "real tokens/s"), ("tokens_per_s", "positions/s (with padding)")]),
}


def read_phases(run_dir: Path) -> list[tuple[str, list[dict]]]:
    """(phase, metrics rows) of each phase of a run directory (or of one phase directory) that has metrics."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a directory")
    dirs = [(p, run_dir / p) for p in PHASES if (run_dir / p / "metrics.jsonl").is_file()]
    if not dirs and (run_dir / "metrics.jsonl").is_file():
        dirs = [(run_dir.name, run_dir)]
    if not dirs:
        raise DataError(f"{run_dir}: no metrics.jsonl (in it or in its phase1/, phase2/); is it a run "
                            f"directory of `pretrain phase1 --out`?")
    phases = []
    for phase, path in dirs:
        rows = []
        for line in (path / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a row cut off by a crash
        if rows:
            phases.append((phase, rows))
    if not phases:
        raise DataError(f"{run_dir}: its metrics.jsonl files hold no rows yet")
    return phases


def plot_run(run_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Writes FIGURES (those with any data) into `out_dir` (default <run_dir>/plots); returns their paths."""
    phases = read_phases(run_dir)
    out_dir = Path(out_dir) if out_dir else Path(run_dir) / "plots"
    written = []
    for name, (title, ylabel, log, series) in FIGURES.items():
        fig, ax = new_figure(title)
        labelled, offset = set(), 0
        for i, (phase, rows) in enumerate(phases):
            for j, (key, label) in enumerate(series):
                points = [(offset + r["step"], r[key]) for r in rows if r.get(key) is not None]
                if not points:
                    continue
                xs, ys = zip(*points)
                held_out = key.startswith("eval_")
                ax.plot(xs, ys, color=f"C{j}", marker="o" if held_out else None, ms=4,
                        ls="--" if held_out else "-", lw=1.2, label=None if key in labelled else label)
                labelled.add(key)
            last = max(r["step"] for r in rows)
            if len(phases) > 1 and i < len(phases) - 1:
                ax.axvline(offset + last, color="grey", ls=":", lw=1)
                ax.text(offset + last, 1.0, f" {phases[i + 1][0]} ", transform=ax.get_xaxis_transform(),
                        va="top", fontsize=8, color="grey")
            offset += last
        if not labelled:
            import matplotlib.pyplot as plt

            plt.close(fig)
            continue
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("optimizer step" + (" (phase 2 continues phase 1's count)" if len(phases) > 1 else ""))
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        written.append(save_png(fig, out_dir / name))
    return written
