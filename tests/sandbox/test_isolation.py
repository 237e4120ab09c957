"""What a call can reach: no network, no host processes, no files or environment of others."""

import os
import socket
import threading

import httpx

from tests.sandbox.helpers import run
from tests.sandbox.procs import service_pid


def test_no_network_even_to_host_loopback(sandbox_url):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    code = f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('connected')\nexcept OSError as e:\n    print('refused', e)"
    r = run(sandbox_url, code)
    listener.close()
    assert r.stdout.startswith("refused") and not accepted
    r = run(sandbox_url, "import socket\ntry:\n    socket.getaddrinfo('pypi.org', 443)\nexcept OSError as e:\n    print('no dns')")
    assert r.stdout == "no dns\n"


def test_writes_outside_the_private_tmp_fail(sandbox_url):
    code = (
        "import os\n"
        "for path in ['/usr/evil', '/etc/evil', '/opt/rstar2/worker/__main__.py', '/evil', '/dev/shm/evil', '/tmp/evil']:\n"
        "    try:\n"
        "        open(path, 'w').write('x'); print('wrote', path)\n"
        "    except OSError as e:\n"
        "        print('denied', path)\n"
        "open('mine.txt', 'w').write('ok'); print(os.getcwd().startswith('/tmp/'), open('mine.txt').read())"
    )
    lines = run(sandbox_url, code).stdout.splitlines()
    assert all(line.startswith("denied") for line in lines[:-1]), lines
    assert lines[-1] == "True ok"


def test_host_files_are_invisible(sandbox_url):
    here = os.path.abspath(__file__)
    code = f"import os\nprint(os.path.exists({here!r}), os.path.exists('/root/.bash_history'), os.path.exists('/home'), sorted(os.listdir('/')))"
    r = run(sandbox_url, code)
    assert r.stdout.startswith("False False False")


def test_host_processes_are_invisible_and_unsignalable(sandbox_url):
    pid = service_pid(sandbox_url)
    code = (
        "import os, signal\n"
        "procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        f"try:\n    os.kill({pid}, signal.SIGKILL); print('signalled')\nexcept OSError:\n    print('no such process')\n"
        f"print(os.path.exists('/proc/{pid}/environ'), len(procs) <= 2)\n"
        "try:\n    os.kill(1, signal.SIGKILL)\nexcept OSError:\n    print('worker protected')"
    )
    r = run(sandbox_url, code)
    assert r.stdout.splitlines() == ["no such process", "False True", "worker protected"]
    assert os.path.exists(f"/proc/{pid}")
    assert httpx.get(f"{sandbox_url}/health").json()["workers_alive"] == 2


def test_service_environment_is_invisible(sandbox_url):
    assert os.environ["RSTAR2_TEST_SECRET"]  # the service was started with it (conftest)
    r = run(sandbox_url, "import os\nprint(sorted(os.environ))")
    assert "RSTAR2_TEST_SECRET" not in r.stdout and "HOME" in r.stdout


def test_calls_cannot_see_each_other(sandbox_url):
    writer = "import time\nopen('secret.txt', 'w').write('s3cret')\ntime.sleep(1.5)\nprint('wrote')"
    reader = (
        "import os, glob, time\ntime.sleep(0.3)\n"
        "print(glob.glob('/tmp/**/secret.txt', recursive=True), [p for p in os.listdir('/proc') if p.isdigit()])"
    )
    requests = [{"code": writer}, {"code": reader}]
    results = httpx.post(f"{sandbox_url}/run_batch", json={"requests": requests}, timeout=30).json()["results"]
    assert results[0]["stdout"] == "wrote\n"
    found, pids = results[1]["stdout"].split("] [")
    assert found == "["  # no secret.txt anywhere it can look
    assert len(pids.strip("]\n").split(",")) <= 2  # only itself (and the worker it cannot touch)


def test_limits_cannot_be_raised(sandbox_url):
    code = (
        "import resource\n"
        "for name in ['RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_NPROC', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE']:\n"
        "    which = getattr(resource, name)\n"
        "    soft, hard = resource.getrlimit(which)\n"
        "    try:\n"
        "        resource.setrlimit(which, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)); print('raised', name)\n"
        "    except (ValueError, OSError):\n"
        "        print('kept', name)"
    )
    assert run(sandbox_url, code).stdout.split() == ["kept", "RLIMIT_CPU", "kept", "RLIMIT_AS", "kept",
                                                     "RLIMIT_NPROC", "kept", "RLIMIT_FSIZE", "kept", "RLIMIT_NOFILE"]
