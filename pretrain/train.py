"""One pretraining phase on DeepSpeed: `prepare` checks everything a run needs (config, vocabulary, data, the
checkpoint to resume or start from) before anything is written or DeepSpeed is imported; `train` runs the
engine and the loop, writes metrics and checkpoints, and stops cleanly on SIGTERM/SIGINT.

Run directory (`<out>/<phase>/`): hparams.json, ds_config.json, model_config.json, tokenizer/, githash.log,
gitdiff.log, pip_freeze.txt, train.log, metrics.jsonl, tb/ (TensorBoard), checkpoints/ (see checkpoint.py),
flops_profile.txt and profile/ when profiling.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import json
import logging
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from core.errors import ConfigError
from core.config import config_to_dict
from core.errors import PipelineError
from core.fileio import atomic_write, write_json
from core.log import LOGGER_NAME, progress, setup_logging
from core.wordpiece import read_vocab
from pretrain import checkpoint
from pretrain.config import CHANGEABLE_ON_RESUME, TrainConfig, deep_merge
from pretrain.data import DataState, PretrainingData, find_data_files, find_vocab_dir, make_loader, open_data
from pretrain.export import TOKENIZER_FILES, load_checkpoint_weights
from pretrain.model import BertForPreTraining, ModelConfig, model_config

# ModelConfig fields phase 2 may change from the phase-1 model it starts from; the rest shape the weights
TRAINING_ONLY_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "activation_checkpointing",
                        "initializer_range")
# dense bf16/fp16 tensor-core peak TFLOP/s per GPU, for model FLOPs utilization (first matching name wins)
PEAK_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0), ("A100", 312.0),
               ("L40S", 362.0), ("A10", 125.0), ("L4", 121.0), ("V100", 125.0))
USER_DS_FORBIDDEN = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                     "optimizer", "scheduler")
log = logging.getLogger(LOGGER_NAME)
STEP_STATS = ("loss", "mlm_loss", "nsp_loss", "mlm_correct", "mlm_count", "nsp_correct", "nsp_count",
              "micro_batches", "data_wait_s")


@dataclasses.dataclass(frozen=True)
class Run:
    phase: str
    phase_dir: Path
    config: TrainConfig
    model: ModelConfig
    data: PretrainingData
    vocab_dir: Path
    vocab_size: int  # tokens in vocab.txt (the model's vocabulary is this padded to a multiple of 8)
    init: dict | None  # phase 2: {"phase_dir", "tag", "step"} of the phase-1 checkpoint it started from
    resume: tuple[str, dict] | None  # (tag, meta) of this phase's own latest checkpoint
    world_size: int
    grad_accumulation: int
    precision: str  # fp32 | bf16 | fp16
    user_ds_config: dict

    @property
    def complete(self) -> bool:
        return self.resume is not None and self.resume[1]["step"] >= self.config.steps


def prepare(phase: str, data_dir: Path, out_dir: Path, config: TrainConfig, vocab_dir: Path | None = None,
            init_dir: Path | None = None, deepspeed_config: Path | None = None,
            preset_flag: str | None = None) -> Run:
    """Every check that can fail before training; ConfigError (exit 2) with one line on the first problem."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    per_step = config.micro_batch * world_size
    if config.global_batch % per_step:
        raise ConfigError(f"global_batch {config.global_batch} is not a multiple of micro_batch {config.micro_batch}"
                          f" x {world_size} rank(s) = {per_step}; change global_batch or micro_batch")
    phase_dir = Path(out_dir) / phase
    find_data_files(data_dir)  # a wrong --data is reported as such, before the vocabulary search fails
    vocab_dir = Path(vocab_dir) if vocab_dir else find_vocab_dir(data_dir)
    try:
        vocab = read_vocab(vocab_dir / "vocab.txt")
    except PipelineError as e:
        raise ConfigError(str(e)) from None

    resume = checkpoint.latest(phase_dir)
    if resume is not None and not (phase_dir / "hparams.json").is_file():
        raise ConfigError(f"{phase_dir / 'hparams.json'}: missing, so the checkpoint's settings are unknown")
    init = None
    if phase == "phase2":
        init = (_read_json(phase_dir / "hparams.json")["init"] if resume
                else _find_init(Path(init_dir) if init_dir else Path(out_dir) / "phase1"))
        model, config = _continued_model(phase_dir if resume else Path(init["phase_dir"]), config, preset_flag)
    else:
        try:
            model = model_config(config.preset, len(vocab), **config.model)
        except ValueError as e:
            raise ConfigError(f"model: {e}") from None
    if resume:
        _check_resumable(phase_dir, resume, _read_json(phase_dir / "hparams.json"), config, world_size)
    if resume or init:
        _check_same_vocab(vocab_dir / "vocab.txt", Path(phase_dir if resume else init["phase_dir"]) / "tokenizer" /
                          "vocab.txt", "the vocabulary the model was trained with")
    _check_same_vocab(vocab_dir / "vocab.txt", Path(data_dir) / "vocab.txt", "the vocabulary of the HDF5 files")
    if len(vocab) > model.vocab_size:
        raise ConfigError(f"{vocab_dir / 'vocab.txt'}: {len(vocab)} tokens, more than the model's vocabulary "
                          f"({model.vocab_size})")
    if config.seq_len > model.max_position_embeddings:
        raise ConfigError(f"seq_len {config.seq_len} is longer than the model's max_position_embeddings "
                          f"{model.max_position_embeddings}")
    data = open_data(data_dir, config.seq_len, len(vocab), world_size)
    if deepspeed_config is not None and not Path(deepspeed_config).is_file():
        raise ConfigError(f"{deepspeed_config}: DeepSpeed config file not found")
    user_ds = _read_json(deepspeed_config) if deepspeed_config else {}
    if not isinstance(user_ds, dict):
        raise ConfigError(f"{deepspeed_config}: expected a JSON object")
    forbidden = [k for k in USER_DS_FORBIDDEN if k in user_ds]
    if forbidden:
        raise ConfigError(f"{deepspeed_config}: {forbidden[0]} is set by wiki2bert (global_batch, micro_batch, "
                          f"optimizer, lr in the pretrain config); remove it")
    return Run(phase=phase, phase_dir=phase_dir, config=config, model=model, data=data, vocab_dir=vocab_dir,
               vocab_size=len(vocab), init=init, resume=resume, world_size=world_size,
               grad_accumulation=config.global_batch // per_step, precision=_precision(config.precision),
               user_ds_config=user_ds)


