"""The training loop of one pretraining phase on DeepSpeed: builds the engine for a prepared `Run` (see prepare.py),
trains until the phase's last step, `steps_this_run` steps or a stop signal, logging metrics and saving checkpoints.

Run directory (`<out>/<phase>/`): .lock (one run at a time: wiki2bert_core/dir_lock.py), the provenance files
(run_files.py), train.log, metrics.jsonl and tb/ (metrics.py), checkpoints/ (checkpoint.py), flops_profile.txt and
profile/ when profiling (profiling.py). The loop saves checkpoints through one call (checkpointer.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
import random
import time

import numpy as np
import torch

from wiki2bert_core.dir_lock import lock_directory
from wiki2bert_core.errors import DataError
from wiki2bert_core.log import LOGGER_NAME, progress, setup_logging
from pretrain import load_communication_op
from pretrain.model import checkpoint_files
from pretrain.run import checkpoint
from pretrain.run.checkpointer import Checkpointer
from pretrain.model.attention import choose_attention
from pretrain.config import TrainConfig, budget_seconds
from pretrain.data.loader import DataState, make_loader, model_inputs, redistribute
from pretrain.run.deepspeed_settings import autocast_dtype, deepspeed_config, single_process_env, zero_stage_for
from pretrain.run.evaluate import HeldOut, evaluate, format_figures
from pretrain.model.hf_weights import init_new_rows, load_matching, module_names
from pretrain.run.metrics import STEP_STATS, MetricsLog, batch_counts, step_stats
from pretrain.model.arch import pretraining_model, spec
from pretrain.run.profiling import profiling
from pretrain.run.prepare import Run
from pretrain.run.run_files import write_run_files
from pretrain.optim.schedule import lr_schedule
from pretrain.run.signals import StopSignal
from pretrain.run.budget import Budget
from pretrain.run.time_plan import EvalCadence, TimePlan, duration, eval_cadence, scale_warning


log = logging.getLogger(LOGGER_NAME)


@dataclasses.dataclass
class Started:
    """A run's DeepSpeed engine, at the step it starts from (0, or the checkpoint's), with the data position and
    RNG states to continue with (None: start afresh)."""
    engine: object
    zero_stage: int
    step: int = 0
    data_state: DataState | None = None
    rng: dict | None = None
    budget_spent_s: float = 0.0  # of the phase's time budget, by the runs before this one


def start(run: Run) -> Started:
    """The engine of `run` (model, LAMB/LANS/AdamW, schedule, DeepSpeed config), resumed from the run's checkpoint
    if it has one, also one written by another number of ranks. Writes the run files (rank 0)."""
    join_process_group()
    rank = int(os.environ["RANK"])
    c = run.config
    _seed(c.seed + rank)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = pretraining_model(run.model, nsp_head=c.objective == "mlm+nsp")
    if run.init is not None and run.resume is None:
        _load_init(model, run)
    model.attention = _attention_kernel(run, model, rank, log)
    zero_stage = c.zero_stage if c.zero_stage is not None else zero_stage_for(model.num_parameters())
    # a ZeRO checkpoint of another number of ranks is read as DeepSpeed's universal checkpoint (checkpoint.load)
    universal = run.resume is not None and run.resume.meta["world_size"] != run.world_size and zero_stage > 0
    ds_config = deepspeed_config(c, run.grad_accumulation, run.precision, run.user_ds_config, zero_stage)
    if universal:
        ds_config["checkpoint"] = {**ds_config.get("checkpoint", {}), "load_universal": True}
    if rank == 0:
        write_run_files(run, ds_config, model.num_parameters(), zero_stage)
    started = Started(build_engine(model, c, ds_config), zero_stage)
    if run.resume is None:
        return started
    client = checkpoint.load(started.engine, run.resume, universal=universal)
    started.step = client["step"]
    started.budget_spent_s = client.get("budget_spent_s", 0.0)
    saved_ranks = len(client["ranks"])
    if saved_ranks == run.world_size:
        started.data_state = DataState.from_dict(client["ranks"][rank]["data"])
        started.rng = client["ranks"][rank]["rng"]
        log.info("resumed from %s at step %d", run.resume.path, started.step)
    else:  # the data order changes with the ranks (data.redistribute); fresh dropout streams
        states = [DataState.from_dict(r["data"]) for r in client["ranks"]]
        started.data_state = redistribute(states, run.world_size)[rank]
        _seed(c.seed + rank + 1_000_003 * started.step)
        log.info("resumed from %s at step %d: written by %d rank(s), resumed on %d; the rest of epoch %d is dealt "
                 "out anew", run.resume.path, started.step, saved_ranks, run.world_size, started.data_state.epoch)
    return started


def build_engine(model: torch.nn.Module, c: TrainConfig, ds_config: dict):
    """DeepSpeed's engine of `model` with the optimizer and learning-rate schedule `c` asks for."""
    import deepspeed

    from pretrain.optim.optimizers import build_optimizer
    from pretrain.optim.zero_partitions import use_tensor_trust_ratios

    optimizer = build_optimizer(model, c.optimizer, lr=c.lr, weight_decay=c.weight_decay, betas=tuple(c.betas),
                                eps=c.eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(c))
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    use_tensor_trust_ratios(engine)  # under ZeRO 1/2: LAMB/LANS learn where each tensor lies in their partitions
    return engine


