"""``Fleet``: one ``Engine`` over many members, scheduled per trajectory.

    fleet = Fleet([LocalMember(engine_a), HTTPMember("http://node2:8000")])  # "adaptive"
    agent = Agent(fleet, tokenizer, sandbox)     # the trainer and the agent see one engine

How a trajectory is identified across its turns: the agent runs every rollout inside
``base.run_trajectory(engine, need_tokens, body, group)``, which enters
``fleet.trajectory(need, group)`` and hands the body that trajectory's own engine
(``TrajectoryEngine``, bound to its ticket): the agent makes every turn's ``generate`` on it,
so the fleet is told which trajectory each turn belongs to, and the caller says which group
it is in (the sampler: the problem; rollouts of one problem share a group, their lengths
predict each other). The first ``generate`` submits the trajectory to the ``Scheduler`` and
waits for its admission; each later one asks the scheduler which member runs that turn
(``begin_turn``: its own, unless the policy moves it while it waited on a tool) and reports
the turn's end (``end_turn``); leaving the scope releases it (a trajectory that ended
normally teaches the policy its length). A ``generate`` on the fleet itself (eval, chat) is
scheduled as a one-turn trajectory of its own.

A member that dies (``MemberDown``: a closed engine, a refused connection, a dead actor) is
taken out of the schedule; every trajectory pinned to it raises ``TrajectoryLost`` at its next
(or current) turn, and ``run_trajectory`` runs it again from its start on whichever member the
scheduler admits it to, so each rollout still yields exactly one trajectory. A member that can
be replaced (a Ray actor) is restarted in the background, given the current weights (the last
ones pushed through the fleet, or through ``on_replaced`` when a weight sync bypasses it), and
rejoins the schedule empty.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Hashable

from rstar2.engines.base import (
    Completion,
    EngineLoad,
    PauseMode,
    SamplingParams,
    TrajectoryLost,
    run_trajectory,
)
from rstar2.engines.seeds import derive_seed
from rstar2.errors import Rstar2Error
from rstar2.fleet.members import Member, MemberDown
from rstar2.fleet.scheduler import PolicyName, Scheduler

log = logging.getLogger(__name__)


class FleetDown(Rstar2Error, RuntimeError):
    """No member is left to run trajectories on."""


@dataclass(eq=False)
class Ticket:
    """One trajectory's place in the fleet."""

    key: int
    need_tokens: int
    group: Hashable = None  # the caller's: rollouts of one problem share one
    admitted: asyncio.Future | None = None  # set when its first turn asks to run
    member: int | None = None
    lost: bool = False


class TrajectoryScope:
    """``async with fleet.trajectory(need, group) as engine:`` -- a ticket on entry (admitted
    when its first turn asks to run), the engine its turns call, release on exit."""

    def __init__(self, fleet: Fleet, need_tokens: int, group: Hashable):
        self.fleet, self.need_tokens, self.group = fleet, need_tokens, group
        self.ticket: Ticket | None = None

    async def __aenter__(self) -> TrajectoryEngine:
        await self.fleet.ready()
        self.ticket = Ticket(next(self.fleet.keys), self.need_tokens, self.group)
        return TrajectoryEngine(self.fleet, self.ticket)

    async def __aexit__(self, exc_type, *exc_info) -> None:
        self.fleet.release(self.ticket, finished=exc_type is None)


class TrajectoryEngine:
    """The fleet as one trajectory sees it: each ``generate`` is a turn of that trajectory."""

    def __init__(self, fleet: Fleet, ticket: Ticket):
        self.fleet, self.ticket = fleet, ticket

    @property
    def key(self) -> int:
        """The trajectory's number in the fleet (a rerun gets a new one)."""
        return self.ticket.key

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]:
        return await self.fleet.turn(self.ticket, prompts, params)


