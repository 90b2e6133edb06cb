"""Benchmark of pretraining objectives from the same dump: the same model trained for the same number of sequences
(and tokens) with (a) static masks + NSP (NVIDIA's recipe, the masks the HDF5 files hold), (b) dynamic 15% masks
+ NSP, (c) dynamic 15% MLM-only on a doc-sentences variant (RoBERTa's DOC-SENTENCES), (d) dynamic 30% MLM-only on
it; then the held-out MLM accuracy of each, measured the same way for all: `pretrain eval` on the stored 15% masks
of the same held-out sequences (the test split of the segment-pair variant, and of the doc-sentences variant).
With --task, the four exported models are then fine-tuned side by side by `pretrain finetune` (its fixed recipe,
--seeds seeds) and its table printed.

The data: `pipeline run` on --dump (default: the development Hungarian dump) with both kinds of seq-128 variant.

    .venv/bin/python bench/objectives.py [--dump FILE] [--preset tiny] [--steps 600] [--global-batch 64]
    .venv/bin/python bench/objectives.py --task ../shared/data/finetune/hulu/HuCB [--task ...] [--seeds 3]
    .venv/bin/python bench/objectives.py --smoke   # generated sample dump, objective (d), a few steps
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV_DUMP = ROOT.parent / "shared" / "data" / "wiki" / "huwiki-20240920-pages-articles-multistream.xml.bz2"
VARIANTS = ('[{"max_seq_length": 128, "max_predictions_per_seq": 20},'
            ' {"max_seq_length": 128, "max_predictions_per_seq": 20, "sequence_kind": "doc-sentences"}]')
# name -> (variant kind it trains on, settings over the shared ones)
OBJECTIVES = {
    "(a) static 15% + NSP": ("segment-pair", []),
    "(b) dynamic 15% + NSP": ("segment-pair", ["masking=dynamic", "mask_rate=0.15"]),
    "(c) dynamic 15% MLM-only, doc-sentences": ("doc-sentences", ["masking=dynamic", "mask_rate=0.15",
                                                                  "objective=mlm"]),
    "(d) dynamic 30% MLM-only, doc-sentences": ("doc-sentences", ["masking=dynamic", "mask_rate=0.3",
                                                                  "objective=mlm"]),
}
# --smoke: dynamic MLM-only on doc-sentences alone (each objective costs four processes: training, two evaluations
# and the export; the other objectives differ from it in settings only)
SMOKE_OBJECTIVES = ("(d) dynamic 30% MLM-only, doc-sentences",)


def run(cmd: list[str], env: dict) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"{' '.join(cmd[:4])} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def make_data(work: Path, dump: Path | None, vocab_size: int, env: dict) -> dict[str, Path]:
    """Both seq-128 variants of one pipeline run: kind -> variant directory."""
    pipeline = [sys.executable, "-m", "pipeline.cli"]
    if dump is None:
        dump = Path(run([*pipeline, "sample-dump", str(work / "dump"), "--pages", "80", "-q"], env).strip())
    run([*pipeline, "run", "--lang", "hu", "--dump", str(dump), "--workdir", str(work / "data"), "--quiet",
         "--set", f"vocab.vocab_size={vocab_size}", "--set", "shard.num_shards=4", "--set", f"hdf5.variants={VARIANTS}"],
        env)
    variants = {}
    for variant in sorted((work / "data" / "hu" / "hdf5").glob("hdf5_*")):
        params = json.loads((variant / "variant.json").read_text())
        variants[params.get("sequence_kind", "segment-pair")] = variant
    return variants


def held_out(model_dir: Path, variant: Path, samples: int, env: dict) -> dict[str, float]:
    lines = run([sys.executable, "-m", "pretrain.cli", "eval", str(model_dir), "--data", str(variant),
                 "--samples", str(samples)], env)
    return {key: float(value) for key, value in (line.split()[:2] for line in lines.splitlines() if line.strip())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, default=DEV_DUMP)
    parser.add_argument("--work", type=Path, help="keep the data and runs here (default: a temporary directory)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--eval-samples", type=int, default=3000)
    parser.add_argument("--task", type=Path, action="append", default=[],
                        help="fine-tune the four models on this task too (repeatable)")
    parser.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per model and task")
    parser.add_argument("--smoke", action="store_true",
                        help="a generated sample dump, objective (d), 4 steps of 8")
    args = parser.parse_args()
    objectives = OBJECTIVES
    if args.smoke:
        args.dump, args.vocab_size, args.steps, args.global_batch, args.eval_samples = None, 1000, 4, 8, 64
        objectives = {name: OBJECTIVES[name] for name in SMOKE_OBJECTIVES}
    elif not args.dump.exists():
        sys.exit(f"{args.dump}: no such dump (pass --dump, or --smoke)")
    # no launcher variables: each `pretrain` process takes a free port of its own
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")} | {"PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        variants = make_data(work, args.dump, args.vocab_size, env)
        shared = [f"steps={args.steps}", f"global_batch={args.global_batch}", f"micro_batch={args.global_batch}",
                  f"lr={args.lr}", "warmup=0.1", f"checkpoint_every={args.steps}", "log_every=50",
                  f"eval_every={args.steps}", "eval_samples=500"]
        print(f"{args.preset} preset, {args.steps} steps x {args.global_batch} sequences of 128 tokens each; held-out "
              f"MLM accuracy on up to {args.eval_samples} test instances with their stored 15% masks")
        print("| objective | train s | acc. segment-pair test | acc. doc-sentences test |")
        print("|---|---|---|---|")
        baselines, models = {}, []
        for name, (kind, settings) in objectives.items():
            out = work / "runs" / name.split()[0].strip("()")
            cmd = [sys.executable, "-m", "pretrain.cli", "phase1", "--data", str(variants[kind]), "--out", str(out),
                   "--preset", args.preset]
            for setting in shared + settings:
                cmd += ["--set", setting]
            start = time.perf_counter()
            run(cmd, env)
            seconds = time.perf_counter() - start
            figures = {k: held_out(out / "phase1", variants[k], args.eval_samples, env) for k in variants}
            baselines = {k: f["eval_mlm_unigram_baseline"] for k, f in figures.items()}
            models.append(work / "models" / out.name)
            run([sys.executable, "-m", "pretrain.cli", "export", str(out / "phase1"), "--out", str(models[-1])], env)
            print(f"| {name} | {seconds:.0f} | {figures['segment-pair']['eval_mlm_accuracy']:.4f} | "
                  f"{figures['doc-sentences']['eval_mlm_accuracy']:.4f} |", flush=True)
        print(f"| unigram baseline (most frequent masked token) | - | {baselines['segment-pair']:.4f} | "
              f"{baselines['doc-sentences']:.4f} |")
        if args.task:
            cmd = [sys.executable, "-m", "pretrain.cli", "finetune", *map(str, models), "--out", str(work / "finetune"),
                   "--seeds", str(args.seeds)]
            for task in args.task:
                cmd += ["--task", str(task)]
            print(f"\nfine-tuned ({', '.join(f'{m.name}: {n}' for m, n in zip(models, objectives))}):\n"
                  + run(cmd, env))


if __name__ == "__main__":
    main()
