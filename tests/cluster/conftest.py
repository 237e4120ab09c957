"""A real local Ray cluster for the distributed tests, started once per module."""

import pytest


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="the distributed tests need the [ray] extra "
                              "(scripts/setup.sh installs it)")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield ray
    ray.shutdown()
