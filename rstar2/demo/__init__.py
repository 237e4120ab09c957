"""``rstar2 demo``: cold-start SFT, GRPO-RoC and held-out evaluation of the embedded model on
CPU (``pipeline``), with the RL curves drawn as a PNG (``plot``)."""
