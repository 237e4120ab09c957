"""What every training run stands on, SFT's and RL's alike: the policy, the machinery of its
updates, its checkpoints and its logs. ``rstar2.sft`` and ``rstar2.rl`` each add their own loss
and loop.

* ``config``     -- the shared sections of a run config: model (LoRA), optimizer, checkpoint, logging (no torch);
* ``batch``      -- ``TrainSequence``, a sequence as the loss sees it, and the bin-packer of passes (no torch);
* ``packing``    -- packed rows: sequences end to end, attention split at their borders, trained logits;
* ``precision``  -- the compute dtype of a forward and backward pass (autocast);
* ``optim``      -- AdamW with linear warm-up then a constant or cosine learning rate;
* ``policy``     -- loading the policy (LoRA optional) and saving it as a model directory;
* ``checkpoint`` -- atomic, resumable checkpoints, written in the background;
* ``runlog``     -- where a run's per-step records go: metrics.jsonl, the console, TensorBoard, W&B.

Nothing is re-exported here, so ``import rstar2.training.config`` stays free of torch.
"""
