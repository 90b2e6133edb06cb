"""Benchmark of continued pretraining on CPU: real (non-padding) tokens/s of `pretrain phase1 --init HF_DIR` against
transformers' `Trainer` with `DataCollatorForLanguageModeling` on the same model, for a BERT (`BertForMaskedLM`) and
an XLM-R (`XLMRobertaForMaskedLM`) built by transformers with random weights (seed 0) in a preset's shape, each with
a tokenizer learnt here on the text (WordPiece for BERT, Unigram for XLM-R) and saved with it as the hub serves a model.

The data is `pipeline run --tokenizer HF_DIR` of a dump (doc-sentences rows, the continued-pretraining recipe's MLM
objective): our runner trains on it with dynamic 15% masking; Trainer gets the same sequences (the files' rows with
their masks undone, padding cut off) in the order our runner reads them, in micro-batches of the same size, and its
collator masks 15% and pads each batch to its longest row, as it does for its users. The per-step real token counts
of the two are checked equal (the same batches). Both: fp32 on the CPU, AdamW with the same settings and linear
schedule, the data read in the training process (no loader workers), the same torch thread count; each run a fresh
process, our runner and Trainer alternating round by round (load on a shared machine hits both alike); throughput
over the steps after the first `--warmup-steps` (start-up and the first steps' allocations not counted).

    .venv/bin/python bench/continued_trainer.py [--dump DUMP] [--arch bert roberta] [--preset mini] [--seq 128]
        [--micro-batch 32] [--steps 12] [--rounds 3] [--threads 1] [--vocab-size 16000]
    .venv/bin/python bench/continued_trainer.py --smoke   # XLM-R tiny, a small generated dump, seq 64, 1 round of 4 steps

Without --dump a generated Hungarian sample dump (`pipeline sample-dump`, --articles pages) is used. Needs
`accelerate` (transformers' Trainer does): the `bench` extra installs it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MASK_RATE = 0.15
# the optimizer and schedule of both runs: the continued-pretraining recipe's (pretrain/model/roberta/phase1.yaml)
LR, WARMUP, BETAS, EPS, WEIGHT_DECAY, GRAD_CLIP = 5e-4, 0.06, (0.9, 0.98), 1e-6, 0.01, 1.0
MODEL_CLASS = {"bert": "BertForMaskedLM", "roberta": "XLMRobertaForMaskedLM"}
SPECIAL = {"bert": {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                    "mask_token": "[MASK]"},
           "roberta": {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
                       "cls_token": "<s>", "sep_token": "</s>", "mask_token": "<mask>"}}


def _env(threads: int) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""}


def _run(cmd: list[str], what: str, threads: int) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(threads))
    if done.returncode:
        sys.exit(f"error: {what} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def pipeline(*args, threads: int = 1) -> None:
    _run([sys.executable, "-m", "pipeline.cli", *map(str, args)], f"pipeline {args[0]}", threads)


def train_tokenizer(arch: str, texts: list[Path], vocab_size: int):
    """BERT's kind of tokenizer (cased WordPiece) or XLM-R's (SentencePiece-style Unigram), learnt on `texts`."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    special = list(dict.fromkeys(SPECIAL[arch].values()))
    if arch == "bert":
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False)
        cls, sep = "[CLS]", "[SEP]"
    else:
        tokenizer = Tokenizer(models.Unigram())
        # SentencePiece's: NFKC, runs of whitespace (the files' line ends too) one space
        tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Strip(),
                                                     normalizers.Replace(Regex(r"\s+"), " ")])
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # XLM-R's ids 0-3, <mask> its last (here: 4)
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=special, unk_token="<unk>",
                                          show_progress=False)
        cls, sep = "<s>", "</s>"
    tokenizer.train([str(p) for p in texts], trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in (cls, sep)])
    return tokenizer


