"""`pretrain tune`: the fastest micro-batch, attention kernel and activation checkpointing that fit this device,
measured rather than estimated.

Each candidate setting is a trial in a fresh process (`python -m pretrain.run.tune_trial SPEC`), which ends with
this one: the run's model and DeepSpeed engine (train.build_engine, the same config `pretrain phase1/phase2` would
use, on one rank), WARMUP_STEPS then TIMED_STEPS steps of forward, backward and optimizer step on synthetic
full-length rows (or micro-batches of --data, read and packed as training reads them). A trial reports the peak
memory of its warm-up steps above the footprint before the model was made, like bench/estimate_memory.py: on GPU
`torch.cuda.max_memory_allocated`; on CPU the peak RSS while glibc returns freed memory at once, so that RSS follows
the live tensors (PeakMemory). Its speed is that of the timed steps. Out of memory is an answer, not an error:
CUDA's out-of-memory error, a peak above --memory-cap, or a trial the kernel killed; a process per trial means such
a failure leaves nothing behind for the next one.

The search (search()) starts from `pretrain estimate`: the largest power of two whose estimate (model states and
peak phase) fits the memory limit (--memory-cap, else the GPU's memory or the memory available on CPU), at most the
recipe's micro_batch. Per attention kernel, without activation checkpointing, it doubles the micro-batch while it
fits and gets faster (halves it until one fits), then halves below the smallest that fit while that is faster;
with checkpointing (slower at the same micro-batch) it tries only micro-batches larger than fit without, where
memory stopped that search. Settings pinned with --set are not varied. Sequences/s is that of a run of
this global_batch on one rank: micro-batches of forward and backward, with the optimizer step once every
global_batch / micro_batch of them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

from wiki2bert_core.config import parse_setting
from wiki2bert_core.errors import ConfigError
from pretrain.model.attention import available_kernels
from pretrain.config import load_train_config, model_config, phase_of_length
from pretrain.schedules import parse_schedule
from pretrain.model.arch import pretraining_model, spec as arch_spec
from pretrain.run.deepspeed_settings import choose_precision, zero_stage_for
from pretrain.tools.estimate import GIB, estimate_memory, parameter_sizes

MIB = 1 << 20
WARMUP_STEPS = 2  # the first step allocates the optimizer's states; the second runs with them
TIMED_STEPS = 3
LARGEST_MICRO_BATCH = 4096
TUNED = ("micro_batch", "attention", "model.activation_checkpointing")  # the settings tune varies
LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclasses.dataclass(frozen=True)
class Candidate:
    micro_batch: int
    attention: str
    activation_checkpointing: bool

    def settings(self) -> list[str]:
        """The KEY=VALUE settings of this candidate, as `--set` takes them."""
        return [f"micro_batch={self.micro_batch}", f"attention={self.attention}",
                f"model.activation_checkpointing={str(self.activation_checkpointing).lower()}"]

    def describe(self) -> str:
        return (f"micro_batch {self.micro_batch}, attention {self.attention}, activation checkpointing "
                f"{'on' if self.activation_checkpointing else 'off'}")


@dataclasses.dataclass
class Trial:
    candidate: Candidate
    outcome: str  # "fits", "out of memory", "over the memory cap", "killed", "stopped at the budget", "failed: ..."
    sequences_per_s: float | None = None
    peak_bytes: int | None = None
    estimate: dict | None = None

    @property
    def fits(self) -> bool:
        return self.outcome == "fits"

    @property
    def failed(self) -> bool:
        """Failed for another reason than memory (e.g. a kernel this GPU or precision does not support)."""
        return self.outcome.startswith("failed")


@dataclasses.dataclass(frozen=True)
class Setup:
    """What every trial of one `pretrain tune` shares."""
    phase: str
    arch: str
    overrides: tuple[str, ...]  # the user's --set, without the tuned keys
    preset: str
    seq_len: int
    max_predictions: int  # masked positions a sequence
    vocab_size: int
    zero_stage: int
    precision: str
    optimizer: str
    global_batch: int
    micro_batch: int  # the recipe's (or --set's): the search starts there at most
    memory_cap: int | None  # bytes
    memory_limit: int  # bytes: where the search starts (the cap, the GPU's memory or the memory available)
    data: str | None
    device: str

    def estimate(self, candidate: Candidate) -> dict:
        return estimate_memory(self.preset, self.vocab_size, self.zero_stage, 1, candidate.micro_batch,
                               self.seq_len, self.precision, self.optimizer, candidate.activation_checkpointing,
                               self.max_predictions, self.arch, candidate.attention)


def estimated_peak(estimate: dict) -> int:
    """The estimate's counterpart of a trial's peak: model states and the peak phase, without the working margin."""
    return estimate["total_bytes"] - estimate["memory"]["working margin"]


def make_setup(preset: str | None, seq_len: int, zero_stage: int | None, precision: str | None,
               memory_cap_gib: float | None, overrides: list[str], data: Path | None) -> tuple[Setup, dict]:
    """The shared settings and the values the user pinned ({tuned key: value}). With `data`, its sequence length,
    masked positions and vocabulary are the trials'."""
    vocab_size, max_predictions = 30522, math.ceil(0.15 * seq_len)
    if data is not None:
        from wiki2bert_core.variant_dir import find_vocab_file, training_files
        from wiki2bert_core.wordpiece import read_vocab
        from pretrain.data.loader import open_data

        training_files(data)  # a wrong --data is reported as such, before the vocabulary is looked for
        vocab_size = len(read_vocab(find_vocab_file(data, None)))
        files = open_data(data, None, vocab_size)
        seq_len, max_predictions = files.seq_len, files.max_predictions
    values = {k: v for k, v in (("preset", preset), ("zero_stage", zero_stage), ("precision", precision))
              if v is not None}
    phase = phase_of_length(seq_len, load_train_config("phase1", None, overrides, values or None).arch)
    config = load_train_config(phase, None, overrides, values or None)
    pinned_keys = {parse_setting(item)[0] for item in overrides} & set(TUNED)
    pinned = {"micro_batch": config.micro_batch, "attention": config.attention,
              "model.activation_checkpointing": config.model.get("activation_checkpointing")}
    pinned = {k: v for k, v in pinned.items() if k in pinned_keys and v != "auto"}
    cuda = torch.cuda.is_available()
    parameters, _ = parameter_sizes(config.preset, vocab_size, config.arch)
    cap = int(memory_cap_gib * GIB) if memory_cap_gib is not None else None
    if cap is not None:
        limit = cap
    elif cuda:
        limit = torch.cuda.get_device_properties(0).total_memory
    else:
        limit = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    setup = Setup(
        phase=phase, arch=config.arch, overrides=tuple(o for o in overrides if parse_setting(o)[0] not in TUNED),
        preset=config.preset, seq_len=seq_len, max_predictions=max_predictions, vocab_size=vocab_size,
        zero_stage=config.zero_stage if config.zero_stage is not None else zero_stage_for(parameters),
        precision=choose_precision(config.precision), optimizer=config.optimizer,
        global_batch=math.gcd(*parse_schedule("global_batch", config.global_batch).values),  # divides every value
        micro_batch=config.micro_batch, memory_cap=cap, memory_limit=limit,
        data=str(data) if data is not None else None,
        device=torch.cuda.get_device_name(0) if cuda else "CPU")
    try:
        setup.estimate(Candidate(1, "mask", False))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return setup, pinned


