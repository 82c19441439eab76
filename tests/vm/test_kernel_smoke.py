"""The smoke round of the VM kernel matrix, in `make test`: per Debian kernel one boot, and in it every data plane
loaded, attached (native XDP on virtio-net) and crossed by frames. The whole matrix is test_kernel_matrix.py."""

from __future__ import annotations

import kernels
import planes
import pytest


@pytest.mark.parametrize("suite", kernels.SMOKE_SUITES)
def test_every_data_plane_runs_on_debians_kernel(suite, objects, vm_work):
    object_paths, cache_dir = objects
    row = planes.run_round(kernels.kernel(suite), planes.SMOKE_MODES, object_paths, cache_dir, vm_work)
    planes.ROUNDS.append(row)
    each = ", ".join(f"{plane} {result.seconds:.1f}" for plane, result in row.planes.items())
    print(f"{row.kernel}: boot {row.boot_seconds:.1f} s, round {row.seconds:.1f} s ({each})")
    assert not row.failures(), planes.table([row])
