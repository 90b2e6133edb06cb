"""The results of a `pretrain finetune` output directory: every finished seed's figures gathered from runs/ (also of
the models and tasks the last run did not name), the median and spread (minimum and maximum over the seeds) of each
metric, how many seeds predicted one class for every example, and the majority-class baseline of each task beside
them; written as results.json, results.md (the table the command prints) and results.png (main metric of each model
and task). A task is known to the report by tasks/<task>.json, written by each run that names it."""
from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

from wiki2bert_core.files import atomic_write, read_json, write_json
from pretrain.finetune import metrics
from pretrain.finetune.results_dir import finished_seeds, predictions_path, result_path, writing
from pretrain.finetune.task import Task, gold_labels, majority_label, majority_predictions
from pretrain.finetune.train import ModelSource

MAJORITY = "majority baseline"  # the row of the majority-class baseline
ONE_CLASS = "predicts one class"


def describe_task(task: Task) -> dict:
    """tasks/<task>.json: what the report needs of a task, its majority baseline included."""
    return {"kind": task.kind, "source": str(task.source.resolve()), "main_metric": task.main_metric,
            "metrics": list(task.metrics), "labels": list(task.labels), "train_examples": len(task.train),
            "dev_examples": len(task.dev), "test_examples": len(task.test), "majority_label": majority_label(task),
            "majority": metrics.compute(task.metrics, task.labels, gold_labels(task), majority_predictions(task))}


def write_report(out: Path, sources: list[ModelSource], tasks: list[Task]) -> str:
    """Writes results.json, results.md and results.png for every finished seed in `out`, the models and tasks of
    this run first (then the others by name); returns the markdown. Seeds of a task without tasks/<task>.json
    (made by an older version) are named as left out."""
    finished = finished_seeds(out)
    described = {path.stem: read_json(path) for path in sorted((out / "tasks").glob("*.json"))}
    models = list(dict.fromkeys([s.name for s in sources] + sorted({model for model, _ in finished})))
    rows, left_out = [], []
    for task in dict.fromkeys([t.name for t in tasks] + sorted({task for _, task in finished})):
        for model in [model for model in models if (model, task) in finished]:
            seeds = finished[(model, task)]
            if task not in described:
                left_out.append(f"runs/{model}/{task} ({_seeds(len(seeds))})")
                continue
            runs = [read_json(result_path(out, model, task, seed)) for seed in seeds]
            rows.append({"model": model, "model_path": runs[0]["model_path"], "random_init": runs[0]["random_init"],
                         "task": task, "seeds": runs,
                         "one_class_seeds": sum(_one_class(predictions_path(out, model, task, seed)) for seed in seeds),
                         "summary": summarize([run["metrics"] for run in runs])})
        if any(row["task"] == task for row in rows):
            rows.append({"model": MAJORITY, "task": task, "majority_label": described[task]["majority_label"],
                         "summary": summarize([described[task]["majority"]])})
    shown = dict.fromkeys(row["task"] for row in rows)
    results = {"tasks": {task: {key: value for key, value in described[task].items()
                                if key not in ("majority_label", "majority")} for task in shown},
               "spread": "min and max over the seeds", "results": rows, "left_out": left_out}
    with writing(out / "results.json"):
        write_json(out / "results.json", results)
    table = markdown(results)
    with writing(out / "results.md"), atomic_write(out / "results.md") as f:
        f.write(table)
    with writing(out / "results.png"):
        chart(results, out / "results.png")
    return table


def _seeds(n: int) -> str:
    return f"{n} seed{'s' * (n != 1)}"


def _one_class(path: Path) -> bool:
    """Whether a seed's dev predictions give every example (tokens: every word) the same label."""
    predicted: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            guess = json.loads(line)["predicted"]
            predicted.update(guess if isinstance(guess, list) else [guess])
            if len(predicted) > 1:
                return False
    return True


def _model_rows(results: dict) -> list[dict]:
    return [row for row in results["results"] if row["model"] != MAJORITY]


def _models(results: dict) -> list[str]:
    """The rows of the tables and the bars of each task: the models, then the baseline."""
    return [*dict.fromkeys(row["model"] for row in _model_rows(results)), MAJORITY]


def _usual_seeds(results: dict) -> int:
    """The most common number of seeds of a model and task."""
    counts = Counter(len(row["seeds"]) for row in _model_rows(results))
    return counts.most_common(1)[0][0] if counts else 1


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


def _model_cell(row: dict, metric: str, usual: int) -> str:
    """_cell, and where it differs from the rest of the table the number of seeds, and the seeds that answered one
    class for every example."""
    seeds, one_class = len(row["seeds"]), row["one_class_seeds"]
    notes = [_seeds(seeds)] if seeds != usual else []
    if one_class == seeds:
        notes.append(ONE_CLASS)
    elif one_class:
        notes.append(f"{one_class} of {seeds} seeds predict one class")
    return ", ".join([_cell(row["summary"][metric]), *notes])


