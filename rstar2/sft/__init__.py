"""The cold start before RL (report §4.1): ``rstar2 sft`` and the traces the project makes itself.

* ``chat``    -- the SFT data: chat-format tool-use conversations and their token sequences;
* ``config``  -- an SFT run's recipe (``rstar2 sft RECIPE.yaml``);
* ``run``     -- the run: checks, metrics, checkpoints and resume, the model with its card;
* ``train``   -- cross-entropy on the assistant's tokens, the optimizer steps;
* ``tasks``   -- seeded problem templates needing exact computation, at two levels;
* ``traces``  -- scripted assistant turns played through the real agent loop and sandbox;
* ``gsm8k``   -- the same traces for GSM8K problems, built from their calculator annotations;
* ``dataset`` -- the demo's disjoint SFT / RL / held-out splits and their files.
"""
