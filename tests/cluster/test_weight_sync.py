"""Weight sync from the FSDP2 learner (2 gloo ranks) to a fleet of 2 Ray actor members, on a
tiny random Qwen3 (the bucketed broadcast does not depend on the model's size): after a broadcast every member's weights equal the learner's bitwise (by
checksum); after an update without a sync they differ, and the members' sampled log-probs move
away from the learner's, until the next sync brings them back to ~0."""

import asyncio

import pytest
import torch

pytest.importorskip("ray", reason="the distributed learner needs the [ray] extra (scripts/setup.sh)")

from rstar2.cluster.weight_strategies import GlooBroadcast, GroupSync
from rstar2.engines.base import SamplingParams
from rstar2.fleet.rollout_engine import MemberSpec, open_fleet
from rstar2.fleet.members import MemberDown
from rstar2.models.loading import load_model, load_tokenizer
from rstar2.rl.update import UpdateSettings, recompute_logprobs
from rstar2.weights.wire import buckets, checksum, manifest_of
from tests.cluster.test_fsdp_learner import batch, config, distributed, of_family  # noqa: F401
from tests.polling import wait_until


def test_buckets_split_by_size_and_dtype():
    state = {"a": torch.zeros(10), "b": torch.zeros(10), "c": torch.zeros(3, dtype=torch.bfloat16),
             "d": torch.zeros(30), "e": torch.zeros(2)}
    groups = buckets(manifest_of(state), bucket_bytes=80)
    names = [[list(state)[i] for i in group] for group in groups]
    assert sorted(n for group in names for n in group) == sorted(state)
    assert ["a", "b"] in names and ["d"] in names and ["c"] in names  # d alone: over a bucket
    assert all(len({state[n].dtype for n in group}) == 1 for group in names)


def member_checksums(fleet):
    async def read():
        return [await member.weights_checksum() for member in fleet.members]
    return asyncio.run(read())


def logprob_gap(fleet, learner, tokenizer, config):
    """Mean |engine log-prob - learner log-prob| over greedy tokens of one prompt."""
    prompt = tokenizer.encode("Compute 12 * 7 and explain.")
    params = SamplingParams(temperature=1.0, max_tokens=12)
    (completion,) = asyncio.run(fleet.members[0].generate([prompt], params))
    model = load_model(config.model.path, dtype="float32")
    model.load_state_dict(learner.full_state_dict())
    from rstar2.training.batch import TrainSequence

    sequence = TrainSequence(prompt, completion.token_ids, [1] * len(completion.token_ids),
                             completion.logprobs, 0.0)
    settings = UpdateSettings(loss=config.rl.loss, temperature=1.0, micro_batch_tokens=4096,
                              max_grad_norm=1.0)
    mine = torch.tensor(recompute_logprobs(model, [sequence], settings)[0])
    return (mine - torch.tensor(completion.logprobs)).abs().mean().item()


def broadcasting(config, tiny_models, **optimizer):
    """``config`` on the tiny Qwen3 with the broadcast sync (and ``optimizer`` settings), its
    tokenizer, a fleet of 2 Ray actor members and a learner over it."""
    config = of_family(config, "qwen3", tiny_models)
    tokenizer = load_tokenizer(config.model.path)
    optimizer = config.rl.optimizer.model_copy(update=optimizer)
    config = config.model_copy(update={
        "rl": config.rl.model_copy(update={"optimizer": optimizer}),
        "cluster": config.cluster.model_copy(update={"weight_sync": "broadcast"})})
    fleet = open_fleet([MemberSpec(ray=True, max_batch_size=2)] * 2, "static", model=config.model.path,
                       dtype="float32", seed=0, tokenizer=tokenizer,
                       on_replaced=lambda member: learner.catch_up(member))
    learner = distributed(config, fleet, tokenizer)
    return config, tokenizer, fleet, learner


def test_broadcast_sync_makes_members_equal_the_learner(config, tiny_models, local_ray):  # noqa: F811
    config, tokenizer, fleet, learner = broadcasting(config, tiny_models, lr=1e-3)
    try:
        asyncio.run(learner.push_weights())
        assert isinstance(learner.sync, GroupSync) and isinstance(learner.sync.transport, GlooBroadcast)
        expected = checksum(learner.full_state_dict())
        assert member_checksums(fleet) == [expected, expected]
        synced_gap = logprob_gap(fleet, learner, tokenizer, config)
        learner.learn(batch(tokenizer))  # no sync: the members keep the old weights
        moved = checksum(learner.full_state_dict())
        assert moved != expected and member_checksums(fleet) == [expected, expected]
        stale_gap = logprob_gap(fleet, learner, tokenizer, config)
        asyncio.run(learner.push_weights())
        assert member_checksums(fleet) == [moved, moved]
        again_gap = logprob_gap(fleet, learner, tokenizer, config)
    finally:
        learner.close()
        asyncio.run(fleet.close())
    assert synced_gap < 1e-4 and again_gap < 1e-4
    assert stale_gap > 100 * max(synced_gap, again_gap, 1e-6)


def answers(member) -> bool:
    """Whether ``member``'s actor still answers a call."""
    try:
        asyncio.run(member.load())
        return True
    except MemberDown:
        return False


async def push_and_settle(learner, fleet):
    """One sync, then wait for the replacements the fleet started during it."""
    await learner.push_weights()
    while fleet.restarts:
        await asyncio.gather(*fleet.restarts)


def test_a_replaced_member_rejoins_the_broadcast(config, tiny_models, local_ray):  # noqa: F811
    """A member actor killed between steps: the next sync finds it dead, the fleet replaces it,
    the replacement is caught up over the broadcast (the fleet's ``on_replaced``: the fleet
    keeps no weights to fall back on in this mode), and the sync after that reaches it in the
    whole group again."""
    _, tokenizer, fleet, learner = broadcasting(config, tiny_models)
    try:
        asyncio.run(learner.push_weights())
        learner.learn(batch(tokenizer))
        killed = fleet.members[0].actor
        local_ray.kill(killed)  # asynchronous: "between steps" means dead before the next sync
        wait_until(lambda: not answers(fleet.members[0]), what="the killed actor gone")
        asyncio.run(push_and_settle(learner, fleet))
        assert fleet.replaced == 1 and fleet.members[0].actor != killed
        assert fleet.last_weights is None  # nothing went through the fleet's own fallback
        expected = checksum(learner.full_state_dict())
        assert member_checksums(fleet) == [expected, expected]
        learner.learn(batch(tokenizer))
        asyncio.run(learner.push_weights())
        assert learner.sync.transport.group == fleet.members
        moved = checksum(learner.full_state_dict())
        assert moved != expected and member_checksums(fleet) == [moved, moved]
    finally:
        learner.close()
        asyncio.run(fleet.close())
