"""`pretrain plot`: PNG figures of a run's metrics.jsonl (loss, accuracy, learning rate, gradient norm, throughput
against step), phase 1 and phase 2 on one step axis (phase 2's steps follow phase 1's last); the accuracy figure
shows each phase's held-out MLM baseline (the most frequent masked token's share) as a horizontal line. A run on
data of several languages also gets languages.png: each language's held-out MLM accuracy beside its own baseline."""
from __future__ import annotations

import json
from pathlib import Path

from wiki2bert_core.charts import new_figure, save_png
from wiki2bert_core.errors import ConfigError, DataError, not_utf8
from pretrain.config import PHASES
from pretrain.out_dirs import check_out_dir

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
# figure file -> (metrics.jsonl key of a held-out set's constant, legend label): a horizontal line over each phase
BASELINES = {"accuracy.png": ("eval_mlm_unigram_baseline", "held-out MLM baseline (most frequent token)")}
PLOTTED = [key for _, _, _, series in FIGURES.values() for key, _ in series] + [key for key, _ in BASELINES.values()]
LANGUAGES_FIGURE = "languages.png"
ACCURACY, BASELINE = "eval_mlm_accuracy", "eval_mlm_unigram_baseline"  # each language's, as `<key>_<language>`
PER_LANGUAGE_PREFIXES = (f"{ACCURACY}_", f"{BASELINE}_")  # the per-language keys languages.png plots


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
        rows = read_rows(path / "metrics.jsonl")
        if rows:
            phases.append((phase, rows))
    if not phases:
        raise DataError(f"{run_dir}: its metrics.jsonl files hold no rows yet")
    return phases


def read_rows(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl, each with a step and numbers (or null) under the keys FIGURES plot; a last line
    cut off (by a crash, or being written now) is left out. DataError naming the file and line of any other line that
    is not such a row."""
    lines = path.read_bytes().splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line.decode("utf-8"))
        except ValueError as e:  # also UnicodeDecodeError
            if number == len(lines):
                break
            if isinstance(e, UnicodeDecodeError):
                raise not_utf8(path, line, e, number) from None
            row = None
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {number}: not a JSON object")
        if not _is_number(row.get("step")):
            raise DataError(f"{path}: line {number}: no step number")
        for key in [*PLOTTED, *(k for k in row if k.startswith(PER_LANGUAGE_PREFIXES))]:
            if row.get(key) is not None and not _is_number(row[key]):
                raise DataError(f"{path}: line {number}: {key} is not a number")
        rows.append(row)
    return rows


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plot_run(run_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Writes FIGURES (those with any data) into `out_dir` (default <run_dir>/plots: a directory inside the run it
    plots, or one that belongs to nothing else, pretrain/out_dirs.py); returns their paths."""
    phases = read_phases(run_dir)
    out_dir = Path(out_dir) if out_dir else Path(run_dir) / "plots"
    check_out_dir(out_dir, "pretrain plot", None, within=run_dir)
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
            if name in BASELINES:
                key, label = BASELINES[name]
                values = [r[key] for r in rows if r.get(key) is not None]
                if values:
                    ax.hlines(values[-1], offset, offset + last, color="grey", ls="-.", lw=1.2,
                              label=None if key in labelled else label)
                    labelled.add(key)
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
    if languages := sorted({key.removeprefix(f"{ACCURACY}_") for _, rows in phases for row in rows for key in row
                            if key.startswith(f"{ACCURACY}_")}):
        written.append(_language_figure(phases, languages, out_dir / LANGUAGES_FIGURE))
    return written


def _language_figure(phases: list[tuple[str, list[dict]]], languages: list[str], path: Path) -> Path:
    """Each language's held-out MLM accuracy (a line of its colour) and its baseline (a dashed line of the same
    colour over each phase), phase 2 after phase 1 as in the other figures."""
    fig, ax = new_figure("Held-out masked-LM accuracy per language")
    offset = 0
    for i, (phase, rows) in enumerate(phases):
        last = max(r["step"] for r in rows)
        for j, language in enumerate(languages):
            points = [(offset + r["step"], r[f"{ACCURACY}_{language}"]) for r in rows
                      if r.get(f"{ACCURACY}_{language}") is not None]
            if points:
                ax.plot(*zip(*points), color=f"C{j}", marker="o", ms=4, lw=1.2, label=None if i else language)
            baselines = [r[f"{BASELINE}_{language}"] for r in rows if r.get(f"{BASELINE}_{language}") is not None]
            if baselines:
                ax.hlines(baselines[-1], offset, offset + last, color=f"C{j}", ls="--", lw=1,
                          label=None if i else f"{language} baseline (most frequent token)")
        if i < len(phases) - 1:
            ax.axvline(offset + last, color="grey", ls=":", lw=1)
        offset += last
    ax.set_xlabel("optimizer step" + (" (phase 2 continues phase 1's count)" if len(phases) > 1 else ""))
    ax.set_ylabel("accuracy (fraction)")
    ax.legend(fontsize=8)
    return save_png(fig, path)
