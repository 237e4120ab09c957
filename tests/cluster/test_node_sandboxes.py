"""Sandbox services per node on a real local Ray cluster (one node here), with real bubblewrap:
they answer at the node's address, and nothing of them is left after ``close`` or after their
actor is killed, which ``check`` then reports naming the node."""

import asyncio
import time

import httpx
import psutil
import pytest

from rstar2.cluster.config import SandboxPlacement
from rstar2.cluster.sandboxes import NodeSandboxes, SandboxServicesDown
from rstar2.sandbox import SandboxClient


def service_tree(pids: list[int]) -> list[psutil.Process]:
    """The services and every process under them (bubblewrap, the warm workers)."""
    tree = []
    for pid in pids:
        root = psutil.Process(pid)
        tree += [root, *root.children(recursive=True)]
    return tree


def gone(processes: list[psutil.Process], within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.2)
    return False


async def answers(urls: list[str]) -> list[str]:
    results = []
    for url in urls:  # each service on its own
        async with SandboxClient(url) as client:
            results.append((await client.run("print(6 * 7)")).stdout)
    return results


def test_every_node_runs_its_services_until_close(local_ray):
    node = local_ray.util.get_node_ip_address()
    services = NodeSandboxes(SandboxPlacement(services_per_node=2, workers_per_service=1), 4.0)
    try:
        assert services.nodes == [node]
        assert len(services.urls) == 2 and all(u.startswith(f"http://{node}:") for u in services.urls)
        assert asyncio.run(answers(services.urls)) == ["42\n", "42\n"]
        assert all(httpx.get(f"{u}/health").json()["isolation"] == "bubblewrap" for u in services.urls)
        services.check()
        processes = service_tree(services.pids()[node])
        assert len(processes) > 2  # the services and their workers
    finally:
        services.close()
    assert gone(processes)
    for url in services.urls:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health")


def test_a_killed_service_actor_takes_its_services_along_and_is_reported(local_ray):
    node = local_ray.util.get_node_ip_address()
    services = NodeSandboxes(SandboxPlacement(services_per_node=1, workers_per_service=1), 4.0)
    try:
        processes = service_tree(services.pids()[node])
        local_ray.kill(services.actors[0])
        assert gone(processes)  # the kernel's parent-death signal, then bubblewrap's
        with pytest.raises(SandboxServicesDown, match=f"on node {node} are gone: their actor died"):
            services.check()
    finally:
        services.close()  # a dead actor is only removed
