"""`pretrain` command line: phase1, phase2, config, plan, export, merge, eval, finetune, plot, estimate, tune.

Multi-process runs start the same entry point through a launcher, e.g.
`deepspeed --num_gpus 8 --module pretrain.cli phase1 ...` or `torchrun --nproc_per_node 8 -m pretrain.cli phase1 ...`
(see docs/pretrain.md).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from wiki2bert_core.errors import ConfigError, run_cli
from wiki2bert_core.utf8_paths import utf8_path, utf8_text
from pretrain.model.arch import DEFAULT_ARCH

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)

OutOpt = typer.Option(..., "--out", callback=utf8_path,
                      help="Run directory; the phase writes into <out>/<phase>/ and resumes from it")
PresetOpt = typer.Option(None, "--preset", help="Model size: tiny, mini, small, base, large, 1.5b, 5b")
ConfigOpt = typer.Option(None, "--config", callback=utf8_path,
                         help="YAML file of settings over the phase's recipe (same keys)")
RecipeOpt = typer.Option(None, "--recipe", help="An anchor's published settings over the arch's recipe: bert-nvidia, "
                         "modernbert, mmbert, neobert (pretrain/recipes/<name>/<phase>.yaml, each value with its "
                         "source)")
SetOpt = typer.Option(None, "--set", callback=utf8_text,
                      help="Override a setting: KEY=VALUE, e.g. micro_batch=32 or model.hidden_dropout_prob=0 "
                      "(repeatable)")
DsOpt = typer.Option(None, "--deepspeed-config", callback=utf8_path,
                     help="JSON merged over the generated DeepSpeed config "
                     "(keys DeepSpeed does not know are refused)")
EvalDataOpt = typer.Option(None, "--eval-data", callback=utf8_path,
                           help="Held-out HDF5 directory to evaluate on (default: the data "
                           "directory's test/ split); same as --set eval_data=DIR")
VocabOpt = typer.Option(None, "--vocab", callback=utf8_path,
                        help="Directory with vocab.txt (default: the one in --data; needed for "
                        "HDF5 directories without one, e.g. NVIDIA's; refused if it is not the vocabulary the "
                        "data records)")


@app.callback()
def launcher_options(local_rank: Optional[int] = typer.Option(None, "--local_rank", "--local-rank", hidden=True)
                     ) -> None:
    """Pretrain BERT, ModernBERT (--set arch=modernbert) or XLM-R (arch=roberta, or --init of one) on the HDF5 output
    of `pipeline run` with DeepSpeed."""
    # the deepspeed launcher passes --local_rank=N before the command; the rank is read from the environment


@app.command()
def phase1(data: Path = typer.Option(..., "--data", callback=utf8_path,
                                     help="HDF5 variant directory (data/<lang>/hdf5/<variant>)"),
           out: Path = OutOpt,
           init: Optional[Path] = typer.Option(None, "--init", callback=utf8_path,
                                               help="Start from this model's weights instead of random ones: a "
                                               "phase directory, an export or another Hugging Face BERT "
                                               "directory (same vocabulary as the data)"),
           preset: Optional[str] = PresetOpt, config: Optional[Path] = ConfigOpt,
           set_: Optional[list[str]] = SetOpt, deepspeed_config: Optional[Path] = DsOpt,
           vocab: Optional[Path] = VocabOpt, eval_data: Optional[Path] = EvalDataOpt,
           recipe: Optional[str] = RecipeOpt) -> None:
    """Phase 1: sequence length 128 (ModernBERT: 1,024) from random weights, or from those of --init, with a fresh
    schedule and optimizer (recipe: pretrain/model/<arch>/phase1.yaml)."""
    _train("phase1", data, out, preset, config, set_, deepspeed_config, vocab, init, eval_data, recipe)


@app.command()
def phase2(data: Path = typer.Option(..., "--data", callback=utf8_path,
                                     help="HDF5 variant directory of 512-token sequences"),
           out: Path = OutOpt,
           init: Optional[Path] = typer.Option(None, "--init", callback=utf8_path,
                                               help="Phase-1 directory to start from "
                                               "(default: <out>/phase1), or an export or another Hugging Face "
                                               "BERT directory"),
           preset: Optional[str] = PresetOpt, config: Optional[Path] = ConfigOpt,
           set_: Optional[list[str]] = SetOpt, deepspeed_config: Optional[Path] = DsOpt,
           vocab: Optional[Path] = VocabOpt, eval_data: Optional[Path] = EvalDataOpt,
           recipe: Optional[str] = RecipeOpt) -> None:
    """Phase 2: sequence length 512 (ModernBERT: 8,192, the global layers' RoPE base raised) from phase 1's weights,
    with a fresh schedule and optimizer (recipe: pretrain/model/<arch>/phase2.yaml)."""
    _train("phase2", data, out, preset, config, set_, deepspeed_config, vocab, init, eval_data, recipe)


@app.command("config")
def show_config(phase: str = typer.Option("phase1", "--phase", help="phase1 or phase2"),
                preset: Optional[str] = PresetOpt, config: Optional[Path] = ConfigOpt,
                set_: Optional[list[str]] = SetOpt, recipe: Optional[str] = RecipeOpt) -> None:
    """Print every setting's effective value for these flags (as the phase command would use it) and what it
    means, the model's (`model.KEY`, the preset's values with the overrides) included. Phase 2 trains phase 1's
    model, whose shape it keeps whatever these say."""
    from wiki2bert_core.config import config_lines, config_to_dict
    from pretrain.config import ModelConfig, TrainConfig, load_train_config

    train_config = load_train_config(phase, config, set_ or [], {"preset": preset} if preset else None,
                                     recipe=recipe)
    for line in config_lines(TrainConfig, config_to_dict(train_config), changeable_note="may change on resume"):
        typer.echo(line)
    for line in config_lines(ModelConfig, train_config.model_settings(), "model.", "phase 2 may change"):
        typer.echo(line)


@app.command()
def plan(data: Path = typer.Option(..., "--data", callback=utf8_path, help="HDF5 variant directory"),
         phase: str = typer.Option("phase1", "--phase", help="phase1 or phase2"),
         preset: Optional[str] = PresetOpt, config: Optional[Path] = ConfigOpt,
         set_: Optional[list[str]] = SetOpt, recipe: Optional[str] = RecipeOpt) -> None:
    """What the phase these flags describe would draw from the data: per language the training instances and tokens,
    the sequences and tokens drawn and how often each is repeated; per source (from the shard stage's records beside
    the variant) the documents and how often their text is seen; a warning past 4 repeats."""
    from pretrain.config import load_train_config
    from pretrain.tools.data_plan import data_plan, format_plan

    train_config = load_train_config(phase, config, set_ or [], {"preset": preset} if preset else None,
                                     recipe=recipe)
    for line in format_plan(data_plan(phase, data, train_config)):
        typer.echo(line)


# the model directory `export` and `merge` write
EXPORT_OUT = typer.Option(..., "--out", callback=utf8_path, help="Hugging Face model directory to write: new, empty or "
                          "a previous export, which is replaced")
EXPORT_FORCE = typer.Option(False, "--force", help="Replace --out even if it holds other files (never a directory "
                                                   "that belongs to something else)")


@app.command()
def export(model_dir: Path = typer.Argument(..., callback=utf8_path,
                                           help="A phase directory (its latest checkpoint), e.g. runs/hu/phase2, or "
                                           "a Hugging Face BERT, XLM-R or ModernBERT directory"),
           out: Path = EXPORT_OUT, force: bool = EXPORT_FORCE) -> None:
    """Write the model's weights as a Hugging Face BertForPreTraining directory (BertForMaskedLM for a BERT trained
    MLM-only, XLMRobertaForMaskedLM for an XLM-R, ModernBertForMaskedLM for a ModernBERT) with its tokenizer."""
    from pretrain.tools.export import export_hf

    typer.echo(export_hf(model_dir, out, force))


@app.command()
def merge(models: list[Path] = typer.Argument(..., callback=utf8_path, metavar="MODEL",
                                             help="Model directories to average (two or more): exports, other "
                                             "Hugging Face directories of our archs, or phase directories (their "
                                             "latest checkpoint)"),
          out: Path = EXPORT_OUT, force: bool = EXPORT_FORCE) -> None:
    """Average the weights of several models of one arch, shape and tokenizer (e.g. decay variants continued from one
    checkpoint, as mmBERT merges them) and write the mean as an export, like `pretrain export`'s."""
    from pretrain.tools.merge import merge_models

    typer.echo(merge_models(models, out, force))


