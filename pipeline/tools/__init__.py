"""The pipeline's side tools, outside the stage chain: `pipeline verify` (verify.py), `pipeline report`
(report.py), `pipeline sample-dump` (sample_dump.py), `pipeline sample-corpus` (sample_corpus.py) and `pipeline
plan` (plan.py, with measure.py)."""
