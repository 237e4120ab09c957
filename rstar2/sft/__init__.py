"""The cold start before RL (report §4.1): ``rstar2 sft``.

It trains on ``rstar2.training`` (sequences and their packing, AdamW, the policy, checkpoints,
the run log), as RL does; the traces it learns from are made in ``rstar2.tasks``.

* ``chat``    -- the SFT data: chat-format tool-use conversations and their token sequences;
* ``config``  -- an SFT run's recipe (``rstar2 sft RECIPE.yaml``; no torch);
* ``run``     -- the run: checks, metrics, checkpoints and resume, the model with its card;
* ``train``   -- cross-entropy on the assistant's tokens, the optimizer steps;
* ``dataset`` -- the demo's disjoint SFT / RL / held-out splits, and the files of problems and
  conversations ``rstar2 train`` and ``rstar2 sft`` read.
"""