def write_model_dir(arch: str, preset: str, tokenizer, out: Path) -> Path:
    """A Hugging Face folder as the hub serves one: a transformers model of the preset's shape with random weights
    (seed 0), saved by save_pretrained, with the tokenizer's files."""
    import torch
    import transformers

    from pretrain.config import model_config
    from pretrain.model.hf_config import hf_config

    vocab_size = tokenizer.get_vocab_size()
    ids = {role: tokenizer.token_to_id(token) for role, token in SPECIAL[arch].items()}
    config = hf_config(model_config(preset, vocab_size, arch), vocab_size, ids["pad_token"], MODEL_CLASS[arch],
                       ids["cls_token"], ids["sep_token"])
    torch.manual_seed(0)
    transformers.AutoModelForMaskedLM.from_config(config).save_pretrained(out)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL[arch]).save_pretrained(out)
    return out


def prepare(arch: str, args, dedup_work: Path, dump: Path, root: Path) -> tuple[Path, Path, int]:
    """(the model folder, the HDF5 variant `pipeline run --tokenizer` made for it, the vocabulary size)."""
    tokenizer = train_tokenizer(arch, sorted((dedup_work / "hu" / "dedup").glob("*.txt")), args.vocab_size)
    model_dir = write_model_dir(arch, args.preset, tokenizer, root / f"{arch}-model")
    work = root / f"{arch}-work"
    shutil.copytree(dedup_work, work, symlinks=True)
    pipeline("run", "--lang", "hu", "--dump", dump, "--workdir", work, "--quiet", "--workers", "1",
             "--tokenizer", model_dir, *pipeline_settings(args))
    return model_dir, next((work / "hu" / "hdf5").glob("hdf5_*")), tokenizer.get_vocab_size()


def pipeline_settings(args) -> list[str]:
    variant = f"[{{max_seq_length: {args.seq}, max_predictions_per_seq: {int(np.ceil(MASK_RATE * args.seq))}, " \
              "sequence_kind: doc-sentences}]"
    return ["--set", "hdf5.dupe_factor=1", "--set", f"hdf5.variants={variant}", "--set", "shard.num_shards=4"]