def train(run: Run) -> int:
    """Train until the phase's last step, `steps_this_run` steps, or a stop signal; returns the exit code."""
    single_process_env()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    c = run.config
    log = setup_logging(run.phase_dir / "train.log" if rank == 0 else None, quiet=rank != 0)
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    else:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    _seed(c.seed + rank)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = BertForPreTraining(run.model)
    if run.init is not None and run.resume is None:
        model.load_state_dict(load_checkpoint_weights(checkpoint.checkpoint_dir(run.init["phase_dir"]),
                                                      run.init["tag"]))
        log.info("phase 2 starts from %s, step %d", run.init["phase_dir"], run.init["step"])
    from pretrain.optimizers import build_optimizer

    optimizer = build_optimizer(model, c.optimizer, lr=c.lr, weight_decay=c.weight_decay, betas=tuple(c.betas),
                                eps=c.eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupPolyDecay(c.steps, int(c.warmup * c.steps), c.decay_power))
    zero_stage = c.zero_stage if c.zero_stage is not None else _zero_stage_for(model.num_parameters())
    ds_config = deepspeed_config(run, zero_stage)
    if rank == 0:
        _write_run_files(run, ds_config, model, zero_stage)
    if zero_stage and c.optimizer in ("lamb", "lans"):
        log.warning("ZeRO stage %d flattens the parameters: %s's trust ratios are per partition, not per tensor",
                    zero_stage, c.optimizer)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)

    step, data_state, rng = 0, None, None
    if run.resume is not None:
        client = checkpoint.load(engine, run.phase_dir, run.resume[0])
        step = client["step"]
        data_state = DataState.from_dict(client["ranks"][rank]["data"])
        rng = client["ranks"][rank]["rng"]
        log.info("resumed from %s at step %d", checkpoint.checkpoint_dir(run.phase_dir) / run.resume[0], step)
    last = min(c.steps, step + c.steps_this_run) if c.steps_this_run else c.steps
    log.info("%s: steps %d..%d of %d, %s parameters, %d rank(s) x micro-batch %d x accumulation %d = %d, %s, "
             "ZeRO %d", run.phase, step + 1, last, c.steps, f"{model.num_parameters():,}", run.world_size,
             c.micro_batch, run.grad_accumulation, c.global_batch, run.precision, zero_stage)
    with contextlib.ExitStack() as cleanup:
        batches = iter(make_loader(run.data, c.micro_batch, run.vocab_size, rank, run.world_size, c.seed,
                                   c.loader_workers, data_state, pin_memory=torch.cuda.is_available()))
        # the workers ignore SIGTERM (see data.py), so they are stopped here, whatever happens: at interpreter exit
        # multiprocessing would SIGTERM them and wait forever (e.g. after an exception that keeps the iterator)
        if c.loader_workers:  # a loader without workers has none to stop
            cleanup.callback(batches._shutdown_workers)
        if rng is not None:
            checkpoint.set_rng_state(rng)  # after the loader's workers are started: dropout continues exactly
        metrics = MetricsLog(run, model.flops_per_sequence(c.seq_len, run.data.max_predictions), rank == 0, step)
        cleanup.callback(metrics.close)
        bar = cleanup.enter_context(progress(total=c.steps, initial=step, desc=run.phase, unit="step",
                                             quiet=rank != 0))
        stop = cleanup.enter_context(StopSignal(log, run.world_size))
        stats = torch.zeros(len(STEP_STATS), dtype=torch.float64, device=engine.device)
        saved = logged = step
        stopped = False
        while step < last:
            with _profiling(engine, run, step + 1, rank):
                done = _train_step(engine, batches, run, stats, step + 1, stop)
            if done is None:
                stopped = True
                break
            lr, grad_norm, data_state = done
            rng = checkpoint.rng_state()  # the state the next step starts with, saved with this step
            step += 1
            bar.update(1)
            if step % c.log_every == 0 or step == last:
                row = metrics.row(step, stats, lr, grad_norm)
                bar.set_postfix(loss=f"{row['loss']:.4f}")
                logged = step
            if step % c.checkpoint_every == 0 or step == last:
                _save(engine, run, step, data_state, rng)
                metrics.restart_clock()
                saved = step
        if stopped and step > saved:  # the last completed step: the abandoned one left no trace in the engine
            if step > logged:
                metrics.row(step, stats, lr, grad_norm)
            _save(engine, run, step, data_state, rng)
            saved = step
    if stopped:
        log.warning("stopped by signal %d; %s", stop.signum,
                    f"checkpoint of step {saved} saved; re-run the same command to resume" if saved else
                    "no step was completed, nothing saved; re-run the same command to start")
        return 128 + stop.signum
    if step < c.steps:
        log.info("stopped after step %d of %d (steps_this_run); re-run the same command to continue", step, c.steps)
    else:
        log.info("%s complete: %d steps, checkpoint in %s", run.phase, step,
                 checkpoint.checkpoint_dir(run.phase_dir))
    return 0


