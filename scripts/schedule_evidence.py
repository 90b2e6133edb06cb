"""The evidence of docs/pretrain.md, "Evidence: an mmBERT-shaped schedule against a constant mask rate", with one
command: the development dump plus a generated web corpus through the pipeline (and the dump alone, with the same
vocabulary, for the decay), then for each seed two models of the same size, tokens and optimizer:

- constant: 30% masking for the whole run, the last `--decay-share` of it a 1 - sqrt decay of the lr (WSD);
- mmbert: the stable part with the mask rate scheduled 30% -> 15% (mmBERT's pre- and mid-training in one phase),
  then a decay variant started from its export (`--init`) on Wikipedia alone at 5% masking, the lr from its peak
  to 0 (mmBERT's decay phase);

each export scored on the full mixture's held-out split at a fixed 15% (`pretrain eval --mask-rate 0.15`) and
fine-tuned on HuCOLA and NerKor (subsets). Writes OUT/evidence.md (the tables).

    .venv/bin/python scripts/schedule_evidence.py --out /tmp/schedule-evidence

Two runs at a time, one torch thread each (a 2-core machine); the pipeline with --threads workers.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from statistics import median

from _evidence import DATA, HUWIKI, cli, task_subset, wait

VARIANT = "hdf5.variants=[{max_seq_length: 128, max_predictions_per_seq: 20, sequence_kind: doc-sentences}]"
TASKS = {"HuCOLA": DATA / "finetune" / "hulu" / "HuCOLA", "NerKor": DATA / "finetune" / "nerkor" / "news"}


def settings(args, seed: int, **changes) -> list[str]:
    """Both arms' settings (MLM-only on doc-sentences, dynamic masking, AdamW, WSD), with `changes`."""
    values = {"objective": "mlm", "masking": "dynamic", "optimizer": "adamw", "lr": args.lr, "betas": [0.9, 0.98],
              "eps": 1e-6, "weight_decay": 0.01, "schedule": "wsd", "global_batch": args.batch,
              "micro_batch": args.batch, "eval_every": 0, "log_every": 10, "loader_workers": 0, "seed": seed,
              **changes}
    values.setdefault("checkpoint_every", values["steps"])
    return ["--preset", args.preset, *(a for key, value in values.items() for a in ("--set", f"{key}={json.dumps(value)}"))]


def in_pairs(jobs: list) -> None:
    """Run the commands `jobs` (functions that start one) two at a time."""
    for i in range(0, len(jobs), 2):
        wait(*(job() for job in jobs[i:i + 2]))


