"""Sandbox services on every node of the Ray cluster, for the Python tool of a cluster run.

    services = NodeSandboxes(config.cluster.sandbox, timeout_s=config.rollout.tool_timeout_s)
    SandboxClient(services.urls)      # http://<node ip>:<port>, services_per_node per node
    services.check()                  # SandboxServicesDown naming the node that lost them
    services.close()                  # every service stopped, every actor gone

Each node with CPUs gets one small Ray actor (``NodeServices``), pinned to it by
``NodeAffinitySchedulingStrategy`` and reserving the CPUs of its services' workers, which starts
``services_per_node`` ``rstar2 sandbox serve`` processes (real bubblewrap isolation) listening
on the node's own address. The kernel ties the services to the actor (``PR_SET_PDEATHSIG``) and
their workers to the services (bubblewrap's ``--die-with-parent``), so nothing outlives the actor
however it ends: ``close``, a kill, or the driver's death (Ray then kills the job's actors).
Tool calls never pass through the actor; it only owns the processes.
"""

from __future__ import annotations

from rstar2.cluster.config import SandboxPlacement
from rstar2.errors import Rstar2Error

START_TIMEOUT_S = 300.0
ANSWER_TIMEOUT_S = 30.0


class SandboxServicesDown(Rstar2Error, RuntimeError):
    """A node's sandbox services did not start, or are gone; the message names the node."""


class NodeServices:
    """What runs in the actor on one node: its services, started at once."""

    def __init__(self, count: int, workers: int, timeout_s: float):
        import ray

        from rstar2.sandbox.local import start_service

        host = ray.util.get_node_ip_address()
        self.services = []
        try:
            for _ in range(count):
                self.services.append(start_service(host=host, workers=workers, timeout_s=timeout_s,
                                                   die_with_parent=True))
        except BaseException:
            self.stop()
            raise

    def urls(self) -> list[str]:
        return [service.url for service in self.services]

    def pids(self) -> list[int]:
        return [service.process.pid for service in self.services]

    def exited(self) -> list[str]:
        """The services whose process has ended, with its exit status."""
        return [f"{service.url} exited with status {service.process.poll()}"
                for service in self.services if service.process.poll() is not None]

    def stop(self) -> None:
        for service in self.services:
            service.stop()
        self.services = []


class NodeSandboxes:
    """``placement.services_per_node`` services on every node; see the module docstring."""

    def __init__(self, placement: SandboxPlacement, timeout_s: float):
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cpus = placement.services_per_node * placement.workers_per_service
        nodes = [node for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0)]
        if not nodes:
            raise SandboxServicesDown("no node of the Ray cluster has CPUs for sandbox services")
        for node in nodes:
            if node["Resources"]["CPU"] < cpus:
                raise SandboxServicesDown(
                    f"node {node['NodeManagerAddress']} has {node['Resources']['CPU']:g} CPUs in Ray, "
                    f"fewer than the {cpus} its sandbox workers take (cluster.sandbox."
                    "services_per_node x workers_per_service)")
        self.nodes = [node["NodeManagerAddress"] for node in nodes]
        self.actors = [
            ray.remote(NodeServices).options(
                num_cpus=cpus, max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(placement.services_per_node, placement.workers_per_service, timeout_s)
            for node in nodes]
        try:
            self.urls = [url for node, actor in zip(self.nodes, self.actors)
                         for url in self.ask(node, actor, "urls", START_TIMEOUT_S, "did not start")]
        except BaseException:
            self.close()
            raise

    @staticmethod
    def ask(node: str, actor, method: str, timeout_s: float, failure: str):
        """``actor.method()``; a dead or silent actor is a one-line ``SandboxServicesDown``."""
        import ray

        try:
            return ray.get(getattr(actor, method).remote(), timeout=timeout_s)  # a Ray actor handle
        except ray.exceptions.GetTimeoutError:
            raise SandboxServicesDown(f"sandbox services on node {node} {failure}: no answer in "
                                      f"{timeout_s:g} s (are its CPUs taken?)") from None
        except ray.exceptions.RayError as exc:
            raise SandboxServicesDown(f"sandbox services on node {node} {failure}: their actor "
                                      f"died ({last_line(exc)})") from exc

    def pids(self) -> dict[str, list[int]]:
        """Each node's service processes."""
        return {node: self.ask(node, actor, "pids", ANSWER_TIMEOUT_S, "are gone")
                for node, actor in zip(self.nodes, self.actors)}

    def check(self) -> None:
        """Raise ``SandboxServicesDown`` if a node's actor died or one of its services ended."""
        for node, actor in zip(self.nodes, self.actors):
            exited = self.ask(node, actor, "exited", ANSWER_TIMEOUT_S, "are gone")
            if exited:
                raise SandboxServicesDown(f"sandbox service on node {node} is gone: {exited[0]}")

    def close(self) -> None:
        """Stop every node's services and end its actor (a dead one is only removed)."""
        import ray

        for actor in self.actors:
            try:
                ray.get(actor.stop.remote(), timeout=ANSWER_TIMEOUT_S)
            except ray.exceptions.RayError:
                pass  # dead or stuck: the kill below takes its services with it
            ray.kill(actor, no_restart=True)
        self.actors = []


def last_line(error: BaseException) -> str:
    """The last non-empty line of an error's text (Ray's carry the whole remote traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
