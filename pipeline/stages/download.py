"""Stage `download` (placeholder: being written)."""
from __future__ import annotations

import dataclasses

from pipeline.stages import Stage, StageContext


@dataclasses.dataclass(frozen=True)
class DownloadConfig:
    pass


def run(config: DownloadConfig, ctx: StageContext) -> dict:
    raise NotImplementedError("stage download is not written yet")


STAGE = Stage("download", DownloadConfig, run, inputs=())
