"""The choice of weight sync for a run on Ray: which of the strategies
(``rstar2.cluster.weight_strategies``) carries the learner's weights to the engines.

    sync = open_weight_sync(method, learner, engine)   # method: cluster.weight_sync, resolved
    seconds = await sync.push(version)

* 'gather' -> ``GatherSync``: rank 0's full state dict through the driver to
  ``engine.update_weights`` (any ``TrainableEngine``: a fleet of HTTP members, Ray actors
  through Ray's object store, an in-process engine);
* 'broadcast' -> ``GroupSync``, straight from learner rank 0 to the fleet's members, by what
  the members are: vLLM's own NCCL weight transfer (``VLLMTransfer``) when every member is a
  ``weights.TransferReceiver`` (vLLM in Ray actors, ``vllm serve`` servers), else a bucketed
  gloo broadcast (``GlooBroadcast``) when every member is a ``weights.BroadcastReceiver``
  ('hf' Ray actors).

The learner catches up a member the fleet replaces (``DistributedLearner.catch_up``, given to
the fleet as its ``on_replaced``).
"""

from __future__ import annotations

from rstar2.cluster.weight_strategies import (
    GatherSync,
    GlooBroadcast,
    GroupSync,
    VLLMTransfer,
    WeightSync,
)
from rstar2.engines.base import TrainableEngine
from rstar2.fleet import Fleet
from rstar2.weights.wire import BroadcastReceiver, TransferReceiver, WeightSource


def open_weight_sync(method: str, learner: WeightSource, engine: TrainableEngine) -> WeightSync:
    """The sync ``method`` names for ``engine``'s members; see the module docstring."""
    if method != "broadcast":
        return GatherSync(learner, engine)
    members = engine.members if isinstance(engine, Fleet) else []
    if members and all(isinstance(member, TransferReceiver) for member in members):
        return GroupSync(engine, VLLMTransfer(learner))
    if members and all(isinstance(member, BroadcastReceiver) for member in members):
        return GroupSync(engine, GlooBroadcast(learner))
    raise ValueError("cluster.weight_sync 'broadcast' needs a fleet whose members all take "
                     "weights from the learner directly (Ray actor members, or vllm-serve "
                     "servers); use 'gather' for other engines")
