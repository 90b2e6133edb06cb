"""Stage `filter` (stage.py: the passes, long documents, report.json) and its rules (rules.py: the rule sets and
how a document is judged by them)."""
from pipeline.stages.filter.stage import STAGE
