"""Writing a phase's checkpoints and resuming from one: DeepSpeed's `save_checkpoint` under
`<phase_dir>/checkpoints/<tag>/`, then our meta.json and `latest` (the files and what makes a checkpoint complete:
pretrain/model/checkpoint_files.py, which also reads them).

A checkpoint counts once it is complete: every rank has written its files (DeepSpeed's save ends with a barrier),
then rank 0 writes `<tag>/meta.json`, which lists the files, their sizes and sha256, and only then replaces `latest`,
atomically. A crash while saving therefore leaves `latest` on the previous checkpoint; a save that fails (a full
disk) removes its directory and is one error line; DeepSpeed's own `latest` writing is off. The newest `keep`
complete checkpoints are kept (pruned once a newer one is complete); directories of saves that never completed are
removed. `save` does all this while training waits; `BackgroundSaver` the same in a thread, from a copy of the
states in CPU memory (pretrain/run/snapshot.py), with the same files. The training loop uses either through
pretrain/run/checkpointer.py.

The client state holds, for every rank, its data position and its RNG states (python, numpy, torch, CUDA):
DeepSpeed writes the client state only from rank 0, so the training loop gathers all ranks' states into it.
`load` resumes an engine from a checkpoint, verified first (checkpoint_files.verify).
"""
from __future__ import annotations

import contextlib
import logging
import random
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from wiki2bert_core.errors import DataError, first_line
from wiki2bert_core.files import atomic_write, remove_tree, sha256_file, write_json
from wiki2bert_core.log import LOGGER_NAME
from pretrain.model.checkpoint_files import (LATEST, META, Checkpoint, checkpoint_dir, previous_good, unloadable,
                                             verify)
from pretrain.run.snapshot import Snapshot

UNIVERSAL = "universal"  # <tag>/universal/: the checkpoint as DeepSpeed's universal checkpoint, for other rank counts
ABANDONED = "abandoned"  # what a rank reports of a background write it abandoned

log = logging.getLogger(LOGGER_NAME)


def tag_for(step: int) -> str:
    return f"step{step:08d}"


def save(engine, phase_dir: Path, step: int, meta: dict, client_state: dict, keep: int) -> str:
    """Collective: every rank calls it. Returns the tag once the checkpoint is complete. DataError if the files
    cannot be written."""
    tag = tag_for(step)
    try:
        engine.save_checkpoint(str(checkpoint_dir(phase_dir)), tag=tag, client_state=client_state, save_latest=False)
    except (OSError, RuntimeError) as e:  # torch.save reports a full disk as a RuntimeError
        _complete(phase_dir, tag, step, meta, keep, first_line(e))
    _complete(phase_dir, tag, step, meta, keep, None)
    _barrier()
    return tag


class BackgroundSaver:
    """Checkpoints written while training goes on. `save` has DeepSpeed's `save_checkpoint` hand its states to a
    checkpoint engine that only collects them, copies them into CPU memory (pretrain/run/snapshot.py: about the size of
    this rank's model and optimizer states, kept for the next save) and returns; a thread writes the files with
    torch.save as DeepSpeed's own engine does (the same bytes), and once every rank has written its files (a gather
    on a gloo group of its own, so the training's collectives are untouched) rank 0's thread makes the checkpoint
    complete as `save` does: meta.json with the sha256, then `latest`, then pruning.

    At most one write is in flight: `save` first waits for the previous one. A write that failed is reported there
    or by `finish` (the end of the run), as `save`'s DataError; `abandon` (a run that stops or fails) stops the
    write in flight between two files, leaving its directory to be removed and `latest` as it was. A killed process
    leaves a directory without meta.json, never `latest` pointing at it."""

    def __init__(self, engine, phase_dir: Path, keep: int, world_size: int):
        self.engine, self.phase_dir, self.keep = engine, Path(phase_dir), keep
        self._collecting = _collecting_engine(engine._config)
        self._snapshot = Snapshot()
        self._group = torch.distributed.new_group(backend="gloo") if world_size > 1 else None
        self._thread: threading.Thread | None = None
        self._abandon = threading.Event()
        self._error: BaseException | None = None

    @property
    def snapshot_bytes(self) -> int:
        return self._snapshot.nbytes

    def save(self, step: int, meta: dict, client_state: dict) -> str:
        """Collective: every rank calls it. Returns the tag once this rank's states are copied and their writing
        has begun. DataError if the previous write failed, or if this one cannot begin."""
        self.finish()
        tag = tag_for(step)
        saving, self.engine.checkpoint_engine = self.engine.checkpoint_engine, self._collecting
        try:
            self.engine.save_checkpoint(str(checkpoint_dir(self.phase_dir)), tag=tag, client_state=client_state,
                                        save_latest=False)
        except OSError as e:  # the directories are made here
            _complete(self.phase_dir, tag, step, meta, self.keep, first_line(e))
        finally:
            self.engine.checkpoint_engine = saving
            collected, self._collecting.collected = self._collecting.collected, []
        states = self._snapshot.take([state for state, _ in collected])
        files = [(state, path) for state, (_, path) in zip(states, collected)]
        self._abandon.clear()
        self._thread = threading.Thread(target=self._write, args=(tag, step, meta, files), daemon=True,
                                        name=f"checkpoint {tag}")
        self._thread.start()
        return tag

    def finish(self) -> None:
        """Waits for the write in flight; DataError if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error

    def abandon(self) -> None:
        """Stops the write in flight after its current file (its checkpoint stays incomplete: `latest` is kept)."""
        self._abandon.set()
        try:
            self.finish()
        except DataError:
            pass  # abandoned anyway

    def _write(self, tag: str, step: int, meta: dict, files: list[tuple[dict, str]]) -> None:
        start, failure = time.perf_counter(), None
        try:
            for state, path in files:
                if self._abandon.is_set():
                    failure = ABANDONED
                    break
                self._collecting.write(state, path)
        except (OSError, RuntimeError) as e:
            failure = first_line(e)
        except BaseException as e:  # not a failure to write: a bug, reported with its traceback by finish()
            self._error, failure = e, first_line(e)
        del files
        if self._group is not None:
            failures = [None] * self._group.size()
            torch.distributed.all_gather_object(failures, failure, group=self._group)
            failed = [f for f in failures if f and f != ABANDONED]
            failure = failed[0] if failed else ABANDONED if ABANDONED in failures else None
        try:
            size = _complete(self.phase_dir, tag, step, meta, self.keep, failure)
        except DataError as e:
            self._error = self._error or (None if failure == ABANDONED else e)
        else:
            log.info("checkpoint of step %d complete: %.2f GiB written and verified in the background in %.1f s",
                     step, size / 2 ** 30, time.perf_counter() - start)


def _collecting_engine(config_params):
    """DeepSpeed's own checkpoint engine (torch.save), but its `save` only collects what it is given; `write` saves."""
    from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine

    class CollectingEngine(TorchCheckpointEngine):
        def __init__(self, config_params):
            super().__init__(config_params)
            self.collected: list[tuple[dict, str]] = []

        def save(self, state_dict, path: str):
            self.collected.append((state_dict, path))

        def write(self, state_dict, path: str):
            super().save(state_dict, path)

    return CollectingEngine(config_params)


