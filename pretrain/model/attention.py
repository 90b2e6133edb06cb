"""Self-attention kernels over rows that hold one or several whole instances, and the choice among them.

A batch's `attention_mask` [R, L] numbers the instances of each row 1, 2, ... (a row read from the HDF5 files holds
one instance, numbered 1) and marks padding 0; an instance is a contiguous run of one number. Whatever the kernel,
the encoder holds the real tokens only, [T, H] (T = real tokens of the batch, row-major), so its embeddings,
projections, feed-forward blocks and norms spend nothing on padding; and attention never crosses from one instance
to another:

- "mask": the queries, keys and values put back into their rows [R, L] (zeros at the padding) for
  `scaled_dot_product_attention` with a boolean mask: a key-padding mask for rows of one instance, a block-diagonal
  one for packed rows (padding attends to padding only, so no query row is empty); the real tokens' outputs taken
  back. Runs everywhere; attention computes every column of every row.
- "nested": attention over PyTorch's nested jagged tensors, one ragged sequence per instance; no FLOPs go to
  padding.
- "flash": flash-attention's varlen kernel over the same (when the package is importable, CUDA).

A window (ModernBERT's local layers) limits each query to the keys at most `window` positions away: "mask" computes
the rows block by block when the window is under a third of the row (each block of `window` queries against the
3 * `window` keys around it, `banded_attention`), else adds a band to the whole rows' mask (with each position's own
key, so that no padding query is left without one); "flash" passes it as flash-attention's window_size; "nested"
takes none. Within a row an instance's tokens are contiguous, so the distance between columns is the distance
between positions.

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
    """Where a batch's tokens are for the encoder: every kernel computes the real tokens only, [T, H] (T = real
    tokens of the batch, row-major); "mask" puts them back into their rows [R, L] for attention only."""
    kernel: str
    real: Tensor  # [T] flat (row-major) indices of the real tokens in the rows
    padding: Tensor  # [R * L - T] those of the padding
    rows: int
    length: int
    mask: Tensor | None = None  # "mask": [R, 1, 1 or L, L] bool, True where a query may attend to a key
    instances: Tensor | None = None  # "mask": the batch's attention_mask [R, L] (instance numbers, 0 = padding)
    offsets: Tensor | None = None  # nested, flash: [K + 1] start of each instance in the real tokens, then T
    max_len: int = 0  # nested, flash: the longest instance
    windowed: dict = dataclasses.field(default_factory=dict)  # "mask": window -> its mask, made once a batch

    def flat_index(self, flat_positions: Tensor) -> Tensor:
        """Indices into the encoder's output [T, H] of row-major positions r * L + c of real tokens."""
        lookup = torch.zeros(self.rows * self.length, dtype=torch.long, device=flat_positions.device)
        lookup[self.real] = torch.arange(self.real.numel(), device=lookup.device)
        return lookup[flat_positions]

    def to_rows(self, t: Tensor) -> Tensor:
        """[T, ...] -> [R, L, ...], zeros at the padding (only there: no pass that zeroes the whole rows)."""
        rows = t.new_empty(self.rows * self.length, *t.shape[1:]).index_fill_(0, self.padding, 0)
        return rows.index_copy_(0, self.real, t).view(self.rows, self.length, *t.shape[1:])

    def from_rows(self, t: Tensor) -> Tensor:
        """[R, L, ...] -> [T, ...]: the real tokens."""
        return t.reshape(self.rows * self.length, *t.shape[2:]).index_select(0, self.real)