def markdown(results: dict) -> str:
    """The main table (models x tasks: median of the main metric, min-max over the seeds), then one table per task
    with every metric (metrics x models)."""
    tasks = results["tasks"]
    by_key = {(row["model"], row["task"]): row for row in results["results"]}
    usual = _usual_seeds(results)
    seeds = f"median over {usual} seeds (min-max)" if usual > 1 else "one seed"
    lines = [f"Dev-set figures, {seeds}; {MAJORITY}: the most frequent training label (tag) for every example "
             f"(word).", "",
             "| model | " + " | ".join(f"{name} ({task['main_metric']})" for name, task in tasks.items()) + " |",
             "|---|" + "---|" * len(tasks)]
    for model in _models(results):
        cells = ["" if (model, name) not in by_key else _cell(by_key[(model, name)]["summary"][task["main_metric"]])
                 if model == MAJORITY else _model_cell(by_key[(model, name)], task["main_metric"], usual)
                 for name, task in tasks.items()]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    if any(row["one_class_seeds"] for row in _model_rows(results)):
        lines += ["", f"{ONE_CLASS}: every dev example got the same label (token tasks: every word the same tag), in "
                      "every seed: the figure is that of a constant answer, not of what the model learned."]
    if results["left_out"]:
        lines += ["", "Left out (no tasks/<task>.json: re-run with the task to include them): "
                  + ", ".join(results["left_out"])]
    for name, task in tasks.items():
        rows = [row for row in results["results"] if row["task"] == name]
        lines += ["", f"{name} ({task['kind']}, {task['train_examples']} train / {task['dev_examples']} dev "
                      f"examples)", "", "| metric | " + " | ".join(row["model"] for row in rows) + " |",
                  "|---|" + "---|" * len(rows)]
        for metric in rows[0]["summary"]:
            lines.append(f"| {metric} | " + " | ".join(_cell(row["summary"][metric]) for row in rows) + " |")
    return "\n".join(lines) + "\n"


def chart(results: dict, path: Path) -> Path:
    """Grouped bars: for each task, each model's median main metric, the error bars spanning min to max over the
    seeds, a line in the bar's colour at the median (a bar of 0 has no height); a model that answered one class in
    every seed hatched and labelled so. The axis spans at least 0 to 1, the figures' range, so that small figures
    show where they stand."""
    from matplotlib.patches import Patch

    from wiki2bert_core.charts import new_figure, save_png

    tasks = results["tasks"]
    models = _models(results)
    by_key = {(row["model"], row["task"]): row for row in results["results"]}
    counts = sorted({len(row["seeds"]) for row in _model_rows(results)})
    if counts[-1:] in ([], [1]):
        what = "one seed"
    else:
        what = f"median over {'-'.join(map(str, dict.fromkeys([counts[0], counts[-1]])))} seeds, bars: min-max"
    fig, ax = new_figure(f"Fine-tuning: dev figures ({what})",
                         width=max(7.0, 1.2 + len(tasks) * (0.4 + 0.35 * len(models))), height=4.5)
    width = 0.8 / len(models)
    handles, labels = [], []
    for i, model in enumerate(models):
        xs, medians, low, high, one_class = [], [], [], [], []
        for j, (name, task) in enumerate(tasks.items()):
            if (model, name) in by_key:
                row = by_key[(model, name)]
                summary = row["summary"][task["main_metric"]]
                xs.append(j - 0.4 + width * (i + 0.5))
                medians.append(summary["median"])
                low.append(summary["median"] - summary["min"])
                high.append(summary["max"] - summary["median"])
                one_class.append(model != MAJORITY and row["one_class_seeds"] == len(row["seeds"]))
        color = "lightgray" if model == MAJORITY else f"C{i}"
        bars = ax.bar(xs, medians, width, yerr=[low, high], capsize=3, color=color, edgecolor="black", linewidth=0.5)
        ax.hlines(medians, [x - width / 2 for x in xs], [x + width / 2 for x in xs], color=color, linewidth=2.5,
                  zorder=3)  # the median also where the bar has no height (0)
        for bar, flat in zip(bars, one_class):
            if flat:
                bar.set_hatch("///")
        ax.bar_label(bars, [f"{m:.2f}" + ("\none class" if flat else "") for m, flat in zip(medians, one_class)],
                     fontsize="x-small", padding=3)
        handles.append(Patch(facecolor=color, edgecolor="black", linewidth=0.5))
        labels.append(model)
    ax.set_xticks(range(len(tasks)), [f"{name}\n{task['main_metric']}" for name, task in tasks.items()])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.margins(y=0.12)  # room for the bar labels
    bottom, top = ax.get_ylim()
    ax.set_ylim(min(bottom, -0.03), max(top, 1.0))  # below 0: a median line at 0 clear of the frame
    if any(row["one_class_seeds"] == len(row["seeds"]) for row in _model_rows(results)):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///"))
        labels.append(ONE_CLASS + ("" if what == "one seed" else "\n(every seed)"))
    ax.legend(handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return save_png(fig, path)