def _complete(phase_dir: Path, tag: str, step: int, meta: dict, keep: int, failure: str | None) -> int:
    """After every rank has written its files of checkpoint `tag`: rank 0 writes meta.json (each file's size and
    sha256), then `latest`, then prunes to `keep`, and returns the checkpoint's bytes (0 on other ranks). If a rank
    could not (`failure`), or rank 0 cannot: removes the checkpoint's directory and raises DataError (one line: the
    checkpoint, the cause, the free space, the latest checkpoint)."""
    ckpt = checkpoint_dir(phase_dir)
    size = 0
    if failure is None and _rank() == 0:
        try:
            files = [p for p in sorted((ckpt / tag).iterdir()) if p.is_file()]
            write_json(ckpt / tag / META, {**meta, "tag": tag, "step": step,
                                           "files": {p.name: p.stat().st_size for p in files},
                                           "sha256": {p.name: sha256_file(p) for p in files}})
            with atomic_write(ckpt / LATEST) as f:
                f.write(tag)
        except OSError as e:
            failure = first_line(e)
        else:
            _prune(ckpt, keep, tag)
            size = sum(p.stat().st_size for p in files)
    if failure is None:
        return size
    shutil.rmtree(ckpt / tag, ignore_errors=True)
    previous = (ckpt / LATEST).read_text(encoding="utf-8").strip() if (ckpt / LATEST).is_file() else None
    existing = next(p for p in (ckpt, *ckpt.parents) if p.exists())
    raise DataError(f"{ckpt / tag}: saving the checkpoint failed ({failure}); "
                    f"{shutil.disk_usage(existing).free / 2 ** 30:.1f} GiB free there; the latest checkpoint "
                    f"is still {previous or 'none'}")


def load(engine, checkpoint: Checkpoint, universal: bool = False) -> dict:
    """Loads model, optimizer and LR-scheduler states into `engine`; returns the client state. `universal`: the
    checkpoint was written under ZeRO 1/2 by another number of ranks; it is read as DeepSpeed's universal checkpoint
    (made once, into `<tag>/universal/`), which needs `checkpoint.load_universal` in the engine's config."""
    verify(checkpoint)
    load_dir, tag = checkpoint_dir(checkpoint.phase_dir), checkpoint.tag
    with unloadable(checkpoint):
        if universal:
            load_dir, tag = make_universal(checkpoint).parent, UNIVERSAL
        path, client_state = engine.load_checkpoint(str(load_dir), tag=tag)
    if path is None:
        raise DataError(f"{checkpoint.path}: DeepSpeed could not load this checkpoint; "
                            f"{previous_good(checkpoint_dir(checkpoint.phase_dir), checkpoint.tag)}")
    return client_state


def make_universal(checkpoint: Checkpoint) -> Path:
    """DeepSpeed's `ds_to_universal` of the checkpoint (per-tensor fp32 weights and optimizer states, whatever the
    ranks and ZeRO partitions that wrote it) into `<tag>/universal/`: by rank 0, once, into a temporary directory
    renamed into place. Collective: every rank waits for it."""
    out = checkpoint.path / UNIVERSAL
    if _rank() == 0 and not out.is_dir():
        import argparse

        from deepspeed.checkpoint.ds_to_universal import main as ds_to_universal

        partial = checkpoint.path / f"{UNIVERSAL}.partial"
        remove_tree(partial)
        with contextlib.redirect_stdout(sys.stderr):  # its progress report is not our output
            ds_to_universal(argparse.Namespace(input_folder=str(checkpoint.path), output_folder=str(partial),
                                               num_extract_workers=1, num_merge_workers=1, keep_temp_folder=False,
                                               strict=True, inject_missing_state=True))
        partial.rename(out)
    _barrier()
    return out


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _prune(ckpt: Path, keep: int, current: str) -> None:
    tags = sorted(d for d in ckpt.iterdir() if d.is_dir())
    complete = [d for d in tags if (d / META).is_file()]
    for d in tags:
        if (d in complete[:-keep] or d not in complete) and d.name != current:
            shutil.rmtree(d, ignore_errors=True)


def _rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
