"""wiki2bert_core/hdf5_format.py's layout_problems: `pipeline verify` and the pretraining loader judge a file's
layout by the one rule, each naming the file in its own words."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from wiki2bert_core.errors import DataError
from pipeline.tools.verify import verify_path
from pretrain.data.loader import open_data


def replaced(name, change):
    def edit(path):
        with h5py.File(path, "a") as f:
            values = change(f[name][()])
            del f[name]
            f.create_dataset(name, data=values)
    return edit


@pytest.mark.parametrize("written, edit, problem", [
    ({"dtype": np.int16, "labels_2d": True}, None, None),  # other integer widths, labels stored as [N, 1]
    ({}, replaced("input_ids", lambda ids: ids.astype(np.float32)), "input_ids: dtype float32, expected integers "
                                                                    "(int32)"),
    ({}, replaced("segment_ids", lambda ids: ids[:, :8]), "segment_ids: shape (6, 8), but input_ids and input_mask have (6, 32)"),
], ids=["int16-labels-n1", "floats", "narrower-segment-ids"])
def test_verify_and_the_loader_accept_and_refuse_the_same_layouts(tmp_path, write_dataset, write_hdf5, written, edit,
                                                                   problem):
    variant = write_dataset(tmp_path, [6])
    path = variant / "training" / "training_0000.hdf5"
    write_hdf5(path, 6, **written)
    if edit:
        edit(path)
    layout = [p for p in verify_path(path).problems if "dtype" in p or "shape" in p or "missing dataset" in p]
    if problem is None:
        assert layout == []
        assert open_data(variant, 32, 60).samples == 6
    else:
        assert layout == [f"{path}: {problem}"]
        with pytest.raises(DataError) as refused:
            open_data(variant, 32, 60)
        assert str(refused.value) == f"{path}: not NVIDIA's BERT layout: {problem}"
