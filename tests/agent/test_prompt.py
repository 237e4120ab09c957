"""The paper's prompt through SmolLM2's real chat template."""

import json

from rstar2.agent.prompt import GENERATION_PREFIX, ChatFormat, PromptConfig, tool_schema


def test_prompt_carries_instructions_schema_question_and_reason_prefix(tokenizer):
    chat = ChatFormat(tokenizer)
    text = chat.prompt_text("What is 17*23?")
    assert text.startswith("<|im_start|>system\nA conversation between User and Assistant")
    assert json.dumps(tool_schema()) in text
    assert "<tool_call></tool_call> XML tags" in text
    assert "This is the problem:\nWhat is 17*23?<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n" + GENERATION_PREFIX)
    ids = chat.prompt_ids("What is 17*23?")
    assert tokenizer.decode(ids) == text
    assert 400 < len(ids) < 500  # the paper's ~450-token system prompt


def test_no_tools_variant_and_tool_name(tokenizer):
    plain = ChatFormat(tokenizer, PromptConfig(variant="no_tools")).prompt_text("q")
    assert "# Tools" not in plain and "<answer>" in plain
    renamed = ChatFormat(tokenizer, PromptConfig(tool_name="python_code_with_standard_io"))
    assert '"name": "python_code_with_standard_io"' in renamed.prompt_text("q")


def test_tool_turn_closes_the_assistant_turn_and_reopens_with_reason(tokenizer):
    chat = ChatFormat(tokenizer)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = chat.tool_turn_ids(["391", "oops"], last_token=end_of_turn)
    assert tokenizer.decode(ids) == (
        "\n<|im_start|>user\n<tool_response>\n391\n</tool_response>\n<tool_response>\noops\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>")
    # A turn cut by a stop string has no end-of-turn token yet: the tool turn supplies it.
    assert chat.tool_turn_text(["x"], turn_ended=False).startswith("<|im_end|>\n<|im_start|>user")