def train(run: Run) -> int:
    """Train until the phase's last step, `steps_this_run` steps, or a stop signal; returns the exit code."""
    # what is alive now (the imported torch, DeepSpeed, transformers: ~1e6 objects) lives as long as the process: out
    # of the collector's full passes, so that each pass (and leave_process_groups's) walks only the run's objects (a
    # tiny phase in a fresh process: 3.6-3.9 -> 3.1-3.4 CPU-s, docs/performance.md)
    gc.freeze()
    try:
        return _train(run)
    finally:
        if torch.distributed.is_initialized():
            leave_process_groups()


def leave_process_groups() -> None:
    """End every process group's gloo threads now: left to the interpreter's teardown, they now and then abort a
    finished rank ('terminate called without an active exception'). torch's destroy_process_group keeps DeepSpeed's
    own groups (deepspeed.utils.groups) alive, DeepSpeed's releases them; an engine holds the others in reference
    cycles, which the collector frees once nothing reaches the engine (call this after its holder returned)."""
    import deepspeed.comm

    deepspeed.comm.destroy_process_group()
    gc.collect()


def _train(run: Run) -> int:
    single_process_env()
    rank = int(os.environ["RANK"])
    c = run.config
    _lock_phase_dir(run, rank)
    log = setup_logging(run.phase_dir / "train.log" if rank == 0 else None, quiet=rank != 0)
    if rank == 0 and (warning := scale_warning(run.phase, c, run.world_size, torch.cuda.is_available())):
        log.warning(warning)
    started = start(run)
    engine, step, data_state, rng = started.engine, started.step, started.data_state, started.rng
    model = engine.module
    run_last = min(c.steps, step + c.steps_this_run) if c.steps_this_run else c.steps
    _log_plan(run, started, run_last)
    with contextlib.ExitStack() as cleanup:
        batches = _batches(run, rank, data_state, cleanup, step + 1)
        if rng is not None:
            checkpoint.set_rng_state(rng)  # after the loader's workers are started: dropout continues exactly
        metrics = MetricsLog(run, model.training_flops, rank == 0, step)
        cleanup.callback(metrics.close)
        bar = cleanup.enter_context(progress(total=c.steps, initial=step, desc=run.phase, unit="step",
                                             quiet=rank != 0))
        stop = cleanup.enter_context(StopSignal(log, run.world_size))
        checkpointer = cleanup.enter_context(Checkpointer(engine, run, step))
        stats = torch.zeros(len(STEP_STATS), dtype=torch.float64, device=engine.device)
        held_out, evaluations = _held_out(run, rank, log)
        budget = _budget(run, started, log) if c.budget else None
        checkpointer.budget = budget
        last = min(run_last, budget.last) if budget else run_last
        plan = None if budget else TimePlan(run.phase, step, last, run.schedules.sequences(step + 1, last) //
                                            max(1, last - step), log, evaluations)
        logged, stopped = step, False
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
            if budget is not None:
                last = min(run_last, budget.step_done(step))
            if step % c.log_every == 0 or step == last:
                row = metrics.row(step, stats, lr, grad_norm, run.schedules.row(step))
                bar.set_postfix(loss=f"{row['loss']:.4f}", real_tok_s=f"{row['real_tokens_per_s']:,.0f}",
                                padding=f"{row['padding_share']:.0%}", refresh=False)
                logged = step
            if evaluations and (evaluations.due(step) or budget is not None and budget.ends_at(step)) and \
                    not _evaluate(model, held_out, run, step, metrics, log, stop):
                stopped = True
                break
            if step % c.checkpoint_every == 0 or step == last:
                checkpointer.save(step, data_state, rng, last_step=step == last)
                metrics.restart_clock()
            if plan is not None:
                plan.step_done(step)
        if step > max(logged, checkpointer.saved):  # stopped between saves: the row of the step saved next
            metrics.row(step, stats, lr, grad_norm, run.schedules.row(step))
        saved = checkpointer.close(step, data_state, rng)
    return _exit_code(run, step, saved, stop.signum if stopped else None, budget)


