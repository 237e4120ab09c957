"""The agent: prompt, tool-call parsing and the multi-turn, tool-using rollout.

* ``prompt`` -- the paper's prompt rendered with the model's chat template (``ChatFormat``);
* ``toolcall`` -- parsing ``<tool_call>`` JSON and turning sandbox results into tool responses;
* ``rollout`` -- ``Agent``: token-in/token-out rollouts with concurrent tool calls;
* ``trajectory`` -- ``Trajectory``, the JSON-serialisable record later stages consume.

Knows nothing of how engines generate or how RL uses trajectories.
"""