def _train_step(engine, batches, run: Run, stats: torch.Tensor, step: int, stop: StopSignal):
    """One optimizer step (`grad_accumulation` micro-batches). Adds the step's sums to `stats`; returns the
    learning rate used, the gradient norm (None if not measured) and the data position after the step.

    Returns None, adding nothing, when a stop signal is agreed before one of its micro-batches: the step is
    abandoned. DeepSpeed changes the weights, optimizer, schedule and its step counters only in the step() of the
    last micro-batch, and gradients are not part of a checkpoint, so the engine then still holds the state of the
    last completed step; the gradients it has accumulated are dropped with the process."""
    log_step = step % run.config.log_every == 0
    lr = grad_norm = None
    step_stats = torch.zeros_like(stats)
    for micro in range(run.grad_accumulation):
        if stop.agreed():
            log.warning("step %d abandoned after %d of %d micro-batches", step, micro, run.grad_accumulation)
            return None
        start = time.perf_counter()
        batch = next(batches)
        wait = time.perf_counter() - start
        data_state, problem = batch.pop("data_state"), batch.pop("problem")
        if problem:
            raise PipelineError(problem)
        batch = {k: v.to(engine.device, non_blocking=True) for k, v in batch.items()}
        out = engine(**batch)
        engine.backward(out.loss)
        if micro == run.grad_accumulation - 1:
            lr = engine.optimizer.param_groups[0]["lr"]
            if log_step and engine.zero_optimization_stage() == 0:
                grad_norm = _grad_norm(engine)  # DeepSpeed keeps no norm without ZeRO
        engine.step()
        step_stats += torch.stack([out.loss.detach().double(), out.mlm_loss.detach().double(),
                                   out.nsp_loss.detach().double(), out.mlm_correct.double(), out.mlm_count.double(),
                                   out.nsp_correct.double(), out.nsp_count.double(),
                                   torch.ones((), dtype=torch.float64, device=stats.device),
                                   torch.tensor(wait, dtype=torch.float64, device=stats.device)])
    stats += step_stats
    ds_norm = engine.get_global_grad_norm()
    return lr, float(ds_norm) if ds_norm is not None else grad_norm, data_state


