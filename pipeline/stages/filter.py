"""Stage `filter` (placeholder: being written)."""
from __future__ import annotations

import dataclasses

from pipeline.stages import Stage, StageContext


@dataclasses.dataclass(frozen=True)
class FilterConfig:
    pass


def run(config: FilterConfig, ctx: StageContext) -> dict:
    raise NotImplementedError("stage filter is not written yet")


STAGE = Stage("filter", FilterConfig, run, inputs=("sentences",))