def ours(model_dir: Path, variant: Path, out: Path, args) -> dict:
    """`pretrain phase1 --init model_dir`: per-step seconds and real tokens from its metrics.jsonl (a row a step)."""
    settings = {"steps": args.steps, "micro_batch": args.micro_batch, "global_batch": args.micro_batch,
                "log_every": 1, "checkpoint_every": args.steps, "eval_every": 0, "loader_workers": 0,
                "objective": "mlm", "masking": "dynamic", "mask_rate": MASK_RATE, "optimizer": "adamw", "lr": LR,
                "warmup": WARMUP, "decay_power": 1.0, "betas": list(BETAS), "eps": EPS, "weight_decay": WEIGHT_DECAY,
                "grad_clip": GRAD_CLIP, "precision": "fp32", "seed": args.seed}
    cmd = [sys.executable, "-m", "pretrain.cli", "phase1", "--data", str(variant), "--init", str(model_dir),
           "--out", str(out)]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={json.dumps(value)}"]
    _run(cmd, "pretrain phase1", args.threads)
    rows = [json.loads(line) for line in (out / "phase1" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "samples_per_s" in r]
    seconds = [args.micro_batch / r["samples_per_s"] for r in rows]
    return {"seconds": seconds, "real_tokens": [round(r["real_tokens_per_s"] * s) for r, s in zip(rows, seconds)],
            "first_loss": rows[0]["loss"]}


def trainer(model_dir: Path, variant: Path, vocab_size: int, args) -> dict:
    spec = {"model_dir": str(model_dir), "variant": str(variant), "vocab_size": vocab_size,
            "micro_batch": args.micro_batch, "steps": args.steps, "seed": args.seed, "threads": args.threads}
    done = _run([sys.executable, __file__, "--trainer-run", json.dumps(spec)], "the Trainer run", args.threads)
    return json.loads(done.stdout.strip().splitlines()[-1])


def runner_order_sequences(variant: Path, vocab_size: int, micro_batch: int, steps: int, seed: int) -> list[list[int]]:
    """The sequences our runner's first `steps` micro-batches hold, in its order (its BatchPlan with the run's seed),
    as the tokenizer encoded them: the files' masks undone, padding cut off."""
    from pretrain.data.loader import BatchPlan, BatchReader, open_data
    from wiki2bert_core.masking import original_tokens

    data = open_data(variant, None, vocab_size)
    reader = BatchReader(data, vocab_size)
    sequences = []
    for (pieces, _), _ in zip(BatchPlan(data, micro_batch, seed=seed), range(steps)):
        batch = {k: v.numpy() for k, v in reader.read([(f, rows) for f, rows, _ in pieces]).items()}
        tokens = original_tokens(batch["input_ids"], batch["masked_lm_positions"], batch["masked_lm_ids"])
        sequences += [row[:n].tolist() for row, n in zip(tokens, batch["attention_mask"].sum(1))]
    return sequences


def trainer_run(spec: dict) -> None:
    """The child process of `trainer`: transformers' Trainer on the model folder; prints {"seconds": [...],
    "real_tokens": [...], "first_loss": ...} per step."""
    import torch
    import transformers
    from torch.utils.data import SequentialSampler

    torch.set_num_threads(spec["threads"])
    sequences = runner_order_sequences(Path(spec["variant"]), spec["vocab_size"], spec["micro_batch"],
                                       spec["steps"], spec["seed"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["model_dir"])
    model = transformers.AutoModelForMaskedLM.from_pretrained(spec["model_dir"])
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=MASK_RATE)
    real_tokens, step_ends, losses = [], [], []

    def collate(examples):
        batch = collator(examples)
        real_tokens.append(int(batch["attention_mask"].sum()))
        return batch

    class Clock(transformers.TrainerCallback):
        def on_train_begin(self, *_, **__):
            step_ends.append(time.perf_counter())

        def on_step_end(self, *_, **__):
            step_ends.append(time.perf_counter())

        def on_log(self, _args, _state, _control, logs=None, **__):
            if logs and "loss" in logs and not losses:
                losses.append(logs["loss"])

    class InRunnerOrder(transformers.Trainer):
        def _get_train_sampler(self, *_, **__):
            return SequentialSampler(self.train_dataset)

    settings = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="trainer_"), use_cpu=True, seed=spec["seed"],
        per_device_train_batch_size=spec["micro_batch"], max_steps=spec["steps"], learning_rate=LR,
        warmup_steps=WARMUP, lr_scheduler_type="linear", adam_beta1=BETAS[0], adam_beta2=BETAS[1], adam_epsilon=EPS,
        weight_decay=WEIGHT_DECAY, max_grad_norm=GRAD_CLIP, dataloader_num_workers=0, logging_steps=1,
        save_strategy="no", report_to=[], disable_tqdm=True)
    InRunnerOrder(model=model, args=settings, train_dataset=[{"input_ids": s} for s in sequences],
                  data_collator=collate, callbacks=[Clock()]).train()
    print(json.dumps({"seconds": np.diff(step_ends).tolist(), "real_tokens": real_tokens[:spec["steps"]],
                      "first_loss": losses[0]}))


def dedup_workdir(args, root: Path) -> tuple[Path, Path]:
    """(the dump, a work directory run to the dedup stage: the text each arch's tokenizer and data are made from)."""
    dump = args.dump
    if dump is None:
        from pipeline.tools.sample_dump import write_sample_dump

        dump = write_sample_dump(root / "dump", args.articles, 0)
    work = root / "text"
    pipeline("run", "--lang", "hu", "--dump", dump, "--workdir", work, "--to", "dedup", "--quiet", "--workers", "1",
             *pipeline_settings(args))
    return dump, work