def _save(engine, run: Run, step: int, data_state: dict, rng: dict) -> None:
    mine = {"data": data_state, "rng": rng}
    ranks = [None] * run.world_size
    torch.distributed.all_gather_object(ranks, mine)
    client = {"phase": run.phase, "step": step, "world_size": run.world_size, "ranks": ranks,
              "config": config_to_dict(run.config)}
    meta = {"phase": run.phase, "steps": run.config.steps, "world_size": run.world_size,
            "samples_seen": step * run.config.global_batch}
    checkpoint.save(engine, run.phase_dir, step, meta, client, run.config.keep_checkpoints)


class WarmupPolyDecay:
    """Learning-rate factor of optimizer step t (0-based): linear warmup over `warmup_steps`, then
    (1 - progress) ** power with progress from 0 at the end of warmup to 1 at `total_steps`."""

    def __init__(self, total_steps: int, warmup_steps: int, power: float):
        self.total_steps, self.warmup_steps, self.power = total_steps, warmup_steps, power

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        return max(0.0, 1.0 - progress) ** self.power


def deepspeed_config(run: Run, zero_stage: int) -> dict:
    c = run.config
    ds = {
        "train_batch_size": c.global_batch,
        "train_micro_batch_size_per_gpu": c.micro_batch,
        "gradient_accumulation_steps": run.grad_accumulation,
        "gradient_clipping": c.grad_clip,
        "zero_optimization": {"stage": zero_stage},
        "zero_allow_untested_optimizer": True,  # our LAMB/LANS are client optimizers
        "steps_per_print": 2 ** 62,  # progress goes to our own log
    }
    # 16 bits without ZeRO: torch.autocast, so the parameters stay fp32 and reach LAMB/LANS one tensor each
    # (exact per-tensor trust ratios; 16 bytes of model states per parameter). Under ZeRO the optimizer sees
    # flat partitions anyway, and DeepSpeed's own mixed precision keeps 16-bit weights and gradients (less memory).
    if run.precision != "fp32":
        if zero_stage == 0:  # fp16: with a dynamic GradScaler
            ds["torch_autocast"] = {"enabled": True, "dtype": {"bf16": "bfloat16", "fp16": "float16"}[run.precision]}
        elif run.precision == "bf16":
            ds["bf16"] = {"enabled": True}
        else:
            ds["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}  # dynamic loss scaling
    return deep_merge(ds, run.user_ds_config)


def _metrics_step(line: str) -> float:
    """The step of a metrics.jsonl row; inf for a blank or cut-off row (a crash mid-write), so it is dropped."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


class MetricsLog:
    """Rows of metrics.jsonl and TensorBoard scalars (rank 0), from step sums all-reduced over the ranks."""

    def __init__(self, run: Run, flops_per_sequence: float, writer: bool, start_step: int):
        self.run, self.flops_per_sequence = run, flops_per_sequence
        self.file = self.tb = None
        if writer:
            path = run.phase_dir / "metrics.jsonl"
            if path.is_file():  # resuming: drop the rows of steps after the checkpoint, they are done again
                rows = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                        if _metrics_step(line) <= start_step]
                with atomic_write(path) as f:
                    f.writelines(rows)
            from torch.utils.tensorboard import SummaryWriter

            self.file = open(path, "a", encoding="utf-8")
            self.tb = SummaryWriter(str(run.phase_dir / "tb"))
        self.peak = _peak_tflops() if run.precision != "fp32" else None
        self.restart_clock()

    def restart_clock(self) -> None:
        self.start, self.steps = time.perf_counter(), 0

    def row(self, step: int, stats: torch.Tensor, lr: float, grad_norm: float | None) -> dict:
        if torch.distributed.is_initialized():
            torch.distributed.all_reduce(stats)
        s = dict(zip(STEP_STATS, stats.tolist()))
        stats.zero_()
        steps = s["micro_batches"] / (self.run.grad_accumulation * self.run.world_size)
        elapsed = time.perf_counter() - self.start
        samples_per_s = steps * self.run.config.global_batch / elapsed
        tflops = samples_per_s * self.flops_per_sequence / 1e12
        row = {"step": step, "loss": s["loss"] / s["micro_batches"], "mlm_loss": s["mlm_loss"] / s["micro_batches"],
               "nsp_loss": s["nsp_loss"] / s["micro_batches"],
               "mlm_accuracy": s["mlm_correct"] / max(1.0, s["mlm_count"]),
               "nsp_accuracy": s["nsp_correct"] / max(1.0, s["nsp_count"]), "lr": lr, "grad_norm": grad_norm,
               "samples_per_s": samples_per_s, "tokens_per_s": samples_per_s * self.run.config.seq_len,
               "tflops": tflops,
               "data_wait_s": s["data_wait_s"] / self.run.world_size,
               "data_wait_share": s["data_wait_s"] / self.run.world_size / elapsed}
        if self.peak:
            row["mfu"] = tflops / self.run.world_size / self.peak
        if torch.cuda.is_available():
            row["gpu_memory_gb"] = torch.cuda.max_memory_allocated() / 2 ** 30
            torch.cuda.reset_peak_memory_stats()
        else:
            row["max_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
        if self.file:
            self.file.write(json.dumps(row) + "\n")
            self.file.flush()
            for key, value in row.items():
                if key != "step" and value is not None:
                    self.tb.add_scalar(f"train/{key}", value, step)
        self.restart_clock()
        return row

    def close(self) -> None:
        if self.file:
            self.file.close()
            self.tb.close()


class StopSignal:
    """SIGTERM/SIGINT ask the loop to stop within a micro-batch, whatever the gradient accumulation: before each
    micro-batch every rank calls `agreed()`, true on all ranks at the same micro-batch once any rank got a signal
    (a MAX all-reduce on a CPU (gloo) group: no GPU synchronisation). A second SIGINT interrupts at once."""

    def __init__(self, log: logging.Logger, world_size: int):
        self.log, self.signum, self._previous = log, None, {}
        self._group = torch.distributed.new_group(backend="gloo") if world_size > 1 else None

    def __enter__(self):
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def agreed(self) -> bool:
        """Collective: whether any rank got a stop signal (its number becomes `signum` on every rank)."""
        if self._group is None:
            return self.signum is not None
        flag = torch.tensor([self.signum or 0], dtype=torch.int32)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=self._group)
        self.signum = self.signum or int(flag) or None
        return self.signum is not None

    def _handle(self, signum, frame):
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        self.log.warning("signal %d: abandoning the step in progress, saving the last completed one", signum)


def _grad_norm(engine) -> float | None:
    grads = [p.grad for p in engine.module.parameters() if p.grad is not None]
    if not grads:
        return None
    norm = float(torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads])))
    scaler = engine.torch_autocast_z0_gradscaler  # fp16 without ZeRO: the gradients are still scaled here
    return norm / scaler.get_scale() if scaler is not None else norm


@contextlib.contextmanager
def _profiling(engine, run: Run, step: int, rank: int):
    """DeepSpeed's flops profiler (rank 0, the forward passes of the step's micro-batches -> flops_profile.txt)
    and torch.profiler (-> profile/), around the steps the config names. The flops profiler is driven directly,
    not through the DeepSpeed config: enabled there, DeepSpeed 0.19 fails in backward without ZeRO."""
    with contextlib.ExitStack() as stack:
        if step == run.config.flops_profiler_step and rank == 0:
            from deepspeed.profiling.flops_profiler import FlopsProfiler

            flops = FlopsProfiler(engine.module)
            flops.start_profile()
            stack.callback(flops.end_profile)
            stack.callback(flops.print_model_profile, profile_step=step, top_modules=3,
                           output_file=str(run.phase_dir / "flops_profile.txt"))
            stack.callback(flops.stop_profile)
        if step in run.config.torch_profiler_steps:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            prof = torch.profiler.profile(activities=activities)
            stack.callback(_save_torch_profile, prof, run.phase_dir / "profile", f"step{step}_rank{rank}")
            stack.enter_context(prof)  # exits (and stops) before the callback above saves
        yield


def _save_torch_profile(prof, out: Path, name: str) -> None:
    out.mkdir(exist_ok=True)
    prof.export_chrome_trace(str(out / f"{name}.json"))
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    (out / f"{name}.txt").write_text(prof.key_averages().table(sort_by=sort, row_limit=40), encoding="utf-8")


def _write_run_files(run: Run, ds_config: dict, model: BertForPreTraining, zero_stage: int) -> None:
    d = run.phase_dir
    d.mkdir(parents=True, exist_ok=True)
    write_json(d / "hparams.json", {
        "phase": run.phase, "config": config_to_dict(run.config), "seed": run.config.seed,
        "model": dataclasses.asdict(run.model), "num_parameters": model.num_parameters(),
        "data_dir": str(Path(run.data.data_dir).resolve()), "data_files": len(run.data.files),
        "data_samples": run.data.samples, "max_predictions": run.data.max_predictions,
        "vocab_dir": str(run.vocab_dir.resolve()), "vocab_tokens": run.vocab_size, "init": run.init,
        "world_size": run.world_size, "gradient_accumulation": run.grad_accumulation,
        "precision": run.precision, "zero_stage": zero_stage, "command": sys.argv})
    write_json(d / "ds_config.json", ds_config)
    write_json(d / "model_config.json", dataclasses.asdict(run.model))
    (d / "tokenizer").mkdir(exist_ok=True)
    for name in TOKENIZER_FILES:
        if (run.vocab_dir / name).is_file():
            shutil.copyfile(run.vocab_dir / name, d / "tokenizer" / name)
    code_dir = Path(__file__).resolve().parent.parent
    (d / "githash.log").write_text(_git(code_dir, "rev-parse", "HEAD"), encoding="utf-8")
    (d / "gitdiff.log").write_text(_git(code_dir, "diff", "HEAD"), encoding="utf-8")
    versions = {f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions()}
    (d / "pip_freeze.txt").write_text("\n".join(sorted(versions, key=str.lower)) + "\n", encoding="utf-8")


def _git(code_dir: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(code_dir), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "not a git checkout\n"
    return done.stdout if done.returncode == 0 else "not a git checkout\n"


def _check_resumable(phase_dir: Path, resume: tuple[str, dict], hparams: dict, config: TrainConfig,
                     world_size: int) -> None:
    tag, meta = resume
    if meta["world_size"] != world_size:
        raise ConfigError(f"{checkpoint.checkpoint_dir(phase_dir) / tag}: written by {meta['world_size']} rank(s); "
                          f"resume it with the same number of processes (this run has {world_size})")
    before, now = hparams["config"], config_to_dict(config)
    for key, value in now.items():
        if key not in CHANGEABLE_ON_RESUME and before.get(key) != value:
            raise ConfigError(f"{phase_dir}: resuming a run started with {key}={before.get(key)!r}, now {value!r};"
                              f" keep the run's settings or use another --out")


def _find_init(init_dir: Path) -> dict:
    found = checkpoint.latest(init_dir) if init_dir.is_dir() else None
    if found is None:
        raise ConfigError(f"{init_dir}: no checkpoint to start phase 2 from (expected {init_dir}/checkpoints/latest;"
                          f" pass --init PHASE1_DIR)")
    if not (init_dir / "model_config.json").is_file():
        raise ConfigError(f"{init_dir / 'model_config.json'}: missing; is {init_dir} a pretrain phase directory?")
    tag, meta = found
    return {"phase_dir": str(init_dir.resolve()), "tag": tag, "step": meta["step"]}


def _continued_model(source_dir: Path, config: TrainConfig, preset_flag: str | None
                     ) -> tuple[ModelConfig, TrainConfig]:
    """Phase 2's model: that of the phase-1 run it starts from (or of its own run, when resuming), where only
    training-time settings may change."""
    saved = _read_json(source_dir / "model_config.json")
    if saved is None:
        raise ConfigError(f"{source_dir / 'model_config.json'}: missing; is {source_dir} a pretrain phase directory?")
    preset = (_read_json(source_dir / "hparams.json") or {}).get("config", {}).get("preset", config.preset)
    if preset_flag is not None and preset_flag != preset:
        raise ConfigError(f"--preset {preset_flag}: phase 2 continues the {preset} model of {source_dir}")
    changed = [k for k in config.model if k not in TRAINING_ONLY_FIELDS and config.model[k] != saved.get(k)]
    if changed:
        raise ConfigError(f"model.{changed[0]}: phase 2 cannot change the shape of the model in {source_dir} "
                          f"(only {', '.join(TRAINING_ONLY_FIELDS)})")
    try:
        model = ModelConfig(**{**saved, **config.model})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{source_dir / 'model_config.json'}: {e}") from None
    return model, dataclasses.replace(config, preset=preset)


def _check_same_vocab(vocab: Path, reference: Path, what: str) -> None:
    if reference.is_file() and reference.read_bytes() != vocab.read_bytes():
        raise ConfigError(f"{vocab}: differs from {what} ({reference})")


def _precision(choice: str) -> str:
    cuda = torch.cuda.is_available()
    if choice == "auto" and cuda:
        # this rank's GPU, asked without creating a CUDA context (on GPU 0, for every rank)
        ampere = torch.cuda.get_device_capability(int(os.environ.get("LOCAL_RANK", "0")))[0] >= 8
        return "bf16" if ampere else "fp16"
    if choice == "auto":
        return "fp32"
    if choice == "fp16" and not cuda:
        raise ConfigError("precision fp16: needs a GPU (DeepSpeed refuses fp16 on CPU); use fp32 or bf16")
    return choice


def _zero_stage_for(parameters: int) -> int:
    return 0 if parameters < 1e9 else 1 if parameters < 3e9 else 2


def _peak_tflops() -> float | None:
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((peak for key, peak in PEAK_TFLOPS if key in name), None)


def single_process_env() -> None:
    """Without a launcher, DeepSpeed needs the env:// rendezvous variables (else it looks for MPI)."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2 ** 32)
    torch.manual_seed(seed)


def _read_json(path: Path) -> dict | None:
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None