@app.command("eval")
def eval_(path: Path = typer.Argument(..., callback=utf8_path,
                                      help="A phase directory (its latest checkpoint), an export or another "
                                      "Hugging Face BERT, XLM-R or ModernBERT directory"),
          data: Path = typer.Option(..., "--data", callback=utf8_path,
                                    help="HDF5 variant directory (its test/ split) or a directory "
                                    "of NVIDIA-layout HDF5 files"),
          tag: Optional[str] = typer.Option(None, "--tag", help="Checkpoint of the phase directory, e.g. "
                                                                "step00000200 (default: the latest)"),
          samples: int = typer.Option(10000, "--samples", min=1, help="Evaluate on the first N instances"),
          batch: int = typer.Option(64, "--batch", min=1, help="Instances per forward pass"),
          mask_rate: Optional[float] = typer.Option(None, "--mask-rate", min=0.0, max=1.0,
                                                    help="Mask the instances afresh at this rate, as training's "
                                                    "eval_mask_rate does (default: the files' own masks); needs "
                                                    "the data directory's vocabulary")) -> None:
    """Held-out masked-LM and NSP accuracy and loss (the eval_* figures of training) of a model on an HDF5
    directory, and the baselines of the same instances (most frequent masked token's share, majority NSP label's
    share); one `key value` line each. A model without the NSP head (trained MLM-only) gets the MLM figures only."""
    import torch

    from wiki2bert_core.variant_dir import held_out_files
    from pretrain.model.model_dir import read_our_model
    from pretrain.run.evaluate import HeldOut, evaluate, format_figures
    from pretrain.run.prepare import data_masking_vocab, held_out_masking

    if mask_rate is not None and not 0 < mask_rate < 1:
        raise ConfigError(f"--mask-rate {mask_rate}: must be in (0, 1)")
    files = held_out_files(data)
    masking = held_out_masking(data_masking_vocab(data), mask_rate) if mask_rate is not None else None
    read = read_our_model(path, "pretrain eval", "evaluate", tag)
    model = read.model
    held_out = HeldOut.read(files, samples, read.vocab_tokens, model.config.max_position_embeddings,
                            masking=masking)
    if torch.cuda.is_available():
        model = model.cuda()
    typer.echo(f"{read.described} on {held_out.total:,} instances of {data}", err=True)
    typer.echo(format_figures(evaluate(model, held_out, batch, read.vocab_tokens), 6, "\n"))


