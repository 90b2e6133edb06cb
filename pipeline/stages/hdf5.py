"""Stage `hdf5` (placeholder: being written)."""
from __future__ import annotations

import dataclasses

from pipeline.stages import Stage, StageContext


@dataclasses.dataclass(frozen=True)
class Hdf5Config:
    pass


def run(config: Hdf5Config, ctx: StageContext) -> dict:
    raise NotImplementedError("stage hdf5 is not written yet")


STAGE = Stage("hdf5", Hdf5Config, run, inputs=("shard", "vocab"))
