"""The stage interface: what a stage module defines and what the runner gives it.

Each stage module defines `STAGE = Stage(...)`: a config dataclass and a function run(config, ctx) -> counts that
fills ctx.out_dir from the directories in ctx.inputs. Config fields that never change the output (retries, timeouts)
are declared with `wiki2bert_core.config.changeable` and left out of the config hash."""
from __future__ import annotations

import dataclasses
import importlib
import logging
from pathlib import Path
from typing import Any, Callable

from pipeline.executors.local import Executor, LocalExecutor


@dataclasses.dataclass(frozen=True)
class StageContext:
    lang: str
    out_dir: Path  # temporary directory; renamed into place by the runner when run() returns
    # upstream stage name -> its completed directory (a language's stage read by the mix: LANG/STAGE -> it)
    inputs: dict[str, Path]
    cache_dir: Path  # survives failed attempts (e.g. partial downloads); <workdir>/<lang>/.cache/<stage>
    workers: int = 1  # --workers: processes of the local executor, threads of in-process libraries
    quiet: bool = False
    log: logging.Logger = logging.getLogger("wiki2bert")
    executor: Executor | None = None  # runs the stage's parallel tasks; None: LocalExecutor(workers)
    # temporary files of one attempt (template blobs, trainer files); the runner empties it before and after the
    # stage, so a killed attempt's files go with the next run. None: <cache_dir>/scratch
    scratch_dir: Path | None = None

    def __post_init__(self):
        if self.executor is None:
            object.__setattr__(self, "executor", LocalExecutor(self.workers))

    def languages(self, stage: str) -> dict[str, Path]:
        """A stage of the mix of a run of several languages (pipeline/languages.py): each language's `stage`
        directory it reads, by language (its inputs named LANG/STAGE); {} in a one-language run."""
        return {label.split("/")[0]: path for label, path in self.inputs.items() if label.endswith(f"/{stage}")}

    def scratch(self) -> Path:
        """The scratch directory, created."""
        directory = self.scratch_dir or self.cache_dir / "scratch"
        directory.mkdir(parents=True, exist_ok=True)
        return directory


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    config_cls: type
    run: Callable[[Any, StageContext], dict]
    inputs: tuple[str, ...] = ()  # stages whose output directories this one reads
    # stages it reads besides, when it runs for the mix of several languages (pipeline/languages.py): the shard
    # stage counts tokens with the mix's vocabulary
    mix_inputs: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()  # distributions whose versions go into the manifest
    # the version of what run() makes of a config and inputs: raised when a change to the code changes the outputs,
    # so that work directories made before it show the stage stale and re-run it (the manifest records it)
    output_format: int = 1
    # files read from outside the work directory (a local dump): config -> {label: fingerprint}; a change makes the
    # stage stale
    sources: Callable[[Any], dict] | None = None
    # stage configs ({name: config}) -> why the stage has no work in this run (the corpus stage without --corpus),
    # None when it has; a stage whose inputs all have none has none either (pipeline/sources.py)
    idle: Callable[[dict[str, Any]], str | None] | None = None


def stage_by_name(name: str) -> Stage:
    """Import pipeline.stages.<name> and return its STAGE; KeyError if there is no such stage."""
    if not name.isidentifier():
        raise KeyError(name)
    try:
        module = importlib.import_module(f"pipeline.stages.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"pipeline.stages.{name}":
            raise KeyError(name) from None
        raise
    return module.STAGE
