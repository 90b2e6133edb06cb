"""Edits to HDF5 files that the tests make to damage or reshape them."""
from __future__ import annotations

from pathlib import Path

import h5py


def rechunk(path: Path, rows: int) -> None:
    """Rewrite a file with chunks of `rows` rows, so that its last rows lie in chunks of their own."""
    with h5py.File(path, "r") as f:
        arrays = {key: f[key][()] for key in f}
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value, compression="gzip", chunks=(rows,) + value.shape[1:])
