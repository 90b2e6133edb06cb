"""Copies of the states DeepSpeed hands to its checkpoint engine (nested dicts, lists and tuples of tensors and other
values) in CPU memory, so that training can go on changing the originals while a thread writes the copies.

A copy keeps what torch.save writes: tensors that share a storage share one in the copy, at the same offsets and
strides (torch.save writes whole storages), with their type (Parameter or Tensor), requires_grad and Python
attributes (of dicts too: a state dict's _metadata); a value referred to twice stays one value; values that are not
tensors are deep-copied. So the files hold the same bytes as files written from the originals, except that tensors
of a GPU are recorded as the CPU's (DeepSpeed loads checkpoints onto the CPU anyway).

The CPU memory is kept for the next copy (the same storages in the same order each time): fresh memory costs a
page fault per 4 KiB page, measured 4x the copy itself on CPU, and page-locked memory (which GPU copies need to run
at full speed) is slow to allocate. It is held as long as the `Snapshot` is: about the size of the checkpoint's
tensors.
"""
from __future__ import annotations

import copy

import torch


class Snapshot:
    def __init__(self):
        self._buffers: list[torch.UntypedStorage] = []
        self._storages: dict[int, torch.UntypedStorage] = {}  # original storage (_cdata, torch.save's key) -> copy
        self._memo: dict[int, object] = {}  # id of an original value -> its copy, as copy.deepcopy keeps it

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes() for b in self._buffers)

    def take(self, states: list) -> list:
        """Copies of `states`; copies taken before by this Snapshot are overwritten (at most one copy at a time)."""
        self._storages, self._memo = {}, {}
        copied = [self._copy(state) for state in states]
        self._memo = {}
        if torch.cuda.is_available():
            torch.cuda.current_stream().synchronize()  # the copies to page-locked memory run asynchronously
        return copied

    def _copy(self, value):
        """The copy of `value`, made once: pickle writes a value referred to twice once, then refers to it."""
        if id(value) not in self._memo:
            self._memo[id(value)] = self._copy_value(value)
        return self._memo[id(value)]

    def _copy_value(self, value):
        if isinstance(value, torch.Tensor):
            return self._copy_tensor(value)
        if isinstance(value, dict):
            copied = type(value)((k, self._copy(v)) for k, v in value.items())
            if getattr(value, "__dict__", None):
                copied.__dict__.update(copy.deepcopy(value.__dict__, self._memo))
            return copied
        if isinstance(value, list):
            return [self._copy(v) for v in value]
        if type(value) is tuple:
            return tuple(self._copy(v) for v in value)
        return copy.deepcopy(value, self._memo)

    def _copy_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        original = tensor.untyped_storage()
        storage = self._storages.get(original._cdata)
        if storage is None:
            storage = self._storage(len(self._storages), original.nbytes())
            storage.copy_(original, non_blocking=True)
            self._storages[original._cdata] = storage
        copied = torch.empty(0, dtype=tensor.dtype).set_(storage, tensor.storage_offset(), tensor.size(),
                                                         tensor.stride())
        if isinstance(tensor, torch.nn.Parameter):
            copied = torch.nn.Parameter(copied, requires_grad=tensor.requires_grad)
        elif tensor.requires_grad:
            copied.requires_grad_(True)
        if tensor.__dict__:
            copied.__dict__.update(copy.deepcopy(tensor.__dict__, self._memo))
        return copied

    def _storage(self, index: int, nbytes: int) -> torch.UntypedStorage:
        """The `index`th buffer, made anew if it has not got `nbytes` (the first copy, or the states changed)."""
        if index < len(self._buffers) and self._buffers[index].nbytes() == nbytes:
            return self._buffers[index]
        buffer = torch.empty(nbytes, dtype=torch.uint8, pin_memory=torch.cuda.is_available()).untyped_storage()
        if index < len(self._buffers):
            self._buffers[index] = buffer
        else:
            self._buffers.append(buffer)
        return buffer
