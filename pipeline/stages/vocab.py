"""Stage `vocab` (placeholder: being written)."""
from __future__ import annotations

import dataclasses

from pipeline.stages import Stage, StageContext


@dataclasses.dataclass(frozen=True)
class VocabConfig:
    pass


def run(config: VocabConfig, ctx: StageContext) -> dict:
    raise NotImplementedError("stage vocab is not written yet")


STAGE = Stage("vocab", VocabConfig, run, inputs=("filter",))
