"""Self-attention kernels over rows that hold one or several whole instances, and the choice among them.

A batch's `attention_mask` [R, L] numbers the instances of each row 1, 2, ... (a row read from the HDF5 files holds
one instance, numbered 1) and marks padding 0; an instance is a contiguous run of one number. Attention never
crosses from one instance to another, whatever the kernel:

- "mask": `scaled_dot_product_attention` over the padded rows [R, L, H] with a boolean mask: a key-padding mask
  for rows of one instance, a block-diagonal one for packed rows (padding attends to padding only, so no query row
  is empty). Runs everywhere; every position of every row is computed.
- "nested": the real tokens only, [T, H] (T = real tokens of the batch), attention over PyTorch's nested jagged
  tensors, one ragged sequence per instance; no FLOPs go to padding.
- "flash": the same unpadded layout through flash-attention's varlen kernel (when the package is importable, CUDA).

A window (ModernBERT's local layers) limits each query to the keys at most `window` positions away: "mask" adds a
band to the mask (and each position's own key, so that no padding query is left without one), "flash" passes it
as flash-attention's window_size; "nested" takes none. Within a row an instance's tokens are contiguous, so the
distance between columns is the distance between positions.

`choose_attention` measures the kernels that run on the device and keeps the fastest (the training loop does so on
GPU; on CPU it takes "mask": there the nested kernel goes through a slow per-sequence fallback).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import time
import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

KERNELS = ("mask", "nested", "flash")
# the nested kernel's CPU fallback goes through the older nested-tensor API, which warns on every call
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors is in prototype stage")


@dataclasses.dataclass
class TokenLayout:
    """Where a batch's tokens are, for the encoder: padded rows ("mask") or the real tokens only (unpadded)."""
    kernel: str
    mask: Tensor | None = None  # "mask": [R, 1, 1 or L, L] bool, True where a query may attend to a key
    real: Tensor | None = None  # unpadded: [T] flat (row-major) indices of the real tokens
    offsets: Tensor | None = None  # unpadded: [K + 1] start of each instance in the real tokens, then T
    max_len: int = 0  # unpadded: the longest instance
    windowed: dict = dataclasses.field(default_factory=dict)  # "mask": window -> its mask, made once a batch

    @property
    def unpadded(self) -> bool:
        return self.kernel != "mask"

    def flat_index(self, flat_positions: Tensor, rows: int, length: int) -> Tensor:
        """Indices into the encoder's output [N, H] of row-major positions r * L + c (real tokens only when
        unpadded)."""
        if not self.unpadded:
            return flat_positions
        lookup = torch.zeros(rows * length, dtype=torch.long, device=flat_positions.device)
        lookup[self.real] = torch.arange(self.real.numel(), device=lookup.device)
        return lookup[flat_positions]


def token_layout(attention_mask: Tensor, packed: bool, kernel: str) -> TokenLayout:
    if kernel not in KERNELS:
        raise ValueError(f"unknown attention kernel {kernel!r}; known: {', '.join(KERNELS)}")
    if kernel == "mask":
        if packed:
            mask = attention_mask[:, None, :, None] == attention_mask[:, None, None, :]
        else:
            mask = attention_mask.bool()[:, None, None, :]
        return TokenLayout(kernel, mask=mask)
    real = torch.nonzero(attention_mask.reshape(-1), as_tuple=True)[0]
    lengths = instance_lengths(attention_mask)
    offsets = F.pad(lengths.cumsum(0), (1, 0))
    return TokenLayout(kernel, real=real, offsets=offsets, max_len=int(lengths.max()) if lengths.numel() else 0)


def instance_lengths(attention_mask: Tensor) -> Tensor:
    """The number of tokens of each instance [K], in row-major order of the instances."""
    rows, length = attention_mask.shape
    flat = attention_mask.reshape(-1).long()
    real = torch.nonzero(flat, as_tuple=True)[0]
    # (row, instance number) names an instance; the instances' tokens are contiguous
    key = real // length * (length + 1) + flat[real]
    return torch.unique_consecutive(key, return_counts=True)[1]


def window_mask(layout: TokenLayout, window: int) -> Tensor:
    """The "mask" layout's mask [R, 1, L, L] limited to keys at most `window` columns from the query, and always
    the query's own."""
    if window not in layout.windowed:
        length = layout.mask.size(-1)
        columns = torch.arange(length, device=layout.mask.device)
        distance = (columns[:, None] - columns[None, :]).abs()
        layout.windowed[window] = (layout.mask & (distance <= window)) | (distance == 0)
    return layout.windowed[window]


def attend(q: Tensor, k: Tensor, v: Tensor, layout: TokenLayout, dropout_p: float, window: int | None = None
           ) -> Tensor:
    """q, k, v: [R, L, heads, d] (padded rows) or [T, heads, d] (unpadded); the output has the same shape. `window`:
    each query attends only to the keys at most this many positions away (None: to all of its instance)."""
    if layout.kernel == "mask":
        mask = layout.mask if window is None else window_mask(layout, window)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=mask, dropout_p=dropout_p)
        return y.transpose(1, 2)
    if layout.kernel == "flash":
        from flash_attn import flash_attn_varlen_func

        cu = layout.offsets.to(torch.int32)
        return flash_attn_varlen_func(q, k, v, cu, cu, layout.max_len, layout.max_len, dropout_p=dropout_p,
                                      window_size=(-1, -1) if window is None else (window, window))
    if window is not None:
        raise ValueError("the nested attention kernel takes no window; use mask or flash")

    def jagged(t: Tensor) -> Tensor:  # [K, heads, j, d]; SDPA needs the values contiguous
        return torch.nested.nested_tensor_from_jagged(t.contiguous(), layout.offsets,
                                                      max_seqlen=layout.max_len).transpose(1, 2)

    y = F.scaled_dot_product_attention(jagged(q), jagged(k), jagged(v), dropout_p=dropout_p)
    return y.transpose(1, 2).values()


def available_kernels(device: torch.device, windows: bool = False) -> list[str]:
    """The kernels that run on `device`; `windows`: only those that take a window (a model with local layers)."""
    kernels = ["mask"] if windows else ["mask", "nested"]
    if device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        kernels.append("flash")
    return kernels


def choose_attention(run_step: Callable[[str], None], device: torch.device, repeats: int = 3,
                     windows: bool = False) -> tuple[str, dict[str, float]]:
    """The fastest of the device's kernels (`available_kernels`) for `run_step(kernel)` (one forward and backward on
    a representative batch), and the seconds each took (best of `repeats` after a warm-up); a kernel that fails is
    left out."""
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    seconds = {}
    for kernel in available_kernels(device, windows):
        try:
            run_step(kernel)  # warm-up (kernel selection, allocator)
            times = []
            for _ in range(repeats):
                sync()
                start = time.perf_counter()
                run_step(kernel)
                sync()
                times.append(time.perf_counter() - start)
            seconds[kernel] = min(times)
        except (RuntimeError, NotImplementedError):  # a kernel this GPU, dtype or head size does not support
            continue
    return min(seconds, key=seconds.get), seconds
