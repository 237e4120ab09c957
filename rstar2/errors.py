"""The root of every error rstar2 raises on purpose.

A user meets these: a recipe that does not validate, a model that is not there, a run folder
that exists, a reward that returns nonsense, a run that learned nothing. Each carries a message
written to be read alone, so the ``rstar2`` command prints any of them as one ``error:`` line
and exits with its ``exit_code`` -- without a list of classes to keep in step -- and a program
calling the library can catch them all as ``Rstar2Error``. Each also keeps the built-in base it
had (``ValueError`` for bad input, ``RuntimeError`` for a failure while running), so existing
``except ValueError`` handlers still see them.
"""

from __future__ import annotations


class Rstar2Error(Exception):
    """An error rstar2 explains in its message."""

    exit_code = 2
    """The command's exit status for it: 2, input refused (the default); 1, a run that started
    and failed."""
