"""The allocator's thresholds: raised by the rstar2 command, left alone where the user set them."""

import ctypes.util
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


TRIM = """
import sys
from rstar2.models.memory import keep_freed_memory, return_freed_memory
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
assert keep_freed_memory()
base = rss()
blocks = [bytearray(4 << 20) for _ in range(128)]  # 512 MiB in blocks the heap keeps
held = rss() - base
del blocks
kept = rss() - base
given_back = return_freed_memory()
sys.stdout.write(f"{held} {kept} {given_back} {rss() - base}")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_blocks_stay_in_the_heap_until_given_back():
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MALLOC_")}
    held, kept, given_back, after = subprocess.run([sys.executable, "-c", TRIM], env=env, capture_output=True,
                                                   text=True, check=True).stdout.split()
    assert int(held) >= 500 and int(kept) >= 500  # freed, yet still the process's
    assert given_back == "True" and int(after) < 50


def test_the_command_raises_them_at_start(monkeypatch):
    import importlib

    from typer.testing import CliRunner

    from rstar2.cli import app

    app_module = importlib.import_module("rstar2.cli.app")

    called = []
    monkeypatch.setattr(app_module, "keep_freed_memory", lambda: called.append(True))
    result = CliRunner().invoke(app, ["grade", "--help"])
    assert result.exit_code == 0 and called == [True]


TCMALLOC_TRIM = """
import sys
from rstar2.models.memory import return_freed_memory, tcmalloc
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
assert tcmalloc() is not None
base = rss()
blocks = [bytearray(4 << 20) for _ in range(128)]
del blocks
kept = rss() - base
given_back = return_freed_memory()
sys.stdout.write(f"{kept} {given_back} {rss() - base}")
"""


@pytest.mark.skipif(ctypes.util.find_library("tcmalloc_minimal") is None, reason="tcmalloc is not installed "
                    "here (scripts/setup.sh installs libtcmalloc-minimal4 where it may)")
def test_tcmalloc_keeps_freed_blocks_until_asked_to_give_them_back():
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MALLOC_")}
    env["LD_PRELOAD"] = ctypes.util.find_library("tcmalloc_minimal")
    kept, given_back, after = subprocess.run([sys.executable, "-c", TCMALLOC_TRIM], env=env, capture_output=True,
                                             text=True, check=True).stdout.split()
    assert int(kept) >= 500 and given_back == "True" and int(after) < 50
