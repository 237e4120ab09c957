"""Fused C++ kernels for the CPU decode step, built on this machine the first time they are
needed.

    from rstar2.engines.cpu_kernels import decode_kernels
    kernels = decode_kernels()       # .attend, .rms_norm, .silu_mul, .sample (decode.cpp),
                                     # or KernelsUnavailable with the reason

Why they exist: a decode step of a small model on a CPU is mostly not its matmuls. PyTorch's
CPU attention kernels (SDPA, the flash kernel, batched matmuls) read a decode step's cached
keys and values several times slower than memory delivers them -- a handful of queries per KV
head is too small a matrix for them -- and a transformers layer is some forty small operators,
each paying the framework's dispatch. ``decode.cpp`` does one layer's attention as one pass
per (sequence, KV head) that reads each cached key and value once (online softmax over the
shared prefix block and the sequence's own slot, the new token's rotary embedding and cache
write folded in; a sequence may bring several new tokens, a prefill), fuses the RMSNorm and
the gated activation, and draws each row's next token without float32 copies of the logits;
the engine's decode step (``rstar2.engines.hf.stack``) is then nine calls per layer. docs/benchmarks.md has the step
against its floor.

How they are built: ``torch.utils.cpp_extension`` (ninja and the system's C++ compiler), for
the instruction set PyTorch itself uses here -- AVX-512 where its CPU capability is AVX512,
else AVX2 (so ``ATEN_CPU_CAPABILITY=avx2`` selects the AVX2 build as it does PyTorch's own
kernels) -- into ``$RSTAR2_CACHE/kernels/<hash>``, the hash covering the source, PyTorch's
version and the instruction set; processes that need them at once wait for one build.
Elsewhere (another architecture, no compiler) ``decode_kernels`` raises ``KernelsUnavailable``
and the engine decodes with the model's own forward pass.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

from rstar2.errors import Rstar2Error

SOURCE = Path(__file__).with_name("decode.cpp")
FLAGS = {  # PyTorch's CPU capability -> the compiler's target flags
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c"],
}


# OpenMP: at::parallel_for is OpenMP pragmas in PyTorch's headers; the library linked is the one
# PyTorch has already loaded (the same soname), so there is one pool of threads
CFLAGS = ["-O3", "-fopenmp"]


class KernelsUnavailable(Rstar2Error, RuntimeError):
    """The kernels cannot be built or loaded here; the message says why."""


def instruction_set() -> str:
    """The instruction set a build targets: PyTorch's own CPU capability, where the kernels
    have one."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in FLAGS:
        raise KernelsUnavailable(f"the CPU decode kernels need AVX2 or AVX-512; PyTorch runs "
                                 f"with {capability!r} here")
    return capability


def build_dir(isa: str) -> Path:
    """Where this source, PyTorch version and instruction set are built."""
    import torch

    from rstar2.models.loading import cache_root

    key = hashlib.sha256(SOURCE.read_bytes() + f"{torch.__version__}|{isa}|{CFLAGS}|{FLAGS[isa]}"
                         .encode()).hexdigest()
    return cache_root() / "kernels" / f"decode-{isa.lower()}-{key[:16]}"


def decode_kernels() -> ModuleType:
    """The built kernels (built first if this machine has not built them yet); raises
    ``KernelsUnavailable`` (each time, without trying again) where they cannot be."""
    kernels = built()
    if isinstance(kernels, KernelsUnavailable):
        raise kernels
    return kernels


@functools.cache
def built() -> ModuleType | KernelsUnavailable:
    try:
        return build()
    except KernelsUnavailable as error:
        return error


def build() -> ModuleType:
    isa = instruction_set()
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        raise KernelsUnavailable("no C++ compiler to build the CPU decode kernels with "
                                 "(install g++, or set CXX)")
    from torch.utils import cpp_extension

    directory = build_dir(isa)
    directory.mkdir(parents=True, exist_ok=True)
    fresh = not any(directory.glob("*.so"))
    if fresh:
        print("rstar2: building the CPU decode kernels for this machine (once)",
              file=sys.stderr, flush=True)
    try:
        return cpp_extension.load(name=f"rstar2_decode_{isa.lower()}", sources=[str(SOURCE)],
                                  build_directory=str(directory),
                                  extra_cflags=[*CFLAGS, *FLAGS[isa]],
                                  extra_ldflags=["-fopenmp"], verbose=False)
    except (RuntimeError, OSError, ImportError) as error:  # compiler or ninja failed
        raise KernelsUnavailable(f"the CPU decode kernels did not build: {error}") from error
