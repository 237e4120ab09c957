"""Which torch device a model runs on: one setting, the same meaning in every command.

    device = resolve_device("auto")        # cuda when a GPU is visible, else cpu
    tensors_on = module_device(model)      # where a batch for ``model`` must be built

A device setting is ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (``DeviceSetting``: config fields
of that type refuse anything else in those words, without importing torch). ``auto`` is the default everywhere (``model.device``
in a run config, ``--device`` on the commands, ``HFEngineConfig.device``), so a machine with a
GPU uses it without being told, and ``device_note`` says which one was picked and why, for the
commands to print. Asking for CUDA where there is none is an error, never a silent CPU run.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
DEVICE_CHOICES = "'auto' (cuda when a GPU is available, else cpu), 'cpu', 'cuda' or 'cuda:N'"
DEVICE_HELP = DEVICE_CHOICES + "."


def check_device(setting: str) -> str:
    """``setting`` if it names a device, else a ValueError listing the settings in words."""
    if not DEVICE_PATTERN.match(setting):
        raise ValueError(f"device must be {DEVICE_CHOICES}")
    return setting


DeviceSetting = Annotated[str, AfterValidator(check_device)]
"""A config field holding a device setting."""


def resolve_device(setting: str = "auto"):
    """The ``torch.device`` a setting names; ``auto`` picks cuda when available."""
    import torch

    if not DEVICE_PATTERN.match(setting):
        raise ValueError(f"device must be {DEVICE_CHOICES} (got {setting!r})")
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(setting)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {setting!r} was asked for but torch sees no CUDA GPU "
                             f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}); "
                             "use --device cpu or install a CUDA build of torch")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device {setting!r}: only {torch.cuda.device_count()} GPU(s) visible")
    return device


def device_note(setting: str) -> str:
    """One line saying which device ``setting`` resolves to (and why, for ``auto``); on a CPU
    also how many threads and why, and a hint where other work already keeps cores busy (a
    thread per core beside a busy neighbour waits on the neighbour's time slices at every
    parallel step; the engine's governor sheds threads while it generates, training does not)."""
    import torch

    from rstar2.models.loading import busy_cores, cpu_threads

    device = resolve_device(setting)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        where = f"cuda ({name})"
    else:
        where = "cpu"
    note = f"device: {where}"
    if setting == "auto":
        reason = "a CUDA GPU is available" if device.type == "cuda" else "no CUDA GPU available"
        note += f" (auto: {reason})"
    if device.type != "cpu":
        return note
    threads, why = cpu_threads()
    note += f", {threads} thread{'s' * (threads != 1)} ({why})"
    busy = busy_cores()
    if why != "OMP_NUM_THREADS" and threads > 1 and busy >= 0.75:
        note += (f"; other work keeps about {busy:.1f} cores busy: generation gives up a thread per "
                 f"core it keeps busy, and --threads {max(1, threads - round(busy))} does so for training too")
    return note


def module_device(module):
    """The device of ``module``'s parameters: where its inputs must live."""
    return next(module.parameters()).device


def host_to_device(values, dtype, device):
    """``values`` (host numbers) as a tensor on ``device`` without waiting for the device: on a
    GPU through pinned memory and an asynchronous copy, queued behind the work already there."""
    import torch

    tensor = torch.tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)
