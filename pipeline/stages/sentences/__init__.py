"""Stage `sentences` (stage.py) and its helpers: paragraph normalization and the sentence splitters (splitters.py),
with the rule splitter's per-language data (sentence_rules.yaml)."""
from pipeline.stages.sentences.stage import STAGE
