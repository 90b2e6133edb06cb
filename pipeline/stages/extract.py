"""Stage `extract` (placeholder: being written)."""
from __future__ import annotations

import dataclasses

from pipeline.stages import Stage, StageContext


@dataclasses.dataclass(frozen=True)
class ExtractConfig:
    pass


def run(config: ExtractConfig, ctx: StageContext) -> dict:
    raise NotImplementedError("stage extract is not written yet")


STAGE = Stage("extract", ExtractConfig, run, inputs=("download",))
