"""The child side of a call: in a process forked from the warm worker, wait for the request,
wire the std streams, drop privileges, set the limits and run the snippet as ``__main__``.

Everything here runs after the fork, so it builds as little as it can: the environment and
the std streams were made once by the worker (``WorkerState``), and every page the child
writes is a copy.
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import resource
import signal
import sys
import traceback

from .state import WorkerState

CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
}
SNIPPET_FILENAME = "<code>"
EXIT_ERROR = 1
STDIN_FILE = ".stdin"  # in the private tmp, outside the call's directory


def split_last_expression(code: str) -> tuple[ast.Module, ast.Expression | None]:
    """Split source into the statements to exec and a final expression to show, as IPython."""
    tree = ast.parse(code, SNIPPET_FILENAME, "exec")
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body.pop()
        return tree, ast.Expression(last.value)
    return tree, None


def print_snippet_traceback(exc: BaseException) -> None:
    """Print the traceback as Python would, without the worker's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))


def run_snippet(code: str, result_fd: int, result_cap: int) -> int:
    """Run the code as __main__ and return the process exit code.

    The last act is the record on ``result_fd`` (last repr and exit code, one JSON line),
    written after stdout and stderr are flushed and closed: once the worker has it, the call's
    output is complete and it need not wait for the process to finish exiting. The repr is cut
    here to one character over ``result_cap`` (the worker cuts it to the cap and marks it): a
    repr of hundreds of MB would otherwise be encoded again into the record, past the call's
    memory limit, after stderr is closed -- a result lost without a word.
    """
    import linecache

    linecache.cache[SNIPPET_FILENAME] = (len(code), None, code.splitlines(True), SNIPPET_FILENAME)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    exit_code = 0
    shown = None
    try:
        body, last = split_last_expression(code)
        exec(compile(body, SNIPPET_FILENAME, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, SNIPPET_FILENAME, "eval"), namespace)
            shown = None if value is None else repr(value)[: result_cap + 1]
    except SystemExit as exit_request:
        code_ = exit_request.code
        if isinstance(code_, int) or code_ is None:
            exit_code = code_ or 0
        else:
            sys.stderr.write(f"{code_}\n")
            exit_code = EXIT_ERROR
    except BaseException as exc:  # noqa: BLE001 -- everything the snippet raises is its outcome
        print_snippet_traceback(exc)
        exit_code = EXIT_ERROR
    try:
        atexit._run_exitfuncs()
    except BaseException as exc:  # noqa: BLE001
        print_snippet_traceback(exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 -- a closed stream must not hide the outcome
            pass
    for fd in (0, 1, 2):
        os.close(fd)
    os.write(result_fd, json.dumps({"result": shown, "exit": exit_code}).encode() + b"\n")
    return exit_code



def set_limits(state: WorkerState, timeout_s: float) -> None:
    """Resource limits of the call; hard = soft so the snippet cannot raise them."""
    limits = state.limits
    cpu = int(timeout_s) + 1
    memory = state.warm_bytes + limits.memory_mb * 1024 * 1024  # on top of what the fork inherits
    rlimits = {
        resource.RLIMIT_CPU: cpu,
        resource.RLIMIT_AS: memory,
        resource.RLIMIT_FSIZE: limits.file_mb * 1024 * 1024,
        resource.RLIMIT_NOFILE: limits.max_files,
        resource.RLIMIT_CORE: 0,
    }
    if state.uid is not None or os.getpid() != 1:
        # Counted per uid: meaningful when the child gets its own uid. As non-root in unsafe
        # mode it is a fork-bomb backstop shared with the user's other processes.
        rlimits[resource.RLIMIT_NPROC] = limits.max_procs
    for which, value in rlimits.items():
        resource.setrlimit(which, (value, value))


def read_request(request_r: int) -> dict:
    """The standby child's request: everything the worker writes before closing the pipe.
    Nothing at all means the worker went away without a call for us: exit quietly."""
    data = bytearray()
    while chunk := os.read(request_r, 1 << 20):
        data += chunk
    if not data:
        os._exit(0)
    os.close(request_r)
    return json.loads(data)



def become_child(state: WorkerState, request_r: int, out_w: int, err_w: int, result_w: int) -> None:
    """In the forked child: wait for the request, wire fds, drop privileges, set limits, run
    the snippet, exit. Everything before the request arrives is done while the worker idles."""
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        atexit._clear()  # the worker's exit handlers are not the snippet's
        request = read_request(request_r)
        stdin_path = os.path.join(state.tmp_root, STDIN_FILE) if request.get("stdin") else os.devnull
        stdin_fd = os.open(stdin_path, os.O_RDONLY)
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        result_fd = os.dup2(result_w, 3)
        os.closerange(4, 1 << 16)
        os.chdir(state.call_dir)
        set_limits(state, request["timeout_s"])
        if state.uid is not None:
            os.setgroups([])
            os.setgid(state.uid)
            os.setuid(state.uid)
        sys.stdin, sys.stdout, sys.stderr = state.call_streams
        code = run_snippet(request["code"], result_fd, state.limits.output_cap)
    except BaseException as exc:  # noqa: BLE001 -- a failure before the snippet ran is an error too
        os.write(2, f"[rstar2 sandbox: could not start the call: {exc!r}]\n".encode())
        code = EXIT_ERROR
    os._exit(code)