def _log_plan(run: Run, started: Started, last: int) -> None:
    c, first = run.config, started.step + 1
    log.info("%s: steps %d..%d of %d, %s parameters, %d rank(s) x micro-batch %d x accumulation %d = %d, %s, "
             "ZeRO %d", run.phase, first, last, c.steps, f"{started.engine.module.num_parameters():,}",
             run.world_size, c.micro_batch, run.schedules.accumulation(first), run.schedules.global_batch(first),
             run.precision, started.zero_stage)
    for key in run.schedules.scheduled:
        log.info("scheduled %s: %s", key, json.dumps(getattr(c, key)))
    if run.data.shares is not None:
        for progress, _, shares in run.data.mixtures:
            from_step = run.schedules.first_step_at(progress)
            log.info("languages%s (language_alpha %s, language_weights %s): %s",
                     f" from step {from_step}" if progress else "", run.schedules.value("language_alpha", from_step),
                     c.language_weights or "{}", ", ".join(f"{language} {share:.1%}" for language, share in
                                                           shares.items()))
    if run.masking is not None:
        log.info("dynamic masking: %g of each sequence's tokens, at most %d, %s", run.masking.rate,
                 run.masking.max_predictions, "whole words" if run.masking.whole_word else "single tokens")


def _batches(run: Run, rank: int, data_state: DataState | None, cleanup: contextlib.ExitStack, first_step: int):
    """This rank's micro-batches from `data_state` on, the first of step `first_step`. The loader's workers ignore
    SIGTERM (see loader.py), so they are stopped on leaving `cleanup`, whatever happens: at interpreter exit
    multiprocessing would SIGTERM them and wait forever (e.g. after an exception that keeps the iterator)."""
    c = run.config
    batches = iter(make_loader(run.data, c.micro_batch, run.vocab_size, rank, run.world_size, c.seed,
                               c.loader_workers, data_state, pin_memory=torch.cuda.is_available(),
                               pack=c.pack_sequences, masking=run.masking,
                               schedules=run.schedules if run.schedules.scheduled else None, first_step=first_step))
    if c.loader_workers:  # a loader without workers has none to stop
        cleanup.callback(batches._shutdown_workers)
    return batches


def _budget(run: Run, started: Started, log: logging.Logger) -> Budget:
    """The phase's time budget, fitting the engine's warmup-stable-decay schedule to it from `started.step` on."""
    c = run.config
    schedule = started.engine.lr_scheduler.lr_lambdas[0]
    return Budget(run.phase, budget_seconds(c.budget), schedule, c.warmup, c.cooldown, started.step, c.steps,
                  started.budget_spent_s, log, started.engine.device, run.world_size)


def _exit_code(run: Run, step: int, saved: int, stop_signum: int | None, budget: Budget | None = None) -> int:
    """Logs how the run ended; 128 + the signal's number for a run a signal stopped, else 0."""
    if stop_signum is not None:
        log.warning("stopped by signal %d; %s", stop_signum,
                    f"checkpoint of step {saved} saved; re-run the same command to resume" if saved else
                    "no step was completed, nothing saved; re-run the same command to start")
        return 128 + stop_signum
    if budget is not None and budget.ends_at(step):
        log.info("%s complete: its budget of %s spent at step %d (%.1f s of steps), checkpoint in %s", run.phase,
                 duration(budget.seconds), step, budget.spent_by_steps, checkpoint_files.checkpoint_dir(run.phase_dir))
    elif step < run.config.steps:
        log.info("stopped after step %d of %d (steps_this_run); re-run the same command to continue", step,
                 run.config.steps)
    else:
        log.info("%s complete: %d steps, checkpoint in %s", run.phase, step,
                 checkpoint_files.checkpoint_dir(run.phase_dir))
    return 0


