"""The cold start before RL (report §4.1, in miniature): tool-format traces the project makes
itself, and supervised fine-tuning on them.

* ``tasks``   -- seeded problem templates needing exact computation, at two levels;
* ``traces``  -- scripted assistant turns played through the real agent loop and sandbox;
* ``gsm8k``   -- the same traces for GSM8K problems, built from their calculator annotations;
* ``dataset`` -- the disjoint SFT / RL / held-out splits and their files;
* ``train``   -- cross-entropy on the assistant's tokens of agent trajectories.
"""
