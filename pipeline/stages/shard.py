"""Stage `shard` (placeholder: being written)."""
from __future__ import annotations

import dataclasses

from pipeline.stages import Stage, StageContext


@dataclasses.dataclass(frozen=True)
class ShardConfig:
    pass


def run(config: ShardConfig, ctx: StageContext) -> dict:
    raise NotImplementedError("stage shard is not written yet")


STAGE = Stage("shard", ShardConfig, run, inputs=("filter",))