def token_layout(attention_mask: Tensor, packed: bool, kernel: str) -> TokenLayout:
    if kernel not in KERNELS:
        raise ValueError(f"unknown attention kernel {kernel!r}; known: {', '.join(KERNELS)}")
    rows, length = attention_mask.shape
    real = torch.nonzero(attention_mask.reshape(-1), as_tuple=True)[0]
    padding = torch.nonzero(attention_mask.reshape(-1) == 0, as_tuple=True)[0]
    if kernel == "mask":
        if packed:
            mask = attention_mask[:, None, :, None] == attention_mask[:, None, None, :]
        else:
            mask = attention_mask.bool()[:, None, None, :]
        return TokenLayout(kernel, real, padding, rows, length, mask=mask, instances=attention_mask)
    lengths = instance_lengths(attention_mask)
    offsets = F.pad(lengths.cumsum(0), (1, 0))
    return TokenLayout(kernel, real, padding, rows, length, offsets=offsets,
                       max_len=int(lengths.max()) if lengths.numel() else 0)


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
        columns = torch.arange(layout.length, device=layout.mask.device)
        distance = (columns[:, None] - columns[None, :]).abs()
        layout.windowed[window] = (layout.mask & (distance <= window)) | (distance == 0)
    return layout.windowed[window]


def band_mask(layout: TokenLayout, window: int) -> Tensor:
    """The mask [R * B, 1, window, 3 * window] of `banded_attention`'s blocks: a query may attend to a key of its
    own instance at most `window` columns away, and always to its own."""
    if ("band", window) not in layout.windowed:
        blocks = -(-layout.length // window)
        tail = blocks * window - layout.length
        # columns outside the row are instance -1: no query's
        instances = F.pad(layout.instances, (0, tail), value=-1)
        queries = instances.view(layout.rows, blocks, window)
        keys = F.pad(instances, (window, window), value=-1).unfold(1, 3 * window, window)  # [R, B, 3 * window]
        columns = torch.arange(3 * window, device=instances.device)
        offset = columns - window - columns[:window, None]  # key column - query column
        mask = ((queries[..., None] == keys[..., None, :]) & (offset.abs() <= window)) | (offset == 0)
        layout.windowed[("band", window)] = mask.view(layout.rows * blocks, 1, window, 3 * window)
    return layout.windowed[("band", window)]


def banded_attention(q: Tensor, k: Tensor, v: Tensor, layout: TokenLayout, dropout_p: float, window: int) -> Tensor:
    """Windowed attention of rows [R, L, heads, d] computed block by block: the queries of each block of `window`
    columns against the keys of that block and of its neighbours on both sides (3 * window keys), which hold every
    key within `window` of them; the mask of the whole rows would make SDPA compute all L keys of each query."""
    rows, length, heads, d = q.shape
    blocks = -(-length // window)
    tail = blocks * window - length

    def query_blocks(t: Tensor) -> Tensor:  # [R * B, heads, window, d]
        return F.pad(t, (0, 0, 0, 0, 0, tail)).view(rows * blocks, window, heads, d).transpose(1, 2)

    def key_blocks(t: Tensor) -> Tensor:  # [R * B, heads, 3 * window, d]
        t = F.pad(t, (0, 0, 0, 0, window, tail + window)).view(rows, blocks + 2, window, heads, d)
        # each block beside its two neighbours (a third faster than Tensor.unfold, whose backward is slow on CPU)
        t = torch.cat([t[:, :-2], t[:, 1:-1], t[:, 2:]], dim=2)
        return t.view(rows * blocks, 3 * window, heads, d).transpose(1, 2)

    y = F.scaled_dot_product_attention(query_blocks(q), key_blocks(k), key_blocks(v),
                                       attn_mask=band_mask(layout, window), dropout_p=dropout_p)
    return y.transpose(1, 2).reshape(rows, blocks * window, heads, d)[:, :length]


def attend(q: Tensor, k: Tensor, v: Tensor, layout: TokenLayout, dropout_p: float, window: int | None = None
           ) -> Tensor:
    """q, k, v: [T, heads, d], the real tokens; the output has the same shape. `window`: each query attends only to
    the keys at most this many positions away (None: to all of its instance)."""
    if layout.kernel == "mask":
        q, k, v = (layout.to_rows(t) for t in (q, k, v))
        if window is not None and 3 * window < layout.length:
            return layout.from_rows(banded_attention(q, k, v, layout, dropout_p, window))
        mask = layout.mask if window is None else window_mask(layout, window)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=mask, dropout_p=dropout_p)
        return layout.from_rows(y.transpose(1, 2))
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
