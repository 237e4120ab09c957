"""Shared fixtures: real services and real data, started once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rstar2.sandbox import local_sandbox

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "tests" / "samples"
# Tests never reach the Hugging Face hub: a hub id resolves from a cache the test lays out.
os.environ["HF_HUB_OFFLINE"] = "1"
# A fixed thread count (every core, the default): the engines' thread governor would otherwise
# change it with the machine's load, and with it the last bits of their numbers between runs
# (tests/models/test_cpu_share.py tests the governor itself).
os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip cleanly on a machine without a CUDA GPU, and those marked
    ``vllm_contract`` where the vLLM package is not installed (scripts/setup.sh installs it)."""
    import importlib.util

    import torch

    skips = {"gpu": None if torch.cuda.is_available() else "needs a CUDA GPU",
             "vllm_contract": None if importlib.util.find_spec("vllm") else
             "needs the vLLM package: bash scripts/setup.sh installs the pinned wheel"}
    for marker, reason in skips.items():
        if reason is None:
            continue
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def samples() -> Path:
    """Excerpts of real model outputs and labelled answer cases that ship with the tests
    (tests/samples/README.md says what and whence), so the suite needs nothing beside the clone."""
    return SAMPLES


@pytest.fixture(scope="session")
def sandbox_url() -> str:
    """A real, isolated sandbox service with two warm workers, shared by the session.

    It is started with a canary variable in its environment that calls must not see.
    """
    os.environ.setdefault("RSTAR2_TEST_SECRET", "canary-7f3a")
    with local_sandbox(workers=2, timeout_s=4.0) as url:
        yield url


@pytest.fixture(scope="session")
def hf_engine():
    """The embedded default model (SmolLM2-135M-Instruct) in an HFEngine, float32 so that
    greedy tokens and log-probs compare exactly with plain transformers; shared by the session.
    Its ``.model`` and ``.tokenizer`` are the real model and tokenizer."""
    from rstar2.engines.hf import HFEngine, HFEngineConfig

    engine = HFEngine(HFEngineConfig(dtype="float32", min_shared_prefix=16))
    yield engine
    engine.shutdown()


@pytest.fixture(scope="session")
def tokenizer(hf_engine):
    """The default model's tokenizer."""
    return hf_engine.tokenizer


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """A tiny random model directory of every supported family (``tests.families``), by family
    name (llama, qwen2, qwen3); built once per session, in seconds."""
    from tests.families import FAMILIES, build_model

    root = tmp_path_factory.mktemp("tiny-models")
    return {family: build_model(family, root / f"tiny-{family}") for family in FAMILIES}
