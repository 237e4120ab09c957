"""The `rstar2` command restarts itself once with tcmalloc preloaded, where the machine has it,
unless the user opted out or already preloads one (rstar2.launch)."""

import ctypes.util
import os
import subprocess
import sys

import pytest

from rstar2.launch import LIBRARY, preload_env


def found(name):
    return f"lib{name}.so.4"


def test_tcmalloc_is_added_to_ld_preload_where_the_linker_knows_it():
    env = preload_env({"PATH": "/bin"}, "linux", found)
    assert env == {"PATH": "/bin", "LD_PRELOAD": f"lib{LIBRARY}.so.4"}
    # a user's own preloads stay, after it
    assert preload_env({"LD_PRELOAD": "libmine.so"}, "linux", found)["LD_PRELOAD"] == f"lib{LIBRARY}.so.4 libmine.so"


@pytest.mark.parametrize("environ, platform, find", [
    ({"RSTAR2_ALLOCATOR": "system"}, "linux", found),               # the opt-out
    ({"RSTAR2_ALLOCATOR": "SYSTEM"}, "linux", found),
    ({"LD_PRELOAD": "/usr/lib/libtcmalloc.so.4"}, "linux", found),  # the restarted process, or the user's
    ({}, "linux", lambda name: None),                               # not installed
    ({}, "darwin", found),                                          # LD_PRELOAD is Linux's
])
def test_the_command_runs_as_it_is(environ, platform, find):
    assert preload_env(environ, platform, find) is None


@pytest.mark.skipif(ctypes.util.find_library(LIBRARY) is None, reason="tcmalloc is not installed here "
                    "(scripts/setup.sh installs libtcmalloc-minimal4 where it may)")
def test_the_restarted_process_has_tcmalloc_mapped(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, sys\n"
        "from rstar2 import launch\n"
        "if 'tcmalloc' in os.environ.get('LD_PRELOAD', ''):\n"
        "    maps = open('/proc/self/maps').read()\n"
        "    print('tcmalloc mapped' if 'libtcmalloc' in maps else 'not mapped', sys.argv[1:])\n"
        "    sys.exit(0)\n"
        "launch.main()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "RSTAR2_ALLOCATOR")}
    out = subprocess.run([sys.executable, str(probe), "--x", "y"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "tcmalloc mapped ['--x', 'y']", out.stderr[-2000:]
