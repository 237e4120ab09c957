"""The data the project makes itself: problems with exact answers, and the traces that solve them.

* ``templates``      -- seeded problem templates needing exact computation, at two levels;
* ``traces``         -- scripted assistant turns played through the real agent loop and sandbox;
* ``gsm8k``          -- the same traces for GSM8K problems, built from their calculator annotations;
* ``gsm8k_variants`` -- new GSM8K problems: other numbers, the same program, the sandbox's gold.

The demo and the GSM8K recipe train on them (``rstar2.demo``); ``rstar2.sft.dataset`` writes
them as the files ``rstar2 sft`` and ``rstar2 train`` read.
"""
