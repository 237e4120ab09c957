"""The allocator's thresholds: raised by the rstar2 command, left alone where the user set them."""

import subprocess
import sys

import pytest

CHECK = ("from rstar2.models.memory import keep_freed_memory; import sys; "
         "sys.stdout.write(str(keep_freed_memory()))")


def run(env_extra: dict[str, str]) -> str:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env_extra
    return subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_thresholds_are_raised_unless_the_user_set_them():
    assert run({}) == "True"
    assert run({"MALLOC_MMAP_THRESHOLD_": "65536"}) == "False"
    assert run({"MALLOC_TRIM_THRESHOLD_": "65536"}) == "False"


def test_the_command_raises_them_at_start(monkeypatch):
    import importlib

    from typer.testing import CliRunner

    from rstar2.cli import app

    app_module = importlib.import_module("rstar2.cli.app")

    called = []
    monkeypatch.setattr(app_module, "keep_freed_memory", lambda: called.append(True))
    result = CliRunner().invoke(app, ["grade", "--help"])
    assert result.exit_code == 0 and called == [True]