def _load_init(model: torch.nn.Module, run: Run) -> None:
    """The weights of --init (phase 2: phase 1's) where they fit; the heads they do not hold keep their fresh
    initialisation, and the log names them and the tensors the objective leaves out."""
    fresh, unused = load_matching(model, run.init.weights(), run.init.path)
    log.info("%s starts from %s", run.phase, run.init)
    if run.new_token_pieces:
        init_new_rows(model, run.new_token_pieces)
        log.info("%d tokens the data's tokenizer adds to that of %s: their embeddings and decoder rows start from the "
                 "mean of their pieces' rows", len(run.new_token_pieces), run.init.path)
    if fresh:
        log.info("not in %s, initialised fresh: %s", run.init.path, ", ".join(module_names(fresh)))
    if unused:
        log.info("in %s, not used by this model (objective %s): %s", run.init.path, run.config.objective,
                 ", ".join(unused))


def join_process_group() -> None:
    """This process's place in the run's process group, unless it has one: the env:// rendezvous variables (one
    process without a launcher), its device, DeepSpeed's backend joined."""
    single_process_env()
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    else:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed.comm
    from deepspeed.accelerator import get_accelerator

    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    if not deepspeed.comm.is_initialized():
        load_communication_op()
        deepspeed.comm.init_distributed(dist_backend=get_accelerator().communication_backend_name())


def _lock_phase_dir(run: Run, rank: int) -> None:
    """Global rank 0 holds <phase_dir>/.lock for this run (the ranks of all nodes share the filesystem), taken before
    anything is written into the phase directory, or fails at once naming the run that holds it; the other ranks
    learn of a refusal from rank 0 and exit 1 without a line of their own: ranks started by hand (srun), with no
    launcher to stop them, waited in DeepSpeed's rendezvous for a rank 0 that had gone."""
    if run.world_size > 1:
        join_process_group()
    refusal = None
    if rank == 0:
        try:
            _take_lock(run)
        except Exception as e:  # also an unexpected one: the other ranks must not wait for rank 0
            refusal = e
    if run.world_size > 1:
        refused = torch.tensor([refusal is not None], dtype=torch.int32)
        group = torch.distributed.new_group(backend="gloo")  # a CPU tensor whatever the run's backend
        torch.distributed.broadcast(refused, src=0, group=group)
        torch.distributed.destroy_process_group(group)
        if rank != 0 and refused.item():
            raise SystemExit(1)
    if refusal is not None:
        raise refusal


def _take_lock(run: Run) -> None:
    """The phase directory's lock, and no checkpoint saved in it since `run` was prepared."""
    holder = lock_directory(run.phase_dir)
    if holder is not None:
        raise DataError(f"{run.phase_dir}: another pretraining run (pid {holder}) is using this phase directory; "
                        f"wait for it to finish or use another --out")
    latest = checkpoint_files.latest(run.phase_dir)
    if (latest and latest.tag) != (run.resume and run.resume.tag):  # a run that ended while this one was prepared
        raise DataError(f"{run.phase_dir}: another run saved a checkpoint since this one read the directory; "
                        f"re-run the command to go on from it")


