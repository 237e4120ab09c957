"""``rstar2 demo``: cold-start SFT, GRPO-RoC and held-out evaluation of the embedded model on
CPU (``pipeline``), the same on GSM8K train and test (``gsm8k``, ``--recipe gsm8k``), with the
RL curves drawn as a PNG (``plot``)."""
