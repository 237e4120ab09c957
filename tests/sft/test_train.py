"""The SFT loop's packing: traces laid end to end with no padding give exactly the loss and the
gradients of the traces one by one (on the real small model), every trace lands in one row once,
and the settings that change what is trained (frozen embeddings, 'auto' dtype) do what they say."""

import pytest
import torch

from rstar2.agent.prompt import ChatFormat, PromptConfig
from rstar2.models.loading import load_model, load_tokenizer
from rstar2.sft.config import SFTSettings
from rstar2.sft.train import resolve_sft_dtype, sft_optimizer, sft_step
from rstar2.training.batch import TrainSequence
from rstar2.training.packing import IGNORE, pack_rows, packed_attention, packed_nll
from tests.rl.test_update import alone_logprobs

TEXTS = [
    ("Natalia sold clips to 48 of her friends in April,", " and then she sold half as many clips in May."),
    ("What is 12 times 7?", " clips = 12 * 7\nprint(clips)\n84\nThe program printed 84."),
    ("Hi", " there"),
    ("Weng earns $12 an hour for babysitting.", " Yesterday, she just did 50 minutes of babysitting."),
    ("A robe takes 2 bolts of blue fiber", " and half that much white fiber. How many bolts in total?"),
]


@pytest.fixture(scope="module")
def model():
    return load_model("default", "float32")


@pytest.fixture(scope="module")
def sequences():
    """Agent-style sequences: the short prompt's chat template around each question (a shared
    opening of about a hundred tokens), then a response with a tool response inside."""
    tokenizer = load_tokenizer("default")
    chat = ChatFormat(tokenizer, PromptConfig(variant="short"))
    made = []
    for question, response in TEXTS:
        response_ids = tokenizer.encode(response, add_special_tokens=False)
        mask = [0 if 3 <= i < 6 else 1 for i in range(len(response_ids))]
        made.append(TrainSequence(chat.prompt_ids(question), response_ids, mask, [0.0] * len(response_ids)))
    return made


def unpacked_nll(model, sequences) -> torch.Tensor:
    """The summed NLL of the trained tokens, one sequence at a time in a forward pass of its own."""
    total = torch.zeros(())
    for sequence in sequences:
        total = total - (alone_logprobs(model, sequence, 1.0) * torch.tensor(sequence.loss_mask)).sum()
    return total


def gradients(model, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    named = {name: p.grad.clone() for name, p in model.named_parameters() if "layers.0." in name or "norm" in name}
    model.zero_grad(set_to_none=True)
    return named


@pytest.fixture(scope="module")
def one_by_one(model, sequences):
    """The summed NLL of the traces one by one and its gradients, which every packing must give;
    computed once (the packing tests leave the weights as they are)."""
    nll = unpacked_nll(model, sequences)
    return nll.detach(), gradients(model, nll)


@pytest.mark.parametrize("batched", [False, True], ids=["call-per-sequence", "one-padded-batch"])
@pytest.mark.parametrize("row_tokens, share_prefix, rows", [(10_000, True, 1), (200, True, 2), (300, False, 3)])
def test_a_packed_batch_has_the_loss_and_gradients_of_its_sequences_one_by_one(model, sequences, one_by_one,
                                                                             row_tokens, share_prefix, rows,
                                                                             batched):
    """Both attention layouts (a call per sequence, the CPU's; one padded batch, a GPU's)."""
    reference, reference_grads = one_by_one
    packed_rows = pack_rows(sequences, row_tokens, share_prefix)
    assert len(packed_rows) == rows and all((row.prefix > 90) == share_prefix for row in packed_rows)
    attention = model.config._attn_implementation
    with packed_attention(model):
        packed = sum(packed_nll(model, row, batched) for row in packed_rows)
    assert model.config._attn_implementation == attention
    torch.testing.assert_close(packed.detach(), reference, rtol=1e-5, atol=1e-4)
    with torch.no_grad():  # the model attends as before the block
        torch.testing.assert_close(unpacked_nll(model, sequences), reference, rtol=1e-5, atol=1e-4)
    packed_grads = gradients(model, packed)
    for name, grad in reference_grads.items():  # equal up to float32 summation order
        assert (packed_grads[name] - grad).norm() <= 1e-4 * grad.norm(), name


def test_packing_keeps_every_token_once_and_the_shared_opening_once_a_row(sequences):
    rows = pack_rows(sequences, row_tokens=200)
    prefix = rows[0].prefix
    assert prefix == 100 and len(rows) == 2  # the system prompt and the template up to the question
    assert sum(map(len, rows)) == sum(map(len, sequences)) - (len(sequences) - len(rows)) * prefix
    assert all(len(row) <= 200 for row in rows)
    whole = {tuple(s.prompt_ids + s.response_ids) for s in sequences}
    for row in rows:
        pieces = [row.input_ids[:prefix] + row.input_ids[a:b] for a, b in row.segments]
        assert [len(piece) - prefix for piece in pieces] == row.lengths
        assert all(tuple(piece) in whole for piece in pieces)
        assert row.position_ids == [*range(prefix), *(p for a, b in row.segments for p in range(prefix, prefix + b - a))]
    trained = [t for row in rows for t in row.targets if t != IGNORE]
    assert len(trained) == sum(s.loss_tokens for s in sequences)
    alone = pack_rows(sequences[:1], row_tokens=3)  # longer than a row: a row of its own
    assert len(alone) == 1 and len(alone[0]) == len(sequences[0])


def test_frozen_embeddings_stay_and_the_rest_learns(model, sequences):
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    settings = SFTSettings(compute_dtype="float32", freeze_embeddings=True, lr=1e-3, warmup_steps=0)
    optimizer, _ = sft_optimizer(model, settings)
    attention = model.config._attn_implementation
    sft_step(model, optimizer, list(sequences), settings)
    assert model.config._attn_implementation == attention  # packed for the step only
    after = dict(model.named_parameters())
    embeddings = next(name for name in before if "embed_tokens" in name)
    assert torch.equal(after[embeddings], before[embeddings])
    assert not torch.equal(after["model.layers.0.mlp.up_proj.weight"], before["model.layers.0.mlp.up_proj.weight"])
    for name, p in after.items():  # leave the module's model as it was
        p.data.copy_(before[name])
        p.requires_grad_(True)


def test_auto_dtype_is_made_concrete_before_training(model, sequences):
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        sft_step(model, torch.optim.AdamW(model.parameters()), list(sequences), SFTSettings())
    settings, note = resolve_sft_dtype(SFTSettings(), model)
    assert settings.compute_dtype in ("float32", "bfloat16") and note.startswith(f"SFT compute dtype: {settings.compute_dtype} (auto: ")
    assert resolve_sft_dtype(settings, model) == (settings, "")
