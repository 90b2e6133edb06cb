"""Stage `hdf5` (stage.py) and its helpers, in the order data flows through them: text -> WordPiece ids
(tokenize.py), ids -> planned and built instances (instances.py), instances -> one HDF5 file per (variant, shard)
(instance_files.py), finished files kept across killed attempts (finished_files.py), glibc tuning for the
workers (malloc.py). `pipeline hdf5` runs the same stage on the user's own text (stage.run_standalone)."""
from pipeline.stages.hdf5.stage import STAGE
