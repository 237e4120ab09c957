"""Placement of a run over a cluster: the ``cluster:`` recipe section, the plan that
``rstar2 train --plan`` prints (placement, per-GPU memory, rollouts in flight) and the
distributed learner and weight sync built from it (see docs/distributed.md)."""