def micro_batches(setup: Setup, pinned: dict) -> list[int]:
    """The micro-batches tried: powers of two that divide global_batch (or the pinned one)."""
    if "micro_batch" in pinned:
        return [pinned["micro_batch"]]
    sizes = [2 ** i for i in range(int(math.log2(LARGEST_MICRO_BATCH)) + 1)]
    return [m for m in sizes if setup.global_batch % m == 0]


def start_index(setup: Setup, sizes: list[int], checkpointing: bool) -> int:
    """The largest of `sizes` up to the recipe's micro_batch whose estimate fits the memory limit (the first if none
    does): larger ones are tried only while they are faster, since each takes longer to measure."""
    fitting = [i for i, m in enumerate(sizes) if m <= setup.micro_batch and
               estimated_peak(setup.estimate(Candidate(m, "mask", checkpointing))) <= setup.memory_limit]
    return fitting[-1] if fitting else 0


def groups(setup: Setup, pinned: dict) -> list[tuple[str, bool]]:
    """(attention kernel, activation checkpointing) in the order they are searched: without checkpointing first."""
    kernels = [pinned["attention"]] if "attention" in pinned else available_kernels(
        torch.device("cuda" if torch.cuda.is_available() else "cpu"), arch_spec(setup.arch).windows)
    checkpointing = ([pinned["model.activation_checkpointing"]] if "model.activation_checkpointing" in pinned
                     else [False, True])
    return [(kernel, ac) for ac in checkpointing for kernel in kernels]


