"""HFEngine: an embedded transformers model behind the ``Engine`` contract (CPU or GPU).

    from rstar2.engines.hf import HFEngine, HFEngineConfig

Continuous batching: every step admits waiting requests into free slots (prefilling only what
is not already cached) and then decodes one token for every active sequence, so a rollout
whose tool call just returned joins the very next step instead of waiting for the rest of its
batch. On the CPU's fused kernels the two are one pass: the new tokens of admitted sequences
(up to ``engine.FUSED_PREFILL`` each) are fed with the decoding rows' tokens. The steps run on
the submitting event loop, one at a time with the loop free in between
(``engine`` says why not on a thread of their own), so tool calls and HTTP traffic flow
between steps.

What is cached (see ``rstar2.engines.slots``):

* *shared prefixes*: when several waiting prompts start with the same >= ``min_shared_prefix``
  tokens (the system prompt; the 2G copies of one question), that prefix is computed once as a
  ``PrefixBlock`` that all of them read; identical prompts are prefilled once and copied;
* *finished sequences* stay parked in their slot (up to ``max_parked``, least recently used
  evicted first); a new prompt that extends one -- the next turn of the same rollout, after
  its tool response -- resumes in that slot and prefills only the new tokens.

On a GPU (``attention``: flat) blocks are copied into the slots that read them, attention is
one fused SDPA call per layer, and decode steps are fixed-shape CUDA graphs
(``engines.bucketed``); the CPU keeps cascade attention over blocks read in place.

Sampling is per request (temperature, top-p, stop tokens/strings); log-probs follow
``engines.base``. As a ``TrainableEngine``, ``update_weights`` swaps in new weights between RL
steps and drops every cached KV, which the old weights computed; ``reseed`` restarts the
sampling generator.

The package, one part per module:

* ``config``   -- ``HFEngineConfig``;
* ``engine``   -- ``HFEngine``: the queue, the futures and the steps (admit, decode);
* ``requests`` -- a request and a resident sequence, the records the parts share;
* ``table``    -- admission and prefix blocks: which sequence sits in which slot, what is cached;
* ``kv``       -- KV accounting: what admitted requests may come to hold, what they hold;
* ``compute``  -- forward passes: prefill, decode, shared blocks;
* ``sampling`` -- the next token of each row, and when a sequence is finished.
"""

from rstar2.engines.hf.config import HFEngineConfig
from rstar2.engines.hf.engine import HFEngine

__all__ = ["HFEngine", "HFEngineConfig"]
