# SPDX-License-Identifier: LGPL-2.1-or-later
"""TierfsDeviceStore without a mount or a GPU: its file format with host
frames, and the mapping of dask-cuda's limits onto tierfs's options. The
device path runs in tests/gpu/dask_device_mock.bats (fake CUDA runtime)."""

import os

import numpy as np
import pandas as pd
import pytest

from tierfs import dask_device as dd
from tierfs.dask_device import (TierfsDeviceStore, mount_options,
                                parse_device_memory_limit)

GiB = 1 << 30


def test_limits_parse_as_dask_cuda_writes_them():
    assert parse_device_memory_limit(None) is None
    assert parse_device_memory_limit(0) is None
    assert parse_device_memory_limit("16GiB") == 16 * GiB
    assert parse_device_memory_limit(3 * GiB) == 3 * GiB
    assert parse_device_memory_limit(0.5, 80 * GiB) == 40 * GiB
    assert parse_device_memory_limit("25%", 80 * GiB) == 20 * GiB
    assert parse_device_memory_limit("default", 80 * GiB) == 64 * GiB
    with pytest.raises(ValueError):
        parse_device_memory_limit(0.5)


def test_mount_options_one_budget_per_node():
    o = mount_options("60GiB", "100GiB", 4, gpus="0,1,2,3")
    assert o.split(",") == ["device_backend=cuda", "device_gpus=0:1:2:3",
                            "device_limit=%d" % (60 * GiB),
                            "host_limit=%d" % (400 * GiB)]
    o = mount_options(0.75, "8GiB", 2, gpu_memory=80 * GiB)
    assert "device_limit=%d" % (60 * GiB) in o.split(",")
    assert "host_limit=%d" % (16 * GiB) in o.split(",")
    # Without device_memory_limit tierfs's own default limit stays.
    assert not any(x.startswith("device_limit")
                   for x in mount_options(None, "8GiB", 1).split(","))
    with pytest.raises(ValueError):
        mount_options("1GiB", None, 1)


def test_host_frames_round_trip_on_a_plain_directory(tmp_path):
    s = TierfsDeviceStore(str(tmp_path))
    try:
        # No cuda device tier there: the device store serializes with the
        # host families, and its files are in its own format.
        assert s.serializers == ("dask", "pickle")
        a = np.arange(100000, dtype=np.int64)
        df = pd.DataFrame({"x": np.arange(1000), "y": np.full(1000, 2.5)})
        s["a"], s["df"], s["t"] = a, df, ("small", 1)
        f = s.file_of("a")
        with open(f, "rb") as fh:
            assert fh.read(8) == b"TFSDDEV1"
        assert os.path.getsize(f) >= a.nbytes
        s._heads.clear()  # read the header from the file, not the cache
        s.cache_bytes = 0
        assert np.array_equal(s["a"], a)
        pd.testing.assert_frame_equal(s["df"], df)
        assert s["t"] == ("small", 1)
        del s["a"]
        assert "a" not in s
    finally:
        s.close()


def test_a_file_that_is_no_value_is_refused(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"NOTAFILE" + bytes(64))
    with pytest.raises(ValueError):
        dd._head_size(p.read_bytes())
    with pytest.raises(ValueError):
        dd._parse_head(p.read_bytes())
