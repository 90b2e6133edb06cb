"""Stage `corpus` (stage.py) and its helper: reading JSON Lines, Parquet and plain-text corpus files (readers.py)."""
from pipeline.stages.corpus.stage import STAGE
