"""Placement of a run over a Ray cluster: the ``cluster:`` recipe section, the plan that
``rstar2 train --plan`` prints (placement, per-GPU memory, rollouts in flight), the Ray
``Placement`` (``placement.RayPlacement``: sandboxes on every node, the engine fleet, the
distributed learner, the export) and the weight sync (see docs/distributed.md). It is handed
its own settings (``config.ClusterJob``), never the whole run config."""