@app.command()
def finetune(models: list[Path] = typer.Argument(..., callback=utf8_path, metavar="MODEL",
                                                help="Model directories: phase directories (exported into "
                                                "OUT/models/ first), exports, or any local BERT-family encoder "
                                                "with its tokenizer"),
             task: list[Path] = typer.Option(..., "--task", callback=utf8_path,
                                             help="Task file or directory (repeatable); see docs/finetune.md"),
             out: Path = typer.Option(..., "--out", callback=utf8_path,
                                      help="Results directory; a re-run continues with the seeds not finished"),
             seeds: int = typer.Option(5, "--seeds", min=1, help="Fine-tunings per model and task (seeds 0..N-1 "
                                                                 "over the recipe's seed); the median is reported"),
             set_: Optional[list[str]] = typer.Option(None, "--set", callback=utf8_text,
                                                     help="Change the recipe: KEY=VALUE for every task kind, "
                                                     "KIND.KEY=VALUE for one, e.g. lr=5e-5 or tokens.epochs=5 "
                                                     "(repeatable)"),
             held_out: Optional[float] = typer.Option(None, "--held-out", min=0.0, max=1.0,
                                                      help="Fraction of the training split to score on for tasks "
                                                      "without a dev split"),
             random_init: bool = typer.Option(False, "--random-init",
                                              help="Also each model's architecture with random weights (the "
                                              "\"no pretraining\" row)"),
             save: bool = typer.Option(False, "--save",
                                       help="Keep each task's best seed: OUT/best/<model>/<task>/model, a Hugging "
                                       "Face directory with its tokenizer")) -> None:
    """Fine-tune each model on each task with the task kind's fixed recipe and several seeds, score the dev split,
    and print the median and spread beside the majority-class baseline (also written to OUT: results.json,
    results.md, results.png, the predictions). A task's test split (labels hidden) gets the best seed's predictions
    in the test files' own format, ready to submit (OUT/best/<model>/<task>/test/)."""
    import signal

    from pretrain.finetune.run import finetune as run_finetune

    def stop(signum, frame):
        typer.echo(f"stopped by signal {signum}; re-run the same command to continue with the seeds not finished",
                   err=True)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    typer.echo(run_finetune(models, task, out, seeds, set_ or [], held_out, random_init, save))


@app.command()
def plot(run_dir: Path = typer.Argument(..., callback=utf8_path,
                                        help="Run directory (--out of phase1/phase2) or one phase directory"),
         out: Optional[Path] = typer.Option(None, "--out", callback=utf8_path,
                                            help="Directory for the PNGs (default: RUN_DIR/plots)")
         ) -> None:
    """PNG figures of metrics.jsonl: loss, MLM/NSP accuracy (train and held-out), learning rate, gradient norm and
    throughput against step; phase 1 and 2 on one axis. Prints the paths."""
    from pretrain.tools.plots import plot_run

    for path in plot_run(run_dir, out):
        typer.echo(path)