def measure(arch: str, model_dir: Path, variant: Path, vocab_size: int, args, root: Path) -> dict[str, list]:
    """Rounds of our runner and Trainer, alternating which goes first; per round each one's real tokens/s."""
    speed: dict[str, list] = {"ours": [], "trainer": []}
    for round_ in range(1, args.rounds + 1):
        load = os.getloadavg()[0]
        runs = {}
        for name in (("ours", "trainer") if round_ % 2 else ("trainer", "ours")):
            runs[name] = (ours(model_dir, variant, root / f"{arch}-run{round_}", args) if name == "ours"
                          else trainer(model_dir, variant, vocab_size, args))
        if runs["ours"]["real_tokens"] != runs["trainer"]["real_tokens"]:
            sys.exit(f"error: {arch}: the runs' batches differ (real tokens per step: ours "
                     f"{runs['ours']['real_tokens']}, Trainer {runs['trainer']['real_tokens']})")
        counted = slice(args.warmup_steps, None)
        for name, run in runs.items():
            speed[name].append(sum(run["real_tokens"][counted]) / sum(run["seconds"][counted]))
        print(f"{arch} round {round_} (load {load:.1f} -> {os.getloadavg()[0]:.1f}): ours "
              f"{speed['ours'][-1]:,.0f}, Trainer {speed['trainer'][-1]:,.0f} real tokens/s, "
              f"{speed['ours'][-1] / speed['trainer'][-1]:.2f}x; first loss ours {runs['ours']['first_loss']:.3f}, "
              f"Trainer {runs['trainer']['first_loss']:.3f}", flush=True)
        shutil.rmtree(root / f"{arch}-run{round_}")
    return speed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, help="a Wikipedia dump (.xml.bz2); default: a generated sample dump")
    parser.add_argument("--articles", type=int, default=400, help="pages of the generated sample dump")
    parser.add_argument("--arch", nargs="+", choices=sorted(MODEL_CLASS), default=["bert", "roberta"])
    parser.add_argument("--preset", default="mini", help="the models' shape (pretrain/model/<arch>/ PRESETS)")
    parser.add_argument("--seq", type=int, default=128, help="sequence length of the data")
    parser.add_argument("--vocab-size", type=int, default=16000, help="of the tokenizers learnt (at most)")
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps of each run")
    parser.add_argument("--warmup-steps", type=int, default=2, help="first steps of each run not counted")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of both (OMP_NUM_THREADS)")
    parser.add_argument("--seed", type=int, default=12345, help="data order and masks of both")
    parser.add_argument("--trainer-run", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="XLM-R only (BERT differs in its tokenizer alone), tiny, "
                                                             "40 generated pages, seq 64, vocabulary 600, micro-batch "
                                                             "4, 1 round of 4 steps (2 counted)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.trainer_run:
        return trainer_run(json.loads(args.trainer_run))
    if args.smoke:
        args.dump, args.articles, args.preset, args.seq, args.vocab_size = None, 40, "tiny", 64, 600
        args.arch = ["roberta"]
        args.micro_batch, args.steps, args.warmup_steps, args.rounds = 4, 4, 2, 1
    with tempfile.TemporaryDirectory(prefix="bench_continued_") as tmp:
        root = Path(tmp)
        dump, text = dedup_workdir(args, root)
        print(f"CPU, {os.cpu_count()} cores (shared machine, load {os.getloadavg()[0]:.1f}), torch threads "
              f"{args.threads} each, preset {args.preset}, seq {args.seq}, micro-batch {args.micro_batch}, "
              f"{args.steps} steps a run ({args.steps - args.warmup_steps} counted), {args.rounds} rounds, "
              f"dump {args.dump or f'generated ({args.articles} pages)'}, fp32, AdamW", flush=True)
        summary = []
        for arch in args.arch:
            model_dir, variant, vocab_size = prepare(arch, args, text, dump, root)
            print(f"{arch}: {MODEL_CLASS[arch]}, vocabulary {vocab_size:,}, data {variant.name}", flush=True)
            speed = measure(arch, model_dir, variant, vocab_size, args, root)
            ratios = np.array(speed["ours"]) / np.array(speed["trainer"])
            summary.append(f"{arch}: ours {max(speed['ours']):,.0f} / Trainer {max(speed['trainer']):,.0f} real "
                           f"tokens/s best round, {np.mean(speed['ours']):,.0f} / {np.mean(speed['trainer']):,.0f} "
                           f"mean; ours / Trainer {max(speed['ours']) / max(speed['trainer']):.2f}x best round, "
                           f"{np.median(ratios):.2f}x median of the rounds' ratios")
        print("\n".join(summary))
        print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
