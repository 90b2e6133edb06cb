"""Where the parallel stages run their tasks: a local process pool (local.py, the default) or a Dask distributed
cluster (dask_cluster.py, `--executor dask`); both give results in task order."""
