"""GRPO-RoC, the training algorithm of rStar2-Agent (report §2.2).

It trains on ``rstar2.training`` (sequences and their packing, AdamW, the policy, checkpoints,
the run log), as SFT does. Modules, each one idea:

* ``config``       -- the run config's ``rl`` section: RoC, the loss, the optimizer, init (no torch);
* ``roc``          -- Resample-on-Correct's rules: penalties, keep counts, choices (no torch);
* ``advantage``    -- the group step, one class per ``rl.roc.mode``: kept rollouts and advantages;
* ``loss``         -- the clipped policy loss, token-level normalisation, loss mask, optional KL/entropy;
* ``correction``   -- importance weights against the engine's sampling policy;
* ``prompt_order`` -- the resumable order in which training prompts are drawn;
* ``update``       -- one optimizer update: micro-batches, gradient accumulation, clipping;
* ``publish``      -- a saved model directory onto the Hugging Face hub;
* ``metrics``      -- the numbers a step reports (``rstar2.training.runlog`` is where they go);
* ``timing``       -- wall time of overlapping phases (tool calls during rollouts);
* ``rollout``      -- a sampled rollout, as the sampler hands it to the step;
* ``sampler``      -- rollouts of a batch of problems through the agent, graded as each ends;
* ``learner``      -- the ``Learner`` protocol and ``LocalLearner``, the policy in this process;
* ``validation``   -- greedy probes of the policy on a held-out set during training;
* ``silence``      -- when a run has learned nothing, and the error it then fails with;
* ``trainer``      -- the step loop. A run is built around it by ``rstar2.run``.

Nothing is re-exported here, so ``import rstar2.rl.config`` stays free of torch.
"""