class Fleet:
    """An ``Engine`` over ``members``; see the module docstring."""

    def __init__(self, members: Sequence[Member], policy: PolicyName = "adaptive",
                 poll_s: float = 0.25,
                 on_replaced: Callable[[Member], Awaitable[None]] | None = None):
        self.members = list(members)
        self.policy = policy
        self.poll_s = poll_s
        self.scheduler: Scheduler | None = None  # built from the members' capacities on first use
        self.starting = asyncio.Lock()
        self.tickets: dict[int, Ticket] = {}
        self.keys = itertools.count()
        self.poller: asyncio.Task | None = None
        self.restarts: set[asyncio.Task] = set()
        self.last_weights: Mapping | None = None
        self.on_replaced = on_replaced
        """How a replaced member gets the current weights when they never passed through
        ``update_weights`` (a learner that sends to the members directly catches it up);
        weights that did pass through are handed over from ``last_weights``."""
        self.last_version: int | None = None
        self.seed: int | None = None
        self.reruns = 0  # trajectories run again because their member died
        self.replaced = 0  # members restarted

    # ----------------------------------------------------------------- the Engine contract
    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams
                       ) -> list[Completion]:
        """A request outside any trajectory (eval, chat): a one-turn trajectory of its own."""
        need = sum(len(p) for p in prompts) + params.max_tokens * len(prompts)
        return await run_trajectory(self, need, lambda turn: turn.generate(prompts, params))

    async def turn(self, ticket: Ticket, prompts: Sequence[Sequence[int]],
                   params: SamplingParams) -> list[Completion]:
        """One turn of the trajectory ``ticket`` on the member the scheduler gives it."""
        context = sum(len(p) for p in prompts)
        if ticket.member is None:
            await self.admit(ticket, prompts)
        elif not ticket.lost:
            ticket.member = self.scheduler.begin_turn(ticket.key, context)
        if ticket.lost:
            self.reruns += 1
            raise TrajectoryLost(f"member {ticket.member} died")
        try:
            completions = await self.members[ticket.member].generate(prompts, params)
        except MemberDown:
            self.lose(ticket.member)
            self.reruns += 1
            raise TrajectoryLost(f"member {ticket.member} died") from None
        self.scheduler.end_turn(ticket.key, context + sum(len(c.token_ids) for c in completions))
        return completions

    def trajectory(self, need_tokens: int, group: Hashable = None) -> TrajectoryScope:
        """The scope of one trajectory (see ``base.run_trajectory``)."""
        return TrajectoryScope(self, need_tokens, group)

    def samples_from(self, model: object) -> bool:
        """Never colocated: every member holds its own copy of the weights."""
        return False

    async def update_weights(self, state_dict: Mapping, version: int | None = None) -> None:
        """Every live member loads the weights (stamped ``version``), all at once; they are
        kept (as references, no copy) for a member that is replaced before the next push."""
        self.last_weights, self.last_version = state_dict, version
        # a member lost here is replaced, and given ``last_weights``
        await self.on_live_members(lambda member: member.update_weights(state_dict, version))

    async def release_cache(self) -> None:
        """Every live member forgets its cached keys/values (those in this process free them)."""
        await self.on_live_members(lambda member: member.release_cache())

    async def pause(self, mode: PauseMode) -> None:
        """Every live member stops generating (``base.PausableEngine``); one that died
        meanwhile is lost here, as at any call."""
        await self.on_live_members(lambda member: member.pause(mode))

    async def resume(self) -> None:
        await self.on_live_members(lambda member: member.resume())

    async def on_live_members(self, call: Callable[[Member], Awaitable[None]]) -> None:
        """``call`` on every live member at once; a member down is lost (and replaced in the
        background where it can be), any other failure raised."""
        await self.ready()
        alive = [i for i, books in enumerate(self.scheduler.members) if books.alive]
        results = await asyncio.gather(*(call(self.members[i]) for i in alive), return_exceptions=True)
        for index, result in zip(alive, results):
            if isinstance(result, MemberDown):
                self.lose(index)
            elif isinstance(result, BaseException):
                raise result

    def reseed(self, seed: int) -> None:
        """Reseed every member, each from (seed, its index), so members draw different streams."""
        self.seed = seed
        for index, member in enumerate(self.members):
            member.reseed(derive_seed(seed, index))

    async def live_members(self) -> list[int]:
        """Indices of the members that answer now; one that does not is lost here (and
        replaced in the background where it can be), as if a trajectory had found it dead."""
        await self.ready()
        for index, load in enumerate(await self.loads()):
            if load is None:
                self.lose(index)
        return [index for index, books in enumerate(self.scheduler.members) if books.alive]

    async def loads(self) -> list[EngineLoad | None]:
        """Each member's own reading of its load (None for a dead one)."""
        async def read(member: Member) -> EngineLoad | None:
            try:
                return await member.load()
            except MemberDown:
                return None
        return list(await asyncio.gather(*(read(m) for m in self.members)))

    async def close(self) -> None:
        for task in [self.poller, *self.restarts]:
            if task is not None:
                task.cancel()
        for member in self.members:
            await member.close()

    # ----------------------------------------------------------------- admission
    async def admit(self, ticket: Ticket, prompts: Sequence[Sequence[int]]) -> None:
        """Submit the trajectory with its first turn's prompts and its group, and wait until
        the scheduler pins it to a member."""
        ticket.admitted = asyncio.get_running_loop().create_future()
        self.tickets[ticket.key] = ticket
        self.scheduler.submit(ticket.key, ticket.need_tokens, sum(len(p) for p in prompts),
                              ticket.group)
        if self.poller is None:
            self.poller = asyncio.create_task(self.poll())
        self.dispatch()
        ticket.member = await ticket.admitted

    async def ready(self) -> None:
        async with self.starting:  # the first trajectories all arrive at once
            if self.scheduler is None:
                await self.start()

    async def start(self) -> None:
        """Read every member's capacity; a member that does not answer starts out dead (and is
        replaced where it can be)."""
        loads = await self.loads()
        if all(load is None for load in loads):
            raise FleetDown("no member of the fleet answers")
        self.scheduler = Scheduler(self.policy, [load.kv_capacity_tokens if load else 0
                                                 for load in loads])
        for index, load in enumerate(loads):
            if load is None:
                self.lose(index)

    def release(self, ticket: Ticket, finished: bool = False) -> None:
        self.tickets.pop(ticket.key, None)
        self.scheduler.release(ticket.key, finished=finished and not ticket.lost)
        self.dispatch()

    def dispatch(self) -> None:
        """Admit what the policy admits now; with no member left, fail whoever waits."""
        for key, member in self.scheduler.admit():
            ticket = self.tickets[key]
            if not ticket.admitted.done():
                ticket.admitted.set_result(member)
        if not any(m.alive for m in self.scheduler.members) and not self.restarts:
            for key in list(self.scheduler.pending):
                ticket = self.tickets[key]
                if not ticket.admitted.done():
                    ticket.admitted.set_exception(FleetDown("every member of the fleet is down"))

    async def poll(self) -> None:
        """While trajectories are scheduled, read the members' own KV counters (capacity can
        change, other clients use shared servers) and admit what they make room for."""
        while self.tickets:
            await asyncio.sleep(self.poll_s)
            for index, load in enumerate(await self.loads()):
                if not self.scheduler.members[index].alive:
                    continue
                if load is None:
                    self.lose(index)
                else:
                    self.scheduler.report(index, load)
            self.dispatch()
        self.poller = None

    # ----------------------------------------------------------------- dead members
    def lose(self, index: int) -> None:
        """Take a dead member out, mark its trajectories lost, and try to replace it."""
        if not self.scheduler.members[index].alive:
            return
        for key in self.scheduler.lose(index):
            self.tickets[key].lost = True
        task = asyncio.get_running_loop().create_task(self.replace(index))
        self.restarts.add(task)
        task.add_done_callback(self.restarts.discard)
        self.dispatch()

    async def replace(self, index: int) -> None:
        member = self.members[index]
        try:
            if await member.restart():
                if self.last_weights is not None:
                    await member.update_weights(self.last_weights, self.last_version)
                elif self.on_replaced is not None:
                    await self.on_replaced(member)
                if self.seed is not None:
                    member.reseed(derive_seed(self.seed, index))
                load = await member.load()
                self.scheduler.restore(index, load.kv_capacity_tokens)
                self.replaced += 1
        except Exception as exc:  # it stays out; the others carry on
            log.warning("fleet: could not replace member %s: %s", member.name, exc)
        finally:
            self.restarts.discard(asyncio.current_task())
            self.dispatch()

