"""A fleet of real HFEngines (in this process and behind `serve-model`'s HTTP app).

Trajectories here are several turns separated by a wait (the tool call), run through
``run_trajectory`` as the agent does. ``RecordingMember`` is a real member that also notes,
for each turn, which trajectory asked and what the fleet had booked on it at that moment.
"""

import asyncio
import contextlib
import contextvars
import threading
import time

import pytest
import torch
import uvicorn

from benchmarks.fleet_bench import Slowed
from rstar2.engines.base import SamplingParams, run_trajectory
from rstar2.engines.hf import HFEngine, HFEngineConfig
from rstar2.engines.vllm_metrics import parse_vllm_metrics
from rstar2.fleet import Fleet, HTTPMember, LocalMember
from rstar2.sandbox.local import free_port
from rstar2.serve.server import create_app
from rstar2.weights.disk import WeightUpdates


@pytest.fixture(autouse=True)
def one_thread_per_engine():
    """Two engine workers share the two cores: one torch thread each, as in a real fleet
    (``engines`` sets it; this puts back what the session had)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


PARAMS = SamplingParams(temperature=1.0, max_tokens=4, stop_token_ids=())  # exactly 4 tokens
PROMPT = list(range(100, 116))
TURNS = 3
TRAJECTORY: contextvars.ContextVar[int] = contextvars.ContextVar("trajectory")
"""Which trajectory a member's ``generate`` serves, as the test's body notes it."""


class RecordingMember(LocalMember):
    def __init__(self, engine, name, fleet_box):
        super().__init__(engine, name)
        self.fleet_box = fleet_box
        self.turns: list[tuple[int, int]] = []  # (trajectory, trajectories booked here)
        self.overbooked = False

    async def generate(self, prompts, params):
        fleet = self.fleet_box[0]
        books = fleet.scheduler.members[fleet.members.index(self)]
        self.overbooked |= books.reserved_tokens > books.capacity_tokens
        self.turns.append((TRAJECTORY.get(), len(books.trajectories)))
        return await super().generate(prompts, params)


def engines(hf_engine, budget, count=2):
    made = [HFEngine(HFEngineConfig(dtype="float32", kv_budget_tokens=budget, seed=i),
                     model=hf_engine.model, tokenizer=hf_engine.tokenizer) for i in range(count)]
    torch.set_num_threads(1)  # each engine sets the pool to every core
    return made


def need_of(turns: int) -> int:
    """KV a trajectory of ``turns`` turns needs at most."""
    return len(PROMPT) + turns * (PARAMS.max_tokens + 2)


NEED = need_of(TURNS)


async def one_trajectory(fleet, attempts, turns=TURNS):
    async def body(engine):
        attempts.append(1)
        TRAJECTORY.set(engine.key)  # for the members' notes: this task runs their generate
        ids = list(PROMPT)
        for _ in range(turns):
            ids += (await engine.generate([ids], PARAMS))[0].token_ids + [13, 13]
            await asyncio.sleep(0.05)  # the tool call: the KV reservation holds meanwhile
        return ids
    return await run_trajectory(fleet, need_of(turns), body)


def run_fleet(members, policy, n, turns=TURNS):
    box = []

    async def go():
        fleet = Fleet(members(box), policy, poll_s=0.05)
        box.append(fleet)
        attempts = []
        results = await asyncio.gather(*(one_trajectory(fleet, attempts, turns) for _ in range(n)))
        loads = await fleet.loads()
        return fleet, results, attempts, loads
    return asyncio.run(go())


def test_kv_aware_never_books_beyond_capacity_and_keeps_each_trajectory_on_one_member(hf_engine):
    pair = engines(hf_engine, budget=2 * NEED)  # room for two trajectories each
    members = lambda box: [RecordingMember(e, f"m{i}", box) for i, e in enumerate(pair)]  # noqa: E731
    try:
        fleet, results, attempts, loads = run_fleet(members, "kv_aware", 5)
    finally:
        for e in pair:
            e.shutdown()
    assert len(results) == len(attempts) == 5 and fleet.reruns == 0
    for member, load in zip(fleet.members, loads):
        assert not member.overbooked
        assert max(booked for _, booked in member.turns) <= 2
        assert load.kv_peak_tokens <= load.kv_capacity_tokens  # the engine's own counter
    served = [{key for key, _ in m.turns} for m in fleet.members]
    assert not served[0] & served[1]  # sticky: no trajectory ever asked both members
    assert all(served)  # and both members worked
    turns = [key for m in fleet.members for key, _ in m.turns]
    assert sorted(turns.count(key) for key in set(turns)) == [TURNS] * 5


def test_release_cache_frees_every_local_members_cache(hf_engine):
    pair = engines(hf_engine, budget=4 * NEED)

    async def go():
        fleet = Fleet([LocalMember(e, f"m{i}") for i, e in enumerate(pair)], "adaptive", poll_s=0.05)
        await asyncio.gather(*(one_trajectory(fleet, []) for _ in range(2)))
        held = [e.table.cache.k.numel() for e in pair]
        await fleet.release_cache()
        return held, [e.table.cache.k.numel() for e in pair]
    try:
        held, released = asyncio.run(go())
    finally:
        for e in pair:
            e.shutdown()
    assert all(held) and released == [0, 0]


def test_each_turn_names_its_trajectory_and_the_caller_names_its_group(hf_engine):
    """The fleet is told, not left to guess: a turn on a trajectory's own engine belongs to
    that trajectory; its group is the caller's (here two rollouts of problem p1, one of p2),
    even where the prompts are the same token ids; a request outside (eval, chat) is alone."""
    pair = engines(hf_engine, budget=4 * NEED)
    groups = {}

    async def go():
        fleet = Fleet([LocalMember(e, f"m{i}") for i, e in enumerate(pair)], "adaptive", poll_s=0.05)

        async def body(engine):
            await engine.generate([list(PROMPT)], PARAMS)
            groups[engine.key] = fleet.scheduler.pinned[engine.key].group
            await engine.generate([list(PROMPT) + [13]], PARAMS)
            return engine.key
        keys = await asyncio.gather(*(run_trajectory(fleet, NEED, body, group=problem)
                                      for problem in ["p1", "p1", "p2"]))
        submit = fleet.scheduler.submit
        fleet.scheduler.submit = lambda *args: (outside.append(args[3]), submit(*args))
        await fleet.generate([list(PROMPT)], PARAMS)
        await fleet.close()
        return keys
    outside = []
    try:
        keys = asyncio.run(go())
    finally:
        for e in pair:
            e.shutdown()
    assert len(set(keys)) == 3
    assert [groups[key] for key in keys] == ["p1", "p1", "p2"]
    assert outside == [None]  # a group of its own


def test_a_dead_members_trajectories_run_again_on_the_other_and_none_is_lost(hf_engine):
    pair = engines(hf_engine, budget=4 * NEED)

    class Dying(LocalMember):
        async def generate(self, prompts, params):
            out = await super().generate(prompts, params)
            threading.Thread(target=self.engine.shutdown).start()  # crashes after one turn
            return out

    members = lambda box: [Dying(pair[0], "dying"), LocalMember(pair[1], "survivor")]  # noqa: E731
    try:
        fleet, results, attempts, loads = run_fleet(members, "least_loaded", 4)
    finally:
        for e in pair:
            e.shutdown()
    assert len(results) == 4 and all(len(r) == len(PROMPT) + TURNS * 6 for r in results)
    assert fleet.reruns >= 1 and len(attempts) == 4 + fleet.reruns
    assert loads[0] is not None and fleet.scheduler.members[0].alive is False
    assert fleet.replaced == 0  # an in-process engine cannot be replaced


WEIGHTS_TOKEN = "fleet-test-weights-token"


@contextlib.contextmanager
def serve(engines, weights_dir=None):
    """Each engine behind its own serve-model app on a real port; yields servers and URLs.
    With ``weights_dir`` the apps take weight updates from under it (``WEIGHTS_TOKEN``)."""
    updates = WeightUpdates(directory=weights_dir, token=WEIGHTS_TOKEN if weights_dir else None)
    servers, urls = [], []
    for i, engine in enumerate(engines):
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(engine, f"smol{i}", weights=updates),
                                               host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        servers.append(server)
        urls.append(f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    while not all(s.started for s in servers) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield servers, urls
    finally:
        for server in servers:
            server.should_exit = True


@pytest.fixture
def served_pair(hf_engine):
    """Two serve-model apps, each with its own engine and KV budget."""
    pair = engines(hf_engine, budget=3 * NEED)
    try:
        with serve(pair) as (servers, urls):
            yield pair, servers, urls
    finally:
        for engine in pair:
            engine.shutdown()


def test_serve_model_reports_its_load_under_vllms_metric_names(served_pair):
    pair, _, urls = served_pair
    import httpx

    text = httpx.get(urls[0] + "/metrics").text
    for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                 "vllm:num_requests_waiting", "vllm:num_preemptions_total",
                 "vllm:cache_config_info{", "vllm:generation_tokens_total",
                 "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count"):
        assert name in text
    load = parse_vllm_metrics(text)
    assert load.kv_capacity_tokens == 3 * NEED and load.running == load.kv_used_tokens == 0

    asyncio.run(HTTPMember(urls[0]).generate([PROMPT], PARAMS))
    after = parse_vllm_metrics(httpx.get(urls[0] + "/metrics").text)
    assert after.generation_tokens - load.generation_tokens == PARAMS.max_tokens
    assert after.inter_tokens - load.inter_tokens == PARAMS.max_tokens - 1  # the first is no gap
    assert after.inter_token_seconds > load.inter_token_seconds


SLOWED_TURNS = 8


def test_a_slowed_member_is_measured_from_its_metrics_and_left_at_its_tool_calls(hf_engine):
    """Two serve-model members, one pausing in every decode step: the adaptive policy reads
    both members' decode counters at /metrics, finds the slow one slower, and moves the
    trajectories it was dealt to the other at their tool calls. The trajectories are long
    (``SLOWED_TURNS`` turns, each about 0.8 s on the slow member) so that tool calls still come
    after the policy has read both members twice: /metrics readings take their own time, longer
    on a busy machine, and a trajectory that ends before it has been measured has nothing to
    move for."""
    config = HFEngineConfig(dtype="float32", kv_budget_tokens=8 * need_of(SLOWED_TURNS), seed=0)
    pair = [HFEngine(config, model=hf_engine.model, tokenizer=hf_engine.tokenizer),
            Slowed(config, 0.2, model=hf_engine.model, tokenizer=hf_engine.tokenizer)]
    torch.set_num_threads(1)
    try:
        with serve(pair) as (_, urls):
            members = lambda box: [HTTPMember(u) for u in urls]  # noqa: E731
            fleet, results, attempts, loads = run_fleet(members, "adaptive", 6, turns=SLOWED_TURNS)
    finally:
        for engine in pair:
            engine.shutdown()
    assert len(results) == len(attempts) == 6
    latency = [load.inter_token_seconds / load.inter_tokens for load in loads]
    # the 0.2 s pause is in each of the slow member's token latencies; by how much the other is
    # faster depends on how the two share the cores (it computes during the pause), so only the order
    assert latency[1] >= 0.2 and latency[1] > latency[0]
    policy = fleet.scheduler.policy
    assert policy.slowness(1) > 1 and policy.slowness(0) == 1
    assert fleet.scheduler.moves >= 1  # a trajectory dealt to the slow member left it
    assert pair[0].load().generation_tokens > pair[1].load().generation_tokens


def test_vllm_metrics_text_is_read_per_engine():
    text = """# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",kv_cache_size_tokens="10576",num_gpu_blocks="661"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="100"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 900.0
