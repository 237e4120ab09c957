"""What a rollout looks like on the page: the prompt the model saw, folded above the response,
and the response without the chat template's special tokens (turn boundaries marked instead)."""

from __future__ import annotations

from tests.view.conftest import STEPS, file_rows, screenshot, write_rows

READY = "body[data-ready]"
HOSTILE = '<script>window.PWNED = 1</script><img src="x" onerror="window.PWNED = 2">'


def open_rollout(page, viewer, folder, line: int, step: int = STEPS) -> None:
    server = viewer(folder)
    page.goto(server.url)
    page.wait_for_selector(READY, timeout=30_000)
    page.click("button[data-tab=rollouts]")
    page.select_option("#ro-step", str(step))
    page.click(f"tr.rollout-row[data-index='{line}']")
    page.wait_for_selector("#trajectory .transcript")


def two_call_line(rows: list[dict]) -> int:
    """A rollout that is not its group's first (its prompt is the group's) and has two turns
    after tool calls: one that fixed its failing first call."""
    return next(i for i, r in enumerate(rows) if r["rollout"] > 0 and len(r["tool_calls"]) == 2)


def test_the_prompt_is_folded_above_the_response_and_shown_as_text(page, viewer, run_copy):
    step = run_copy / "rollouts" / f"step_{STEPS}.jsonl"
    rows = file_rows(step)
    line = two_call_line(rows)
    carrier = next(r for r in rows if r["group"] == rows[line]["group"] and "prompt" in r)
    carrier["prompt"] = carrier["prompt"].replace("Solve the problem.", f"Solve the problem. {HOSTILE}")
    write_rows(step, rows)
    open_rollout(page, viewer, run_copy, line)
    prompt = page.locator("#trajectory details.prompt")
    assert prompt.count() == 1 and prompt.get_attribute("open") is None  # folded until asked for
    assert page.locator("#trajectory > details.prompt + .transcript").count() == 1  # right above the response
    prompt.locator("summary").click()
    text = prompt.inner_text()
    assert HOSTILE in text and "execute_python_code_with_standard_io" in text  # the tool the model was offered
    assert page.evaluate("window.PWNED") is None and page.locator("#trajectory img").count() == 0
    assert [prompt.locator(".turn").nth(i).inner_text() for i in range(3)] == ["system", "user", "assistant"]
    assert "<|im_start|>" not in text and "<|im_end|>" not in text
    screenshot(page, "rollout-prompt")


def test_special_tokens_are_hidden_and_turn_boundaries_marked(page, viewer, run_folder):
    rows = file_rows(run_folder / "rollouts" / f"step_{STEPS}.jsonl")
    line = two_call_line(rows)
    assert "<|im_end|>" in rows[line]["response"] and "<|im_start|>" in rows[line]["response"]  # the log keeps them
    open_rollout(page, viewer, run_folder, line)
    transcript = page.locator("#trajectory .transcript")
    text = transcript.inner_text()
    assert not any(token in text for token in ("<|im_end|>", "<|im_start|>", "<|endoftext|>"))
    turns = transcript.locator(".turn")
    assert [turns.nth(i).inner_text() for i in range(turns.count())] == ["user", "assistant"] * 2
    assert turns.first.get_attribute("title") == "<|im_start|>user\n"  # what the model saw, on hover
    page.check("#shade")
    page.wait_for_selector("#trajectory .tokens")
    assert page.locator("#trajectory .tok").count() == rows[line]["response_tokens"]  # every token still there
    special = page.locator("#trajectory .tok.special")
    assert {special.nth(i).inner_text() for i in range(special.count())} == {"<|im_end|>", "<|im_start|>"}


def test_the_tokenizers_recorded_special_tokens_are_the_ones_hidden(page, viewer, run_copy):
    step = run_copy / "rollouts" / f"step_{STEPS}.jsonl"
    rows = file_rows(step)
    line = next(i for i, r in enumerate(rows) if "prompt" in r)
    rows[line]["special_tokens"] = ["<s>", "</s>"]
    rows[line]["response"] = rows[line]["response"].replace("<|im_end|>", "</s>")
    write_rows(step, rows)
    open_rollout(page, viewer, run_copy, line)
    assert "</s>" not in page.locator("#trajectory .transcript").inner_text()


def test_a_log_without_prompts_still_shows_its_rollouts(page, viewer, run_copy):
    step = run_copy / "rollouts" / f"step_{STEPS}.jsonl"
    rows = [{key: value for key, value in row.items() if key not in ("prompt", "special_tokens")}
            for row in file_rows(step)]
    write_rows(step, rows)
    line = two_call_line(rows)
    open_rollout(page, viewer, run_copy, line)
    assert page.locator("#trajectory details.prompt").count() == 0
    assert "not recorded" in page.locator("#trajectory .prompt-missing").inner_text()
    assert page.locator("#trajectory .call").count() == 2
    assert "<|im_end|>" not in page.locator("#trajectory .transcript").inner_text()  # tokens of the <|name|> form


def test_eval_samples_show_no_special_tokens(page, viewer, run_folder):
    server = viewer(run_folder)
    page.goto(server.url)
    page.wait_for_selector(READY, timeout=30_000)
    page.click("button[data-tab=eval]")
    page.click("tr.problem-row >> nth=0")
    page.wait_for_selector("#ev-samples .sample")
    samples = file_rows(run_folder / "eval" / "base" / "samples.jsonl")
    assert any("<|im_end|>" in sample["response"] for sample in samples)
    assert "<|im_end|>" not in page.locator("#ev-samples").inner_text()
