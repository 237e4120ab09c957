"""The sandbox service's wire types, shared by the server and the client.

A call is a piece of Python source plus what it reads on stdin; its answer is one of four
outcomes (the rStar2-Agent report's list) plus ``killed`` for a run whose process died from
outside the program's control:

* ``ok``      -- ran to the end; ``stdout`` holds what it printed and ``result`` the repr of its
  last expression (as IPython would show it) when that expression is not ``None``;
* ``error``   -- raised (``stderr`` ends with the traceback) or exited with a non-zero code;
* ``timeout`` -- still running at its deadline (wall clock or CPU time); its whole process
  tree was killed;
* ``killed``  -- died from a signal (segfault, out-of-memory kill, killed from outside) or its
  worker died under it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["ok", "error", "timeout", "killed"]


class RunRequest(BaseModel):
    """One snippet to execute in a fresh, isolated process."""

    code: str = Field(description="Python source to run as a script.")
    stdin: str = Field("", description="Text the program reads on standard input.")
    timeout_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Wall-clock deadline in seconds; the server's default when omitted, "
        "capped at its maximum.",
    )


class RunResult(BaseModel):
    """What one snippet did."""

    status: Status = Field(description="ok | error | timeout | killed (see module docstring).")
    stdout: str = Field("", description="Standard output, truncated with a marker past the cap.")
    stderr: str = Field("", description="Standard error (tracebacks), truncated past the cap.")
    result: str | None = Field(
        None, description="repr of the last expression's value when it is not None, else null."
    )
    duration_s: float = Field(0.0, description="Seconds from start of execution to its end.")

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class BatchRequest(BaseModel):
    requests: list[RunRequest] = Field(description="Snippets to run; answered in the same order.")


class BatchResponse(BaseModel):
    results: list[RunResult]
