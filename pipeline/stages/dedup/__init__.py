"""Stage `dedup` (stage.py) and its helpers: MinHash signatures and band keys of documents (minhash.py), candidate
pairs per partition of the bucket records and the clusters they make (clusters.py)."""
from pipeline.stages.dedup.stage import STAGE
