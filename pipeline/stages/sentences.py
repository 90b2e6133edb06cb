"""Stage `sentences` (placeholder: being written)."""
from __future__ import annotations

import dataclasses

from pipeline.stages import Stage, StageContext


@dataclasses.dataclass(frozen=True)
class SentencesConfig:
    pass


def run(config: SentencesConfig, ctx: StageContext) -> dict:
    raise NotImplementedError("stage sentences is not written yet")


STAGE = Stage("sentences", SentencesConfig, run, inputs=("extract",))