def group_name(kernel: str, activation_checkpointing: bool) -> str:
    return f"attention {kernel}, activation checkpointing {'on' if activation_checkpointing else 'off'}"


def search(setup: Setup, pinned: dict, run_trial: Callable[[Candidate], Trial]) -> Iterator[Trial]:
    """The trials in the order the search makes them."""
    sizes = micro_batches(setup, pinned)
    # kernel -> (index in sizes of the largest micro-batch that fit without checkpointing, whether memory ended it)
    without: dict[str, tuple[int, bool]] = {}
    for kernel, ac in groups(setup, pinned):
        if ac and kernel in without:  # smaller micro-batches fit without checkpointing, which is faster
            largest, memory_bound = without[kernel]
            if not memory_bound or largest + 1 == len(sizes):
                continue
            first = lowest = largest + 1
        elif not ac and without:  # where the first kernel's largest fit
            first, lowest = next(iter(without.values()))[0], 0
        else:
            first, lowest = start_index(setup, sizes, ac), 0
        trials: dict[int, Trial] = {}

        def trial(i: int) -> Trial:
            trials[i] = run_trial(Candidate(sizes[i], kernel, ac))
            return trials[i]

        i = first
        yield trial(i)
        if trials[i].fits:  # up while it fits and is faster than the micro-batch below
            while i + 1 < len(sizes) and trials[i].fits and (
                    i == first or trials[i].sequences_per_s > trials[i - 1].sequences_per_s):
                i += 1
                yield trial(i)
        else:  # down until one fits
            while i > lowest and not trials[i].fits and not trials[i].failed:
                i -= 1
                yield trial(i)
        fit = sorted(j for j, t in trials.items() if t.fits)
        if not fit or any(t.failed for t in trials.values()):  # a failure that is no lack of memory ends the group
            continue
        if not ac:
            without[kernel] = (fit[-1], any(not trials[j].fits for j in trials if j > fit[-1]))
        i = fit[0]
        while i > lowest:  # smaller micro-batches, while they are faster
            best = max(trials[j].sequences_per_s for j in trials if trials[j].fits)
            i -= 1
            yield trial(i)
            if not trials[i].fits or trials[i].sequences_per_s <= best:
                break


@dataclasses.dataclass
class Result:
    trials: list[Trial]
    not_tried: list[str]  # groups the budget left untried, or cut short
    budget_spent: bool

    @property
    def best(self) -> Trial | None:
        fitting = [t for t in self.trials if t.fits]
        return max(fitting, key=lambda t: t.sequences_per_s) if fitting else None

    @property
    def largest(self) -> Trial | None:
        fitting = [t for t in self.trials if t.fits]
        return max(fitting, key=lambda t: t.candidate.micro_batch) if fitting else None


class BudgetSpent(Exception):
    pass


