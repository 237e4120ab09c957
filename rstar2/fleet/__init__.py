"""Rollout at cluster scale: one ``Engine`` over many members, scheduled per trajectory.

* ``policies`` -- the ``Scheduler`` (``static``, ``least_loaded``, ``kv_aware``, ``adaptive``),
  plain code the fleet and ``benchmarks/scheduler_sim.py`` both run; ``adaptive`` (the default)
  lives in ``adaptive``, with the length model it predicts from in ``lengths``;
* ``members`` -- the engines a fleet drives: ``LocalMember`` (in this process), ``HTTPMember``
  (an OpenAI-compatible server, load and decode counters read from vLLM's ``/metrics`` names);
* ``ray_member`` -- ``RayMember``, an engine in a Ray actor, replaced when it dies;
* ``vllm_member`` -- ``VLLMRayMember``, vLLM in a Ray actor with its GPUs on one node;
* ``vllm_server`` -- ``VLLMServerMember``, a ``vllm serve`` server that takes weights through
  vLLM's weight-transfer routes;
* ``engine`` -- ``Fleet`` itself. See ``docs/fleet.md``.
"""

from rstar2.fleet.engine import Fleet, FleetDown
from rstar2.fleet.members import HTTPMember, LocalMember, Member, MemberDown
from rstar2.fleet.scheduler import POLICIES, Scheduler

__all__ = ["POLICIES", "Fleet", "FleetDown", "HTTPMember", "LocalMember", "Member",
           "MemberDown", "Scheduler"]
