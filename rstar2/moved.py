"""Modules that moved keep their old import paths for one release, with a ``DeprecationWarning``.

Code written against an older rstar2 (``from rstar2.engines.loading import load_model``, a
plugin naming ``rstar2.engines.fleet.policies``) keeps working: the old name imports the module
at its new place (the same module object, so patching either name patches both) and warns
once with the new name to use. A module that was split in two answers from both halves; a
module that stayed but lost some names answers for them through ``moved_names``.

``MOVED`` is the whole list; ``rstar2/__init__.py`` installs the finder ahead of the usual ones
so that an old package path never loads a second copy of a module from the new folder.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings

MOVED: dict[str, tuple[str, ...]] = {
    "rstar2.engines.fleet": ("rstar2.fleet",),
    "rstar2.engines.fleet.policies": ("rstar2.fleet.scheduler", "rstar2.fleet.policies",
                                      "rstar2.fleet.books"),
    "rstar2.engines.factory": ("rstar2.engines.registry", "rstar2.fleet.rollout_engine"),
    "rstar2.engines.loading": ("rstar2.models.loading",),
    "rstar2.engines.hub": ("rstar2.models.hub",),
    "rstar2.engines.device": ("rstar2.models.device",),
    "rstar2.engines.dtype_choice": ("rstar2.models.dtype_choice",),
    "rstar2.engines.weights": ("rstar2.weights.wire",),
    "rstar2.engines.disk_weights": ("rstar2.weights.disk",),
    "rstar2.engines.weight_sync": ("rstar2.cluster.weight_strategies",),
    "rstar2.engines.vllm_transfer": ("rstar2.fleet.vllm_transfer",),
    "rstar2.engines.server": ("rstar2.serve.server",),
    "rstar2.engines.admission": ("rstar2.serve.admission",),
    "rstar2.rl.batch": ("rstar2.training.batch",),
    "rstar2.rl.checkpoint": ("rstar2.training.checkpoint",),
    "rstar2.rl.optim": ("rstar2.training.optim",),
    "rstar2.rl.packing": ("rstar2.training.packing",),
    "rstar2.rl.policy": ("rstar2.training.policy",),
    "rstar2.rl.runlog": ("rstar2.training.runlog",),
    "rstar2.sft.tasks": ("rstar2.tasks.templates",),
    "rstar2.sft.traces": ("rstar2.tasks.traces",),
    "rstar2.sft.gsm8k": ("rstar2.tasks.gsm8k", "rstar2.sft.dataset"),
    "rstar2.sft.gsm8k_variants": ("rstar2.tasks.gsm8k_variants",),
}
"""Old module name -> where it lives now. A package's entry covers its submodules."""


def new_names(name: str) -> tuple[str, ...]:
    """Where the module once called ``name`` lives now; () if it did not move."""
    if name in MOVED:
        return MOVED[name]
    for old, new in MOVED.items():
        if name.startswith(old + ".") and len(new) == 1:
            return (new[0] + name[len(old):],)
    return ()


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old module name with the module at its new place."""

    def __init__(self):
        self.specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, name, path=None, target=None):
        if not new_names(name):
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        targets = new_names(spec.name)
        warnings.warn(f"{spec.name} has moved to {' and '.join(targets)}; the old name will be "
                      "removed in the next release", DeprecationWarning, stacklevel=2)
        modules = [importlib.import_module(target) for target in targets]
        if len(modules) > 1:
            return joined(spec.name, modules)
        self.specs[spec.name] = modules[0].__spec__
        return modules[0]

    def exec_module(self, module):
        """Nothing to run: the module ran at its new place. The import system has stamped
        the old name's spec on it; its own goes back, so it still knows where it lives."""
        original = self.specs.pop(module.__spec__.name, None)
        if original is not None:
            module.__spec__ = original


def joined(name: str, modules: list[types.ModuleType]) -> types.ModuleType:
    """A module named ``name`` whose attributes come from ``modules``, the first that has it."""
    module = types.ModuleType(name)

    def lookup(attribute: str):
        for source in modules:
            if hasattr(source, attribute):
                return getattr(source, attribute)
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}")

    module.__getattr__ = lookup
    return module


def moved_names(module: str, names: dict[str, str]):
    """A ``__getattr__`` for ``module``, whose ``names`` left it for other modules (name -> new
    module): each still answers from its new place, with the warning, for one release."""

    def lookup(name: str):
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} has moved to {names[name]}.{name}; the old name will be "
                      "removed in the next release", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(names[name]), name)

    return lookup


def install() -> None:
    """Put the finder first in ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
