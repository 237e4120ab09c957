"""Token-in/token-out generation behind one contract (``base.Engine``).

* ``HFEngine`` -- an embedded transformers model (CPU or GPU) with continuous batching and
  prefix caching; the default model is SmolLM2-135M-Instruct, shipped with the package set;
* ``OpenAIEngine`` -- any OpenAI-compatible completions server (vLLM, SGLang, or
  ``rstar2 serve-model``), prompts sent as token ids;
* ``VLLMEngine`` -- in-process vLLM on GPU nodes (optional extra ``gpu``).

Engines are imported lazily so that ``rstar2.engines.base`` costs no torch import.
"""

from rstar2.engines.base import Completion, Engine, SamplingParams

__all__ = ["Completion", "Engine", "SamplingParams"]
