"""The training loop of one pretraining phase on DeepSpeed: builds the engine for a prepared `Run` (see run.py),
trains until the phase's last step, `steps_this_run` steps or a stop signal, logging metrics and saving checkpoints.

Run directory (`<out>/<phase>/`): the provenance files (run_files.py), train.log, metrics.jsonl and tb/
(metrics.py), checkpoints/ (checkpoint.py), flops_profile.txt and profile/ when profiling (profiling.py).
"""
from __future__ import annotations

import contextlib
import logging
import os
import random
import time

import numpy as np
import torch

from core.config import config_to_dict
from core.errors import PipelineError
from core.log import LOGGER_NAME, progress, setup_logging
from pretrain import checkpoint
from pretrain.data import DataState, make_loader
from pretrain.engine import deepspeed_config, single_process_env, zero_stage_for
from pretrain.metrics import STEP_STATS, MetricsLog, step_stats
from pretrain.model import BertForPreTraining
from pretrain.profiling import profiling
from pretrain.run import Run
from pretrain.run_files import write_run_files
from pretrain.schedule import WarmupPolyDecay
from pretrain.signals import StopSignal

log = logging.getLogger(LOGGER_NAME)


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

    from pretrain.optimizers import build_optimizer
    from pretrain.zero_partitions import use_tensor_trust_ratios

    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    _seed(c.seed + rank)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = BertForPreTraining(run.model)
    if run.init is not None and run.resume is None:
        model.load_state_dict(checkpoint.load_weights(run.init.checkpoint))
        log.info("phase 2 starts from %s, step %d", run.init.phase_dir, run.init.step)
    optimizer = build_optimizer(model, c.optimizer, lr=c.lr, weight_decay=c.weight_decay, betas=tuple(c.betas),
                                eps=c.eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupPolyDecay(c.steps, int(c.warmup * c.steps), c.decay_power))
    zero_stage = c.zero_stage if c.zero_stage is not None else zero_stage_for(model.num_parameters())
    ds_config = deepspeed_config(run, zero_stage)
    if rank == 0:
        write_run_files(run, ds_config, model.num_parameters(), zero_stage)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    use_tensor_trust_ratios(engine)  # under ZeRO 1/2: LAMB/LANS learn where each tensor lies in their partitions

    step, data_state, rng = 0, None, None
    if run.resume is not None:
        client = checkpoint.load(engine, run.resume)
        step = client["step"]
        data_state = DataState.from_dict(client["ranks"][rank]["data"])
        rng = client["ranks"][rank]["rng"]
        log.info("resumed from %s at step %d", run.resume.path, step)
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
            with profiling(engine, c, run.phase_dir, step + 1, rank):
                done = _train_step(engine, batches, run, stats, step + 1, stop)
            if done is None:
                stopped = True
                break
            lr, grad_norm, data_state = done
            rng = checkpoint.rng_state()  # the state the next step starts with: saved with this step
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
        if stopped and step > saved:  # the last completed step; the abandoned one left no trace in the engine
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
    sums = torch.zeros_like(stats)
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
        sums += step_stats(out, wait, stats.device)
    stats += sums
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


def _grad_norm(engine) -> float | None:
    grads = [p.grad for p in engine.module.parameters() if p.grad is not None]
    if not grads:
        return None
    norm = float(torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads])))
    scaler = engine.torch_autocast_z0_gradscaler  # fp16 without ZeRO: the gradients are still scaled here
    return norm / scaler.get_scale() if scaler is not None else norm


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2 ** 32)
    torch.manual_seed(seed)