@app.command()
def estimate(preset: str = typer.Option("large", "--preset", help="Model size"),
             zero: int = typer.Option(1, "--zero", help="ZeRO stage 0-3"),
             gpus: int = typer.Option(8, "--gpus", min=1, help="Data-parallel GPUs"),
             micro_batch: Optional[int] = typer.Option(None, "--micro-batch", min=1,
                                                       help="Sequences per GPU (default: the recipe's)"),
             seq: int = typer.Option(128, "--seq", min=1, help="Sequence length"),
             precision: str = typer.Option("bf16", "--precision", help="bf16, fp16 or fp32"),
             optimizer: str = typer.Option("lamb", "--optimizer", help="lamb, lans, stableadamw or adamw"),
             activation_checkpointing: bool = typer.Option(False, "--activation-checkpointing"),
             vocab_size: int = typer.Option(30522, "--vocab-size", min=1, help="Tokens in vocab.txt"),
             arch: str = typer.Option(DEFAULT_ARCH, "--arch", help="Architecture: bert, modernbert (a folder of "
                                      "pretrain/model/)"),
             attention: str = typer.Option("mask", "--attention",
                                           help="Attention kernel: mask (its score matrices counted: the most it "
                                           "can take) or flash (none stored)")) -> None:
    """Memory per GPU: model states (parameters, gradients, optimizer) by precision and ZeRO stage, plus
    activations."""
    from pretrain.config import load_train_config, phase_of_length
    from pretrain.tools.estimate import estimate_memory, format_estimate

    try:
        if micro_batch is None:
            micro_batch = load_train_config(phase_of_length(seq, arch), values={"arch": arch}).micro_batch
        result = estimate_memory(preset, vocab_size, zero, gpus, micro_batch, seq, precision=precision,
                                 optimizer=optimizer, activation_checkpointing=activation_checkpointing, arch=arch,
                                 attention=attention)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    typer.echo(format_estimate(result))


@app.command()
def tune(preset: Optional[str] = PresetOpt,
         seq_len: int = typer.Option(128, "--seq-len", min=1, help="Sequence length (phase 2's settings above "
                                                                    "128; with --data: the data's)"),
         zero_stage: Optional[int] = typer.Option(None, "--zero-stage", help="ZeRO stage 0-3 (default: by model "
                                                                              "size, as training)"),
         precision: Optional[str] = typer.Option(None, "--precision", help="fp32, bf16 or fp16 (default: as "
                                                                            "training, auto)"),
         budget: float = typer.Option(600, "--budget", min=1, help="Seconds to spend; then the best so far"),
         memory_cap: Optional[float] = typer.Option(None, "--memory-cap", min=0.001,
                                                    help="GiB a setting may use above the footprint before the "
                                                    "model (default: what the device has)"),
         data: Optional[Path] = typer.Option(None, "--data", callback=utf8_path,
                                             help="HDF5 variant directory to take micro-batches from (default: "
                                             "synthetic full-length rows, vocabulary 30,522)"),
         set_: Optional[list[str]] = SetOpt) -> None:
    """The fastest micro_batch, attention kernel and activation checkpointing that fit this device, measured: a
    few timed training steps of each candidate (one rank, one process each), starting from `pretrain estimate`;
    out of memory (or over --memory-cap) rules a candidate out. Prints each trial, then the answer as --set lines.
    Settings given with --set are kept, not tuned."""
    started = time.monotonic()  # the budget bounds the whole command: loading torch and the setup count too
    from pretrain.run import tune as tuning

    setup, pinned = tuning.make_setup(preset, seq_len, zero_stage, precision, memory_cap, set_ or [], data)
    typer.echo(tuning.format_setup(setup, budget))
    typer.echo(tuning.TABLE_HEADER)
    with tuning.stop_trials_on_sigterm():
        result = tuning.tune(setup, pinned, budget - (time.monotonic() - started), tuning.run_trial,
                             report=lambda trial: typer.echo(tuning.format_trial(trial)))
    if result.best is None:
        raise ConfigError(tuning.no_answer(result, setup, budget))
    for line in tuning.format_answer(result, budget):
        typer.echo(line)


def _train(phase, data, out, preset, config, overrides, deepspeed_config, vocab, init=None, eval_data=None,
           recipe=None) -> None:
    from pretrain.config import load_train_config
    from pretrain.model.model_dir import arch_of
    from pretrain.run.prepare import prepare
    from pretrain.run.train import train

    values = {"preset": preset} if preset else {}
    if eval_data:
        values["eval_data"] = str(eval_data)
    train_config = load_train_config(phase, config, overrides or [], values or None, init and arch_of(init), recipe)
    run = prepare(phase, data, out, train_config, vocab, init, deepspeed_config, preset_flag=preset)
    if run.complete:
        typer.echo(f"{run.phase_dir}: {phase} is complete ({run.config.steps} steps); nothing to do", err=True)
        return
    code = train(run)
    if code:
        raise typer.Exit(code)


def main() -> None:
    run_cli(app, "interrupted; re-run the same command to resume from the last checkpoint")


if __name__ == "__main__":
    main()
