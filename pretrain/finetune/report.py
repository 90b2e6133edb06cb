"""The results of a `pretrain finetune` run: every seed's figures gathered from runs/, the median and spread
(minimum and maximum over the seeds) of each metric, the majority-class baseline of each task beside them; written
as results.json, results.md (the table the command prints) and results.png (main metric of each model and task)."""
from __future__ import annotations

import statistics
from pathlib import Path

from wiki2bert_core.files import atomic_write, read_json, write_json
from pretrain.finetune.recipe import Recipe
from pretrain.finetune.task import Task
from pretrain.finetune.train import ModelSource

MAJORITY = "majority baseline"  # the row of the majority-class baseline


def write_report(out: Path, sources: list[ModelSource], tasks: list[Task], recipes: dict[str, Recipe],
                 seeds: int) -> str:
    """Writes results.json, results.md and results.png for these models x tasks x the first `seeds` seeds;
    returns the markdown."""
    from pretrain.finetune import metrics
    from pretrain.finetune.run import gold_labels, majority_label, majority_predictions, result_path

    rows = []
    for task in tasks:
        first = recipes[task.kind].seed
        for source in sources:
            runs = [read_json(result_path(out, source, task, seed)) for seed in range(first, first + seeds)]
            rows.append({"model": source.name, "model_path": str(source.origin.resolve()),
                         "random_init": source.random_init, "task": task.name, "seeds": runs,
                         "summary": summarize([run["metrics"] for run in runs])})
        figures = metrics.compute(task.metrics, task.labels, gold_labels(task), majority_predictions(task))
        rows.append({"model": MAJORITY, "task": task.name, "majority_label": majority_label(task),
                     "summary": summarize([figures])})
    results = {"tasks": {task.name: {"kind": task.kind, "source": str(task.source.resolve()),
                                     "main_metric": task.main_metric, "metrics": list(task.metrics),
                                     "labels": list(task.labels), "train_examples": len(task.train),
                                     "dev_examples": len(task.dev)} for task in tasks},
               "seeds": seeds, "spread": "min and max over the seeds", "results": rows}
    write_json(out / "results.json", results)
    table = markdown(results)
    with atomic_write(out / "results.md") as f:
        f.write(table)
    chart(results, out / "results.png")
    return table


def summarize(figures: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Metric -> median, min and max over the seeds' figures."""
    return {name: {"median": statistics.median(f[name] for f in figures), "min": min(f[name] for f in figures),
                   "max": max(f[name] for f in figures)} for name in figures[0]}


def _cell(summary: dict[str, float]) -> str:
    """median (min-max); counts (per-class support) as whole numbers."""
    def number(x):
        return f"{x:.0f}" if float(x).is_integer() and abs(x) > 1 else f"{x:.3f}"

    text = number(summary["median"])
    if summary["max"] > summary["min"]:
        text += f" ({number(summary['min'])}-{number(summary['max'])})"
    return text


def markdown(results: dict) -> str:
    """The main table (models x tasks: median of the main metric, min-max over the seeds), then one table per task
    with every metric (metrics x models)."""
    tasks = results["tasks"]
    models = list(dict.fromkeys(row["model"] for row in results["results"]))
    by_key = {(row["model"], row["task"]): row for row in results["results"]}
    seeds = f"median over {results['seeds']} seeds (min-max)" if results["seeds"] > 1 else "one seed"
    lines = [f"Dev-set figures, {seeds}; {MAJORITY}: the most frequent training label (tag) for every example "
             f"(word).", "",
             "| model | " + " | ".join(f"{name} ({task['main_metric']})" for name, task in tasks.items()) + " |",
             "|---|" + "---|" * len(tasks)]
    for model in models:
        cells = [_cell(by_key[(model, name)]["summary"][task["main_metric"]]) if (model, name) in by_key else ""
                 for name, task in tasks.items()]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    for name, task in tasks.items():
        rows = [row for row in results["results"] if row["task"] == name]
        lines += ["", f"{name} ({task['kind']}, {task['train_examples']} train / {task['dev_examples']} dev "
                      f"examples)", "", "| metric | " + " | ".join(row["model"] for row in rows) + " |",
                  "|---|" + "---|" * len(rows)]
        for metric in rows[0]["summary"]:
            lines.append(f"| {metric} | " + " | ".join(_cell(row["summary"][metric]) for row in rows) + " |")
    return "\n".join(lines) + "\n"


def chart(results: dict, path: Path) -> Path:
    """Grouped bars: for each task, each model's median main metric, the bars spanning min to max over the seeds."""
    from wiki2bert_core.charts import new_figure, save_png

    tasks = results["tasks"]
    models = list(dict.fromkeys(row["model"] for row in results["results"]))
    by_key = {(row["model"], row["task"]): row for row in results["results"]}
    fig, ax = new_figure("Fine-tuning: dev figures (median over seeds, bars: min-max)",
                         width=max(7.0, 1.2 + len(tasks) * (0.4 + 0.35 * len(models))), height=4.5)
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        xs, medians, low, high = [], [], [], []
        for j, (name, task) in enumerate(tasks.items()):
            if (model, name) in by_key:
                summary = by_key[(model, name)]["summary"][task["main_metric"]]
                xs.append(j - 0.4 + width * (i + 0.5))
                medians.append(summary["median"])
                low.append(summary["median"] - summary["min"])
                high.append(summary["max"] - summary["median"])
        bars = ax.bar(xs, medians, width, yerr=[low, high], capsize=3, label=model,
                      color="lightgray" if model == MAJORITY else None, edgecolor="black", linewidth=0.5)
        ax.bar_label(bars, [f"{m:.2f}" for m in medians], fontsize="x-small", padding=2)
    ax.set_xticks(range(len(tasks)), [f"{name}\n{task['main_metric']}" for name, task in tasks.items()])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.margins(y=0.12)  # room for the bar labels
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return save_png(fig, path)
