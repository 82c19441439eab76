"""The whole VM kernel matrix (make test-kernels): per Debian kernel one boot, and in it every data plane in every
mode it supports on virtio-net (XDP native and generic, the tc hook where it has one). The table is printed at the
end of the session."""

from __future__ import annotations

import kernels
import planes
import pytest

pytestmark = pytest.mark.kernel_matrix


@pytest.mark.parametrize("suite", list(kernels.SUITES))
def test_every_data_plane_in_every_mode(suite, objects, vm_work):
    object_paths, cache_dir = objects
    row = planes.run_round(kernels.kernel(suite), planes.MODES, object_paths, cache_dir, vm_work)
    planes.ROUNDS.append(row)
    assert not row.failures(), planes.table([row])
