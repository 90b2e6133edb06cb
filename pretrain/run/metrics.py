"""Training metrics: per-step sums all-reduced over the ranks, written as metrics.jsonl rows and TensorBoard
scalars (rank 0), with throughput, model FLOPs utilization and memory.

Throughput counts real (non-padding) tokens beside the positions computed; model FLOPs (tflops, mfu) are those of
the real tokens only, so padding, packed away or not, never counts as useful work."""
from __future__ import annotations

import json
import resource
import time
from typing import TYPE_CHECKING, Callable

import torch

from wiki2bert_core.files import atomic_write
from wiki2bert_core.hdf5_format import used_positions
from pretrain.model.attention import instance_lengths

if TYPE_CHECKING:
    from pretrain.run.prepare import Run

# dense bf16/fp16 tensor-core peak TFLOP/s per GPU, for model FLOPs utilization (first matching name wins)
PEAK_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0), ("A100", 312.0),
               ("L40S", 362.0), ("A10", 125.0), ("L4", 121.0), ("V100", 125.0))
# the sums a training step adds to its stats tensor, in this order
STEP_STATS = ("loss", "mlm_loss", "nsp_loss", "mlm_correct", "mlm_count", "nsp_correct", "nsp_count",
              "micro_batches", "data_wait_s", "real_tokens", "positions", "attention_pairs", "predictions")


def batch_counts(batch: dict[str, torch.Tensor]) -> list[float]:
    """What a micro-batch (on the CPU, before it moves) holds: real tokens, positions (rows x seq_len), attention
    pairs (the sum of the instances' squared lengths) and the used MLM slots (those the head computes), the last four
    STEP_STATS."""
    lengths = instance_lengths(batch["attention_mask"]).double()
    return [float(lengths.sum()), float(batch["input_ids"].numel()), float((lengths ** 2).sum()),
            float(used_positions(batch["masked_lm_positions"]).sum())]


def step_stats(out, wait_s: float, counts: list[float], device) -> torch.Tensor:
    """One micro-batch's contribution to the STEP_STATS sums, from the model's output, the data wait and
    `batch_counts`; the NSP sums are 0 for a model without the NSP head."""
    zero = torch.zeros((), device=out.loss.device)
    nsp = [zero] * 3 if out.nsp_loss is None else [out.nsp_loss.detach(), out.nsp_correct, out.nsp_count]
    losses = torch.stack([t.double() for t in (out.loss.detach(), out.mlm_loss.detach(), nsp[0], out.mlm_correct,
                                               out.mlm_count, nsp[1], nsp[2])])
    return torch.cat([losses, torch.tensor([1.0, wait_s, *counts], dtype=torch.float64, device=device)])


def metrics_step(line: str) -> float:
    """The step of a metrics.jsonl row; inf for a blank or cut-off row (a crash mid-write), so it is dropped."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


class MetricsLog:
    """Rows of metrics.jsonl and TensorBoard scalars (rank 0), from step sums all-reduced over the ranks."""

    def __init__(self, run: Run, training_flops: Callable[[float, float, float, float], float], writer: bool,
                 start_step: int):
        self.run, self.training_flops = run, training_flops  # BertForPreTraining.training_flops
        self.file = self.tb = None
        if writer:
            path = run.phase_dir / "metrics.jsonl"
            if path.is_file():  # resuming: drop the rows of steps after the checkpoint, they are done again
                rows = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                        if metrics_step(line) <= start_step]
                with atomic_write(path) as f:
                    f.writelines(rows)
            from torch.utils.tensorboard import SummaryWriter

            self.file = open(path, "a", encoding="utf-8")
            self.tb = SummaryWriter(str(run.phase_dir / "tb"))
        self.peak = peak_tflops() if run.precision != "fp32" else None
        self.restart_clock()

    def restart_clock(self) -> None:
        self.start, self.steps = time.perf_counter(), 0

    def row(self, step: int, stats: torch.Tensor, lr: float, grad_norm: float | None,
            scheduled: dict[str, float | int] | None = None) -> dict:
        """The row of `step` (the sums since the last row), with `scheduled`: each scheduled setting's value at
        `step`, under its own name."""
        if torch.distributed.is_initialized():
            torch.distributed.all_reduce(stats)
        s = dict(zip(STEP_STATS, stats.tolist()))
        stats.zero_()
        elapsed = time.perf_counter() - self.start
        sequences = s["micro_batches"] * self.run.config.micro_batch
        samples_per_s = sequences / elapsed
        flops = self.training_flops(s["real_tokens"], s["attention_pairs"], sequences, s["predictions"])
        tflops = flops / elapsed / 1e12
        row = {"step": step, "loss": s["loss"] / s["micro_batches"], "mlm_loss": s["mlm_loss"] / s["micro_batches"],
               "nsp_loss": s["nsp_loss"] / s["micro_batches"],
               "mlm_accuracy": s["mlm_correct"] / max(1.0, s["mlm_count"]),
               "nsp_accuracy": s["nsp_correct"] / max(1.0, s["nsp_count"]), "lr": lr, "grad_norm": grad_norm,
               "samples_per_s": samples_per_s, "tokens_per_s": s["positions"] / elapsed,
               "real_tokens_per_s": s["real_tokens"] / elapsed,
               "padding_share": 1.0 - s["real_tokens"] / max(1.0, s["positions"]), "tflops": tflops,
               "data_wait_s": s["data_wait_s"] / self.run.world_size,
               "data_wait_share": s["data_wait_s"] / self.run.world_size / elapsed, **(scheduled or {})}
        if self.run.config.objective == "mlm":
            row = {key: value for key, value in row.items() if not key.startswith("nsp_")}
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

    def eval_row(self, step: int, figures: dict[str, float] | None, seconds: float) -> None:
        """A metrics.jsonl row of held-out figures (evaluate.py; None: abandoned, no row); the `seconds` it took do
        not count as training time in the throughput."""
        self.start += seconds
        if self.file and figures is not None:
            self.file.write(json.dumps({"step": step, **figures}) + "\n")
            self.file.flush()
            for key, value in figures.items():
                if isinstance(value, float):  # not eval_mlm_unigram_token, a token id
                    self.tb.add_scalar(f"eval/{key.removeprefix('eval_')}", value, step)

    def close(self) -> None:
        if self.file:
            self.file.close()
            self.tb.close()


def peak_tflops() -> float | None:
    """This GPU's dense bf16/fp16 peak TFLOP/s (None: no GPU, or one not in PEAK_TFLOPS)."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((peak for key, peak in PEAK_TFLOPS if key in name), None)
