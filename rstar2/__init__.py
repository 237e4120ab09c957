"""rstar2: agentic reinforcement learning for tool-using math reasoners (rStar2-Agent).

Packages by pipeline stage: ``sandbox`` (isolated Python execution service), ``reward``
(answer extraction and verification), ``models`` (loading models, device and dtype choice),
``weights`` (weights on the wire and on disk), ``engines`` (token-in/token-out generation),
``fleet`` (many engines behind one scheduler), ``serve`` (an engine behind an HTTP API),
``agent`` (prompt, tool calls, multi-turn rollout), ``data`` and ``tasks`` (the problems and
traces the project makes), ``training`` (what SFT and RL both train on), ``sft`` (the cold
start), ``rl`` (GRPO-RoC) and ``eval``; ``cluster`` and ``run`` place and wire a run; ``cli``
is the thin ``rstar2`` command over them. Every error raised on purpose is an
``errors.Rstar2Error``; ``moved`` keeps old import paths working for one release.
"""

from pathlib import Path

from rstar2 import moved

__version__ = "0.1.0"
RECIPES = Path(__file__).resolve().parent / "recipes"
"""The recipes shipped with rstar2: ``rstar2/recipes`` links the clone's ``recipes/``, and a
wheel built from the clone carries copies, so ``rstar2 demo`` finds its recipe either way."""

moved.install()
