"""The pipeline's side tools, outside the stage chain: `pipeline verify` (verify.py), `pipeline report`
(report.py) and `pipeline sample-dump` (sample_dump.py)."""