def tune(setup: Setup, pinned: dict, budget: float, run_trial: Callable[[Setup, Candidate, float], Trial],
         report: Callable[[Trial], None] = lambda trial: None, clock: Callable[[], float] = time.monotonic) -> Result:
    """Run the search until it ends or `budget` seconds are spent (a trial running then is stopped)."""
    deadline = clock() + budget
    trials: list[Trial] = []

    def timed_trial(candidate: Candidate) -> Trial:
        left = deadline - clock()
        if left <= 0:
            raise BudgetSpent
        trial = run_trial(setup, candidate, left)
        trial.estimate = setup.estimate(candidate)
        trials.append(trial)
        report(trial)
        if trial.outcome == "stopped at the budget":
            raise BudgetSpent
        return trial

    names = [group_name(*g) for g in groups(setup, pinned)]
    try:
        for _ in search(setup, pinned, timed_trial):
            pass
    except BudgetSpent:
        started = {names.index(group_name(t.candidate.attention, t.candidate.activation_checkpointing))
                   for t in trials}
        cut = max(started) if started else 0
        return Result(trials, [n + (" (cut short)" if i in started else "") for i, n in enumerate(names) if i >= cut],
                      True)
    return Result(trials, [], False)


def run_trial(setup: Setup, candidate: Candidate, timeout: float) -> Trial:
    """One trial in a fresh process (see the module's docstring), stopped after `timeout` seconds."""
    spec = {**dataclasses.asdict(setup), "candidate": dataclasses.asdict(candidate), "parent": os.getpid()}
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        done = _run_dying_with_us([sys.executable, "-m", "pretrain.run.tune_trial", json.dumps(spec)], env, timeout)
    except subprocess.TimeoutExpired:
        return Trial(candidate, "stopped at the budget")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        measured = json.loads(lines[-1])
        trial = Trial(candidate, measured["outcome"], peak_bytes=measured["peak_bytes"])
        if trial.fits:
            accumulation = max(1, setup.global_batch // candidate.micro_batch)
            trial.sequences_per_s = candidate.micro_batch / (measured["micro_batch_s"]
                                                             + measured["optimizer_step_s"] / accumulation)
        return trial
    if done.returncode == -9:  # the kernel's out-of-memory killer
        return Trial(candidate, "killed")
    last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return Trial(candidate, f"failed: {last}")


def _run_dying_with_us(args: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """Runs a trial process in a process group of its own, which is killed whenever this call ends before the trial
    does (its timeout, an exception, SIGTERM: stop_trials_on_sigterm); when this process is killed outright
    (SIGKILL), Linux ends the trial (tune_trial.py asks for it first thing: after exec rather than in a preexec_fn,
    which is unsafe in a process with threads). A trial left running would hold its memory (a GPU's) until it
    ended."""
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


@contextlib.contextmanager
def stop_trials_on_sigterm() -> Iterator[None]:
    """SIGTERM ends `pretrain tune` through an exception (exit 143), so that the trial running is killed on the
    way out, as on Ctrl-C."""
    def handle(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def measure(spec: dict) -> dict:
    """The trial process: peak memory (of the warm-up steps) and seconds of a micro-batch's forward and backward and
    of an optimizer step (the timed steps)."""
    from pretrain.run.deepspeed_settings import deepspeed_config
    from pretrain.run.train import build_engine, join_process_group

    join_process_group()  # also loads DeepSpeed's op under our flock: a trial stopped while it loaded left a lock
    cuda = torch.cuda.is_available()
    import deepspeed

    candidate = Candidate(**spec["candidate"])
    config = load_train_config(spec["phase"], None, [*spec["overrides"], *candidate.settings(),
                                                     f"global_batch={candidate.micro_batch}"],
                               {"preset": spec["preset"], "zero_stage": spec["zero_stage"],
                                "precision": spec["precision"]})
    batches = _batches(spec, config)
    ds_config = deepspeed_config(config, 1, spec["precision"], {}, spec["zero_stage"])
    warm_up = torch.nn.Linear(2, 2)  # DeepSpeed loads its libraries at the first engine: not the trial's memory
    deepspeed.initialize(model=warm_up, optimizer=torch.optim.SGD(warm_up.parameters(), lr=0.1),
                         config={"train_batch_size": 1, "zero_optimization": {"stage": spec["zero_stage"]},
                                 "zero_allow_untested_optimizer": True, "steps_per_print": 2 ** 62})
    memory = PeakMemory(cuda)
    times = {"micro_batch_s": 0.0, "optimizer_step_s": 0.0}
    try:
        torch.manual_seed(config.seed)
        with torch.device("cuda" if cuda else "cpu"):
            model = pretraining_model(model_config(config.preset, spec["vocab_size"], config.arch, **config.model),
                                      nsp_head=config.objective != "mlm")
        model.attention = candidate.attention
        engine = build_engine(model, config, ds_config)
        for step in range(WARMUP_STEPS + TIMED_STEPS):
            batch = {k: v.to(engine.device) for k, v in next(batches).items()}
            started = _synchronized(cuda)
            engine.backward(engine(**batch).loss)
            backward_done = _synchronized(cuda)
            engine.step()
            step_done = _synchronized(cuda)
            if step < WARMUP_STEPS:
                peak = memory.peak()
                if spec["memory_cap"] is not None and peak > spec["memory_cap"]:
                    return {"outcome": "over the memory cap", "peak_bytes": peak}
                if step == WARMUP_STEPS - 1:
                    memory.stop()
            else:
                times["micro_batch_s"] += (backward_done - started) / TIMED_STEPS
                times["optimizer_step_s"] += (step_done - backward_done) / TIMED_STEPS
    except RuntimeError as e:  # torch.OutOfMemoryError, CUDA's error in a library's allocation, the CPU allocator's
        if not any(words in str(e) for words in ("out of memory", "can't allocate memory")):
            raise
        return {"outcome": "out of memory", "peak_bytes": memory.peak()}
    return {"outcome": "fits", "peak_bytes": peak, **times}


class PeakMemory:
    """Peak memory from now on, above the present footprint: CUDA's allocated bytes, or on CPU the resident set,
    with glibc told to return freed memory at once (allocations above 64 KiB are mappings of their own, unmapped
    when freed), so that it follows the live tensors. stop() gives glibc back its usual thresholds for the timed
    steps (the constant one forces a page fault on every large allocation: about 1.4x slower)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            self.before = torch.cuda.memory_allocated()
            return
        self._mallopt(mmap_threshold=64 << 10, trim_threshold=0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the peak resident set (VmHWM) to the present one
        self.before = self._resident("VmRSS")

    def peak(self) -> int:
        return (torch.cuda.max_memory_allocated() if self.cuda else self._resident("VmHWM")) - self.before

    def stop(self) -> None:
        if not self.cuda:  # glibc's dynamic thresholds end at 32 MiB and twice that
            self._mallopt(mmap_threshold=32 << 20, trim_threshold=64 << 20)

    @staticmethod
    def _mallopt(mmap_threshold: int, trim_threshold: int) -> None:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(-3, mmap_threshold)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, trim_threshold)  # M_TRIM_THRESHOLD

    @staticmethod
    def _resident(field: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def _synchronized(cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter()


def _batches(spec: dict, config) -> Iterator[dict]:
    """Micro-batches of --data as training reads them, or synthetic rows every position of which is a token."""
    from pretrain.data.packing import pack_batch

    micro_batch = config.micro_batch
    if spec["data"] is not None:
        from pretrain.data.loader import make_loader, model_inputs, open_data

        data = open_data(Path(spec["data"]), config.seq_len, spec["vocab_size"])
        for batch in make_loader(data, micro_batch, spec["vocab_size"], workers=0, pack=config.pack_sequences):
            yield model_inputs(batch)[0]
        return
    generator = torch.Generator().manual_seed(config.seed)
    length, vocab_size = spec["seq_len"], spec["vocab_size"]
    predictions = max(1, min(spec["max_predictions"], length - 2))
    while True:
        positions = torch.rand(micro_batch, length - 2, generator=generator).argsort(1)[:, :predictions]
        batch = {"input_ids": torch.randint(5, vocab_size, (micro_batch, length), generator=generator),
                 "token_type_ids": (torch.arange(length) >= length // 2).long().expand(micro_batch, -1).clone(),
                 "attention_mask": torch.ones(micro_batch, length, dtype=torch.long),
                 "masked_lm_positions": positions.sort(1).values + 1,
                 "masked_lm_ids": torch.randint(5, vocab_size, (micro_batch, predictions), generator=generator),
                 "next_sentence_labels": torch.randint(0, 2, (micro_batch,), generator=generator)}
        yield pack_batch(batch) if config.pack_sequences else batch


def format_trial(trial: Trial) -> str:
    c = trial.candidate
    speed = f"{trial.sequences_per_s:,.1f}" if trial.sequences_per_s is not None else "-"
    peak = f"{trial.peak_bytes / MIB:,.0f}" if trial.peak_bytes is not None else "-"
    estimate = f"{estimated_peak(trial.estimate) / MIB:,.0f}" if trial.estimate else "-"
    return (f"{c.micro_batch:>11}  {c.attention:<9} {'on' if c.activation_checkpointing else 'off':<13} "
            f"{speed:>10} {peak:>9} {estimate:>12}  {trial.outcome}")


TABLE_HEADER = (f"{'micro_batch':>11}  {'attention':<9} {'checkpointing':<13} {'seq/s':>10} {'peak MiB':>9} "
                f"{'estimate MiB':>12}  result")


def format_setup(setup: Setup, budget: float) -> str:
    cap = f"memory cap {setup.memory_cap / GIB:.2f} GiB" if setup.memory_cap is not None else "no memory cap"
    return (f"tune {setup.arch} {setup.preset}, seq {setup.seq_len}, ZeRO {setup.zero_stage}, {setup.precision}, {setup.optimizer}, "
            f"global_batch {setup.global_batch:,}, one rank on {setup.device}, {cap}, budget {budget:.0f} s; "
            f"{'data ' + setup.data if setup.data else 'synthetic full-length rows'}")


def no_answer(result: Result, setup: Setup, budget: float) -> str:
    """The line `pretrain tune` ends with when no setting fits, naming the cause its trials found."""
    finished = [t for t in result.trials if t.outcome != "stopped at the budget"]
    if not finished:
        return f"tune: no setting finished within the budget of {budget:.0f} s; raise --budget"
    if all(t.failed for t in finished):
        return f"tune: every trial failed; the first: {finished[0].outcome.removeprefix('failed: ')}"
    untried = f"; the budget of {budget:.0f} s left untried: {'; '.join(result.not_tried)}" if result.not_tried else ""
    over_cap = [t for t in finished if t.outcome == "over the memory cap"]
    if over_cap and len(over_cap) == len([t for t in finished if not t.failed]):
        lowest = min(over_cap, key=lambda t: t.peak_bytes)
        return (f"tune: no setting fits under --memory-cap {setup.memory_cap / GIB:.3g} GiB: every trial's peak was "
                f"above it (the lowest, {lowest.peak_bytes / MIB:,.0f} MiB at {lowest.candidate.describe()}); raise "
                f"--memory-cap{untried}")
    return (f"tune: no setting fits in the memory of {setup.device}"
            f"{' under --memory-cap' if setup.memory_cap is not None else ''}; lower --seq-len or use a higher "
            f"--zero-stage{' or raise --memory-cap' if setup.memory_cap is not None else ''}{untried}")


def format_answer(result: Result, budget: float) -> list[str]:
    lines = []
    if result.not_tried:
        lines.append(f"not tried (budget of {budget:.0f} s spent): {'; '.join(result.not_tried)}")
    best, largest = result.best, result.largest
    if largest is not best:
        lines.append(f"largest that fits: {largest.candidate.describe()}: {largest.sequences_per_s:,.1f} "
                     f"sequences/s, peak {largest.peak_bytes / MIB:,.0f} MiB")
    e = best.estimate
    lines += [f"fastest that fits: {best.candidate.describe()}: {best.sequences_per_s:,.1f} sequences/s, peak "
              f"{best.peak_bytes / MIB:,.0f} MiB",
              f"pretrain estimate of the same setting: {estimated_peak(e) / MIB:,.0f} MiB of model states and peak "
              f"phase, {e['total_bytes'] / MIB:,.0f} MiB with the working margin"]
    return lines + [f"--set {setting}" for setting in best.candidate.settings()]
