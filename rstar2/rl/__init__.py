"""GRPO-RoC, the training algorithm of rStar2-Agent (report §2.2).

Modules, each one idea:

* ``config``       -- the run's configuration tree, YAML recipes and dotted overrides (no torch);
* ``roc``          -- Resample-on-Correct's rules: penalties, keep counts, choices (no torch);
* ``advantage``    -- the group step, one class per ``rl.roc.mode``: kept rollouts and advantages;
* ``loss``         -- the clipped policy loss, token-level normalisation, loss mask, optional KL/entropy;
* ``optim``        -- AdamW with linear warm-up then constant learning rate;
* ``prompt_order`` -- the resumable order in which training prompts are drawn;
* ``checkpoint``   -- atomic, resumable checkpoints;
* ``batch``        -- packing rollouts into left-padded micro-batches, response logits;
* ``update``       -- one optimizer update: micro-batches, gradient accumulation, clipping;
* ``policy``       -- loading the policy (LoRA optional) and saving it as a model directory;
* ``metrics``      -- the numbers a step reports; ``runlog`` -- where they go;
* ``timing``       -- wall time of overlapping phases (tool calls during rollouts);
* ``trainer``      -- the step loop; ``launch`` -- a run built from a recipe around it.

Nothing is re-exported here, so ``import rstar2.rl.config`` stays free of torch.
"""
