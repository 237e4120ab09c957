"""A warm sandbox worker: one process that runs calls one at a time, each in a fresh fork.

This package is a program of its own, started as ``python -m worker`` from the directory
that holds it (inside bubblewrap it is mounted at ``/opt/rstar2/worker``, see
``isolation.py``). It imports only the standard library and its own modules (relatively), so
that only this folder and the Python installation need to be visible in the sandbox; the
service imports just ``limits`` and ``procs`` from it. The worker imports the heavy modules
model code uses once at start-up; each call then forks a child that inherits them, so no call
pays interpreter start-up or ``import sympy``.

Where each part lives: ``limits`` (a call's limits, declared once), ``state`` (what every call
needs, fixed at start-up), ``child`` (the forked side of a call), ``calls`` (handing a call to
its child and cleaning up after it), ``supervise`` (watching the child's pipes and exit),
``procs`` (the process table, killing), ``heap`` (huge pages for cheap forks), ``__main__``
(start-up and the protocol with the service).

Contract of one call, as enforced here:

* fresh process per call, started in a fresh empty directory under the private ``/tmp``
  that is deleted afterwards; no state survives from one call to the next. The process is
  forked ahead, once the previous call is cleaned up and when no request is already
  waiting, and waits for its request: the fork is then off the call's latency path
  (``fork_standby``);
* rlimits set before the snippet runs and not raisable by it (hard = soft; the child also
  drops to an unprivileged uid when the worker runs as root): CPU seconds, address space,
  processes, file size, open files, no core dumps;
* stdin comes from a file, stdout and stderr go to pipes that the worker drains, keeping the
  first ``output_cap`` bytes of each and a marker that says how much was dropped;
* a request whose code or stdin cannot be encoded (a lone surrogate) is answered ``error``
  without running anything;
* the run's own outcome (exit status, last-expression repr) travels on a third pipe, so no
  text the program prints can be mistaken for it;
* at the deadline, and after every call whatever its end, every process of the call dies:
  as PID 1 of its own PID namespace the worker kills all other processes in it (``kill(-1)``),
  which catches ``setsid`` and double-forked children; without a namespace (unsafe mode) it is
  a child subreaper and kills every descendant it finds.

Protocol with the service on stdin/stdout: 4-byte big-endian length + JSON, both ways. The
worker first sends ``{"ready": true}``; then for each request ``{"code", "stdin", "timeout_s"}``
it answers one result ``{"status", "stdout", "stderr", "result", "duration_s"}``.
"""