def held_out(model: Path, variant: Path, samples: int, log: Path) -> dict[str, float]:
    """`pretrain eval` figures of an export at a fixed 15% masking."""
    wait(cli("pretrain", "eval", model, "--data", variant, "--samples", samples, "--mask-rate", 0.15, threads=2,
             log=log))
    return {key: float(value) for key, value in (line.split() for line in log.read_text().splitlines()
                                                  if line.startswith("eval_"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, default=HUWIKI)
    parser.add_argument("--web-docs", type=int, default=400, help="documents of the generated web corpus")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps of each arm (the mmbert arm's stable "
                                                                "and decay runs together)")
    parser.add_argument("--decay-share", type=float, default=0.2, help="of the steps: the lr decay, Wikipedia-only "
                                                                       "at 5%% in the mmbert arm")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=float, default=0.06, help="share of the steps")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--eval-samples", type=int, default=1000)
    parser.add_argument("--train-examples", type=int, default=1000,
                        help="fine-tune on this many training examples of each task (NerKor: files of ~100-200 "
                             "sentences, this // 100 of them)")
    parser.add_argument("--dev-examples", type=int, default=500)
    parser.add_argument("--finetune-set", action="append", default=["epochs=2", "max_length=96", "batch=16"],
                        help="pretrain finetune --set KEY=VALUE (repeatable, after the defaults)")
    parser.add_argument("--threads", type=int, default=2, help="the pipeline's workers and threads")
    args = parser.parse_args()
    out = args.out.resolve()
    started = time.time()
    wait(cli("pipeline", "sample-corpus", out / "web", "--docs", args.web_docs, threads=1, log=out / "logs" / "web.log"))
    web = (out / "logs" / "web.log").read_text().split()[-1]  # the corpus it printed
    pipeline = ["--lang", "hu", "--dump", args.dump, "--set", "hdf5.dupe_factor=1", "--set", VARIANT,
                "--workers", args.threads, "--quiet"]
    wait(cli("pipeline", "run", *pipeline, "--workdir", out / "full", "--corpus", f"web={web}", "--set",
             "vocab.vocab_size=8000", threads=args.threads, log=out / "logs" / "pipeline-full.log"))
    full = next((out / "full" / "hu" / "hdf5").glob("hdf5_*"))
    wait(cli("pipeline", "run", *pipeline, "--workdir", out / "wiki", "--tokenizer", full, threads=args.threads,
             log=out / "logs" / "pipeline-wiki.log"))
    wiki = next((out / "wiki" / "hu" / "hdf5").glob("hdf5_*"))

    decay = round(args.steps * args.decay_share)
    stable = args.steps - decay
    runs, models = out / "runs", out / "models"
    seeds = range(1, args.seeds + 1)

    def train(name: str, data: Path, *extra) -> callable:
        return lambda: cli("pretrain", "phase1", "--data", data, "--out", runs / name, *extra, threads=1,
                           log=out / "logs" / f"{name}.log")

    def export(name: str) -> callable:
        return lambda: cli("pretrain", "export", runs / name / "phase1", "--out", models / name, threads=1,
                           log=out / "logs" / f"export-{name}.log")

    jobs = []
    for seed in seeds:
        jobs += [train(f"constant-{seed}", full, *settings(args, seed, steps=args.steps, mask_rate=0.3,
                                                                 warmup=args.warmup, cooldown=args.decay_share)),
                 train(f"stable-{seed}", full, *settings(args, seed, steps=stable,
                                                               mask_rate=[[0, 0.3], [0.5, 0.15]],
                                                               warmup=args.warmup * args.steps / stable, cooldown=0))]
    in_pairs(jobs)
    in_pairs([export(f"stable-{seed}") for seed in seeds])
    in_pairs([train(f"mmbert-{seed}", wiki, "--init", models / f"stable-{seed}",
                    *settings(args, seed, steps=decay, mask_rate=0.05, warmup=0, cooldown=1)) for seed in seeds])
    arms = {"constant": [f"constant-{seed}" for seed in seeds], "mmbert": [f"mmbert-{seed}" for seed in seeds]}
    in_pairs([export(name) for names in arms.values() for name in names])

    figures = {name: held_out(models / name, full, args.eval_samples, out / "logs" / f"eval-{name}.log")
               for names in arms.values() for name in names}
    tasks = [task_subset(path, {"train": args.train_examples, "dev": args.dev_examples},
                         out / "tasks" / name) for name, path in TASKS.items()]
    finetune = [a for s in args.finetune_set for a in ("--set", s)]
    in_pairs([lambda arm=arm, names=names: cli(
        "pretrain", "finetune", *(models / name for name in names), *(a for t in tasks for a in ("--task", t)),
        "--seeds", 1, "--out", out / "finetune" / arm, *finetune, threads=1, log=out / "logs" / f"finetune-{arm}.log")
        for arm, names in arms.items()])

    lines = [f"{args.preset}, {args.steps} steps of {args.batch} x 128 tokens per arm (mmbert: {stable} stable on "
             f"the full mixture at 30% -> 15% from half-way, {decay} decaying on Wikipedia alone at 5%; constant: 30% "
             f"throughout, the last {decay} decaying), AdamW lr {args.lr}, seeds {', '.join(map(str, seeds))}", "",
             f"Held-out MLM at a fixed 15% ({args.eval_samples} instances of the full mixture's test split):", "",
             "| arm | accuracy per seed | median | loss median | unigram baseline |", "|---|---|---|---|---|"]
    for arm, names in arms.items():
        accuracy = [figures[name]["eval_mlm_accuracy"] for name in names]
        loss = [figures[name]["eval_mlm_loss"] for name in names]
        lines.append(f"| {arm} | {', '.join(f'{a:.4f}' for a in accuracy)} | {median(accuracy):.4f} | "
                     f"{median(loss):.3f} | {figures[names[0]]['eval_mlm_unigram_baseline']:.4f} |")
    lines += ["", "Fine-tuning (one seed per pretrained model; the table gives each pretraining seed's figure):", ""]
    for arm in arms:
        results = json.loads((out / "finetune" / arm / "results.json").read_text())
        for task, spec in results["tasks"].items():
            metric = spec["main_metric"]
            rows = [r for r in results["results"] if r["task"] == task and "seeds" in r]
            values = [row["seeds"][0]["metrics"][metric] for row in rows]
            lines.append(f"{arm} {task} {metric}: " + ", ".join(f"{v:.4f}" for v in values)
                         + f" (median {median(values):.4f})")
    lines += ["", f"wall time: {(time.time() - started) / 60:.0f} min"]
    (out / "evidence.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