def _train_step(engine, batches, run: Run, stats: torch.Tensor, step: int, stop: StopSignal):
    """One optimizer step (its global batch's micro-batches). Adds the step's sums to `stats`; returns the
    learning rate used, the gradient norm (None if not measured) and the data position after the step. A scheduled
    global_batch sets the engine's batch and the accumulation boundary itself: DeepSpeed's own boundary counts
    micro-batches since the start, which a changed accumulation puts out of step.

    Returns None, adding nothing, when a stop signal is agreed before one of its micro-batches: the step is
    abandoned. DeepSpeed changes the weights, optimizer, schedule and its step counters only in the step() of the
    last micro-batch, and gradients are not part of a checkpoint, so the engine then still holds the state of the
    last completed step; the gradients it has accumulated are dropped with the process."""
    log_step = step % run.config.log_every == 0
    lr = grad_norm = None
    sums = torch.zeros_like(stats)
    accumulation = run.schedules.accumulation(step)
    scheduled_batch = "global_batch" in run.schedules.scheduled
    if scheduled_batch:
        engine.set_train_batch_size(run.schedules.global_batch(step))
        if hasattr(engine.optimizer, "gradient_accumulation_steps"):  # ZeRO 1/2 keep a copy (their CPU offload reads it)
            engine.optimizer.gradient_accumulation_steps = accumulation
    for micro in range(accumulation):
        if stop.agreed():
            log.warning("step %d abandoned after %d of %d micro-batches", step, micro, accumulation)
            return None
        if scheduled_batch:
            engine.set_gradient_accumulation_boundary(micro == accumulation - 1)
        start = time.perf_counter()
        batch = next(batches)
        wait = time.perf_counter() - start
        batch, data_state = model_inputs(batch)
        counts = batch_counts(batch)
        batch = {k: v.to(engine.device, non_blocking=True) for k, v in batch.items()}
        out = engine(**batch)
        engine.backward(out.loss)
        if micro == accumulation - 1:
            lr = engine.optimizer.param_groups[0]["lr"]
            if log_step and engine.zero_optimization_stage() == 0:
                grad_norm = _grad_norm(engine)  # DeepSpeed keeps no norm without ZeRO
        engine.step()
        sums += step_stats(out, wait, counts, stats.device)
    stats += sums
    ds_norm = engine.get_global_grad_norm()
    return lr, float(ds_norm) if ds_norm is not None else grad_norm, data_state


def _held_out(run: Run, rank: int, log: logging.Logger) -> tuple[HeldOut, EvalCadence] | tuple[None, None]:
    if not run.eval_files:
        log.info("held-out evaluation: off (%s)", "eval_every 0" if run.config.eval_every == 0 else
                 f"no test/ split in {run.data.data_dir}; pass --eval-data DIR")
        return None, None
    held_out = HeldOut.read(run.eval_files, run.config.eval_samples, run.vocab_size,
                            run.model.max_position_embeddings, rank, run.world_size, run.eval_masking)
    evaluations = eval_cadence(run.config, held_out.total, run.schedules.sequences(1, run.config.steps))
    log.info("held-out evaluation on the first %s instances of %s: %s", f"{held_out.total:,}",
             run.eval_files[0].parent, evaluations.describe())
    return held_out, evaluations


def _evaluate(model, held_out: HeldOut, run: Run, step: int, metrics: MetricsLog, log: logging.Logger,
              stop: StopSignal) -> bool:
    """Evaluate and write the eval_* row; False, writing none, when a stop signal abandons the evaluation: figures
    of a part of the instances would not compare with the other rows, and the stop must not wait for the rest."""
    log.info("step %d: held-out evaluation of %s instances", step, f"{held_out.total:,}")
    start = time.perf_counter()
    figures = evaluate(model, held_out, run.config.micro_batch, run.vocab_size, autocast_dtype(run.precision), stop)
    metrics.eval_row(step, figures, time.perf_counter() - start)
    if figures is None:
        log.warning("held-out evaluation of step %d abandoned: no eval_* row for it, a resumed run does not repeat "
                    "it", step)
        return False
    log.info("step %d: %s", step, format_figures(figures))
    return True


def _attention_kernel(run: Run, model: torch.nn.Module, rank: int, log: logging.Logger) -> str:
    """The configured kernel; for `auto`, "mask" on CPU and on GPU the fastest on the first micro-batch of this
    rank's data (read once more here), measured with the run's precision. Measuring draws none of the run's random
    numbers."""
    c = run.config
    device = next(model.parameters()).device
    if c.attention != "auto" or device.type != "cuda":
        kernel = "mask" if c.attention == "auto" else c.attention
        log.info("attention kernel: %s", kernel)
        return kernel
    batch = next(iter(make_loader(run.data, c.micro_batch, run.vocab_size, rank, run.world_size, c.seed, workers=0,
                                  pack=c.pack_sequences, masking=run.masking)))
    batch = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
    dtype = autocast_dtype(run.precision)

    def step(kernel: str) -> None:
        model.attention = kernel
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            model(**batch).loss.backward()
        model.zero_grad(set_to_none=True)

    with torch.random.fork_rng(devices=[device]):
        kernel, seconds = choose_attention(step, device, windows=spec(run.model.arch).windows)
    log.info("attention kernel: %s (fastest of %s)", kernel,
             ", ".join(f"{k} {1000 * s:.1f} ms" for k, s in seconds.items()))
    return kernel


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