vllm:generation_tokens_total{engine="1",model_name="m"} 100.0
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 800.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 800.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 16.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 800.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 16.0
"""
    load = parse_vllm_metrics(text)
    assert load.kv_capacity_tokens == 10576 + 1600
    assert load.kv_used_tokens == 5288 + 400
    assert (load.running, load.waiting, load.preemptions) == (4, 2, 7)
    assert load.generation_tokens == 1000  # engines added up
    assert (load.inter_tokens, load.inter_token_seconds) == (800, 16.0)  # the old name not twice

    older = parse_vllm_metrics(text.replace("inter_token_latency", "x_unused"))
    assert (older.inter_tokens, older.inter_token_seconds) == (800, 16.0)  # before the rename


def test_http_members_are_scheduled_from_their_metrics_and_a_refused_one_is_dropped(served_pair):
    pair, servers, urls = served_pair
    members = lambda box: [HTTPMember(u) for u in urls]  # noqa: E731
    fleet, results, attempts, loads = run_fleet(members, "kv_aware", 4)
    assert len(results) == 4 and fleet.reruns == 0
    assert [load.kv_capacity_tokens for load in loads] == [3 * NEED] * 2
    assert all(e.load().kv_peak_tokens > 0 for e in pair)  # both servers generated

    servers[0].should_exit = True  # the first server goes away: connections are refused
    deadline = time.monotonic() + 10
    while servers[0].started and time.monotonic() < deadline:
        time.sleep(0.05)
    fleet, results, attempts, loads = run_fleet(members, "kv_aware", 4)
    assert len(results) == 4 and loads[0] is None
    assert fleet.scheduler.members[0].alive is False
