"""``vllm.inputs.TokensPrompt``: a prompt given as token ids (a TypedDict in vLLM)."""

from typing import TypedDict


class FakeTokensPrompt(TypedDict):
    prompt_token_ids: list[int]


TokensPrompt = FakeTokensPrompt
