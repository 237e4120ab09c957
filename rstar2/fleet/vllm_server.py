"""``VLLMServerMember``: a ``vllm serve`` server as a fleet member that takes new weights.

It samples and reports its load as any ``HTTPMember`` (``/v1/completions`` in token ids,
``/metrics`` under vLLM's names), and receives weights through vLLM's RL routes
(``vllm/entrypoints/rl/online/api_router.py``; the server runs with
``--weight-transfer-config '{"backend": "nccl"}'``): ``/init_weight_transfer_engine`` once,
then per round ``/start_weight_update``, ``/update_weights`` (names, dtypes and shapes; the
tensors arrive over NCCL from the sender) and ``/finish_weight_update``.

Two senders drive those routes:

* a learner's rank 0 (``cluster.weight_strategies.VLLMTransfer``): the member is a
  ``weights.TransferReceiver`` and its ``transfer_client`` is vLLM's own
  ``HTTPVLLMWeightSyncClient``;
* this process, when a learner here hands the member a state dict (``update_weights``, e.g.
  the single-process trainer on one GPU): the member opens vLLM's trainer-side engine over it,
  as rank 0 of a group with the server's workers, at the first update.

Around a round the server is paused (``/pause?mode=wait``: running requests finish, new ones
are refused, and the KV and prefix caches are cleared) and resumed after (``/resume``), so no
request ever computes on a mix of old and new weights or reuses a stale cache. The version is
stamped by this member (the server's ``/update_weight_version`` records it too).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping

import httpx

from rstar2.engines.base import EngineError
from rstar2.fleet.members import HTTPMember

TRANSFER_TIMEOUT_S = 600.0


class VLLMServerMember(HTTPMember):
    """A ``vllm serve`` member at ``base_url``; see the module docstring."""

    def __init__(self, base_url: str, model: str | None = None, name: str | None = None,
                 timeout_s: float = 600.0):
        super().__init__(base_url, model=model, name=name, timeout_s=timeout_s)
        self.sender = None  # vLLM's trainer-side engine, when this process sends the weights

    # ------------------------------------------------- weights.TransferReceiver
    async def transfer_workers(self) -> int:
        try:
            answer = await self.call("GET", "/get_world_size", params={"include_dp": "true"})
        except EngineError as exc:
            raise EngineError(f"{exc}; is it vllm serve with --weight-transfer-config?") from exc
        return int(answer["world_size"])

    def transfer_client(self):
        from rstar2.engines.vllm import require

        return require("vllm.distributed.weight_transfer", "HTTPVLLMWeightSyncClient")(
            self.server, timeout=TRANSFER_TIMEOUT_S)

    async def before_transfer(self) -> None:
        await self.call("POST", "/pause", params={"mode": "wait", "clear_cache": "true"})

    async def after_transfer(self, version: int | None) -> None:
        if version is not None:
            await self.call("POST", "/update_weight_version", json={"new_version": str(version)})
        await self.call("POST", "/resume")
        self.weight_version = version

    async def end_weight_transfer(self) -> None:
        await self.call("POST", "/shutdown_weight_transfer_engine")

    async def weight_digests(self) -> list[dict[str, str]]:
        """vLLM's per-parameter sha256 of the server's weights (``/weight_checker``), as one
        dict (keys prefixed with each worker's parallel ranks)."""
        answer = await self.call("POST", "/weight_checker", json={"action": "checksum"})
        return [answer["checksums"]]

    # ------------------------------------------------- a state dict from this process
    async def update_weights(self, state_dict: Mapping, version: int | None = None) -> None:
        """Send ``state_dict`` (on this process's GPU) to the server's workers over NCCL, with
        this process as the sender (see the module docstring)."""
        if not state_dict:  # nothing new: the server keeps the weights it has
            self.weight_version = version
            return
        if self.sender is None:
            self.sender = await self.open_sender(state_dict)
        self.sender.source.tensors = state_dict
        await self.before_transfer()
        await asyncio.to_thread(self.sender.send_weights)
        await self.after_transfer(version)

    async def open_sender(self, state_dict: Mapping):
        """vLLM's trainer-side engine over ``state_dict``: rank 0 of a group with the server's
        workers, which join through ``/init_weight_transfer_engine`` (vLLM's handshake)."""
        from rstar2.fleet.vllm_transfer import open_trainer_transfer

        world = 1 + await self.transfer_workers()
        address, port = sender_endpoint(self.server)
        return await asyncio.to_thread(
            open_trainer_transfer, state_dict, address=address, port=port, world=world,
            rank=0, client=self.transfer_client())

    async def close(self) -> None:
        if self.sender is not None:
            self.sender.shutdown()
        await super().close()


def sender_endpoint(server: str) -> tuple[str, int]:
    """This host's address as the server sees it (the interface that routes to it) and a
    free port, where the transfer group's rendezvous is served."""
    host = httpx.URL(server).host or "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # no packet is sent: this only picks the route
        address = probe.getsockname()[0]
    with socket.socket() as listener:
        listener.bind(("", 0))
        port = listener.getsockname()[1]
    return address, port
