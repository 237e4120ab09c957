"""The composition root: where a run is put together from its parts, and nothing else is.

* ``config``    -- the run's configuration tree (``RunConfig``: one section per component);
* ``recipe``    -- YAML recipes, dotted overrides, errors that name the bad field;
* ``settings``  -- each component's own settings, cut from the tree once (the trainer's, the
  learner's, the cluster's);
* ``placement`` -- where the parts live: the ``Placement`` protocol and ``LocalPlacement``
  (this process); the Ray one is ``rstar2.cluster.placement``;
* ``training``  -- ``run_training(config, placement)``: the one way a run is wired, for
  ``rstar2 train``, the demos and a cluster run alike.

Layers below (``rl``, ``agent``, ``engines``, ``cluster``...) never import this package.
Nothing is re-exported here, so ``import rstar2.run.config`` loads no model code.
"""
