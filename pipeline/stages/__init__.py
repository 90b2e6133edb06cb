"""The stage interface: what a stage module defines and what the runner gives it.

Each stage module defines `STAGE = Stage(...)`: a config dataclass and a function run(config, ctx) -> StageCounts
that fills ctx.out_dir from the directories in ctx.inputs (in the mix of several languages: ctx.by_language).
Config fields that never change the output (retries, timeouts) are declared with `wiki2bert_core.config.changeable`
and left out of the config hash."""
from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterator

from pipeline.executors.local import Executor, LocalExecutor


@dataclasses.dataclass(frozen=True, eq=False)
class StageCounts(Mapping):
    """What a stage's run() returns: its counts, which the runner records in the manifest (`counts`) and the funnel
    (pipeline/funnel.py) reads. As a mapping it is that record: the totals, then `sources` and `languages` when
    counted."""
    # the whole stage's figures by name: numbers (status prints the first ones), reasons as the stage names them
    # (extract's skipped pages by reason, the filter's dropped_<reason> documents), a few nested records
    totals: dict[str, Any]
    sources: dict[str, dict[str, Any]] | None = None  # source name -> its counts (stages that count per source)
    languages: dict[str, dict[str, Any]] | None = None  # language -> its counts (the mix of several languages)

    def to_dict(self) -> dict[str, Any]:
        return {**self.totals, **({"sources": self.sources} if self.sources is not None else {}),
                **({"languages": self.languages} if self.languages is not None else {})}

    @classmethod
    def from_dict(cls, counts: dict[str, Any] | None) -> StageCounts:
        """A manifest's recorded counts (any stage's, any age) as StageCounts."""
        counts = dict(counts or {})
        return cls(counts, counts.pop("sources", None), counts.pop("languages", None))

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


@dataclasses.dataclass(frozen=True)
class InputLabel:
    """An input of a stage: a stage of the same directory, or a language's stage read by the mix of a run of
    several languages (pipeline/languages.py). Manifests record it as text: `dedup`, `hu/dedup`."""
    stage: str
    language: str | None = None

    def __str__(self) -> str:
        return f"{self.language}/{self.stage}" if self.language else self.stage

    @classmethod
    def parse(cls, text: str) -> InputLabel:
        language, _, stage = text.rpartition("/")
        return cls(stage, language or None)


@dataclasses.dataclass(frozen=True)
class StageContext:
    lang: str
    out_dir: Path  # temporary directory; renamed into place by the runner when run() returns
    inputs: dict[str, Path]  # upstream stage name -> its completed directory, those of the stage's own directory
    cache_dir: Path  # survives failed attempts (e.g. partial downloads); <workdir>/<lang>/.cache/<stage>
    workers: int = 1  # --workers: processes of the local executor, threads of in-process libraries
    quiet: bool = False
    log: logging.Logger = logging.getLogger("wiki2bert")
    executor: Executor | None = None  # runs the stage's parallel tasks; None: LocalExecutor(workers)
    # temporary files of one attempt (template blobs, trainer files); the runner empties it before and after the
    # stage, so a killed attempt's files go with the next run. None: <cache_dir>/scratch
    scratch_dir: Path | None = None
    # the mix of a run of several languages: the language stages it reads (`hu/dedup`) -> their completed directories
    language_inputs: dict[InputLabel, Path] = dataclasses.field(default_factory=dict)
    # each input -> the config it ran with, as its manifest recorded it (the vocab stage counts words as the filter
    # did)
    input_configs: dict[InputLabel, dict] = dataclasses.field(default_factory=dict)
    # the stage's completed directory of an earlier run, which this run replaces: the filter reuses its scores
    done_dir: Path | None = None

    def __post_init__(self):
        if self.executor is None:
            object.__setattr__(self, "executor", LocalExecutor(self.workers))

    @property
    def several_languages(self) -> bool:
        """Whether the stage runs for the mix of a run of several languages."""
        return bool(self.language_inputs)

    def by_language(self, stage: str) -> dict[str, Path]:
        """The `stage` directories the stage reads, by language: each language's in the mix of several languages,
        {ctx.lang: the one input} in a one-language run."""
        if self.language_inputs:
            return {label.language: path for label, path in self.language_inputs.items() if label.stage == stage}
        return {self.lang: self.inputs[stage]} if stage in self.inputs else {}

    def config_by_language(self, stage: str) -> dict[str, dict]:
        """The config each `stage` directory of by_language() ran with ({} where none was recorded)."""
        if self.language_inputs:
            return {lang: self.input_configs.get(InputLabel(stage, lang), {}) for lang in self.by_language(stage)}
        return {self.lang: self.input_configs.get(InputLabel(stage), {})} if stage in self.inputs else {}

    def scratch(self) -> Path:
        """The scratch directory, created."""
        directory = self.scratch_dir or self.cache_dir / "scratch"
        directory.mkdir(parents=True, exist_ok=True)
        return directory


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    config_cls: type
    run: Callable[[Any, StageContext], StageCounts]
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
