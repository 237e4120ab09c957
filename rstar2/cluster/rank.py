"""One rank of the distributed learner: a process (a Ray actor) holding its FSDP2 shard of the
policy, of the gradients and of AdamW's moments.

    rank = LearnerRank(model, settings, "gloo", rank=0, world=2)   # ModelConfig, LearnerSettings
    address, port = rank.endpoint()            # rank 0 only: where the others connect
    rank.join(address, port)                   # every rank, at once
    rank.learn(sequences)                      # every rank, the same sequences
    rank.full_state_dict()                     # rank 0 gets the whole policy, the others {}

All methods that touch the policy are collectives: the driver (``DistributedLearner``) calls
each on every rank at once. Checkpoints are torch.distributed.checkpoint (DCP) directories,
written by all ranks in parallel into the directory the driver prepared (which must be on
storage every node sees); rank 0 adds the schedule's position.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rstar2.cluster.fsdp import shard_policy, sharded_logprobs, sharded_update
from rstar2.rl.learner import LearnerSettings
from rstar2.rl.loss import LossStats
from rstar2.rl.update import old_logprobs_source, updates_over_parts
from rstar2.training.batch import TrainSequence
from rstar2.training.checkpoint import load_checkpoint, read, resolve_checkpoint, write_durably
from rstar2.training.config import ModelConfig
from rstar2.training.optim import build_optimizer, build_scheduler
from rstar2.training.policy import load_policy
from rstar2.weights.wire import manifest_of, open_group, send

SHARDED_DIR = "sharded"


class LearnerRank:
    """See the module docstring; ``backend`` is ``cluster.learner.backend``."""

    def __init__(self, model: ModelConfig, settings: LearnerSettings, backend: str, rank: int,
                 world: int, threads: int = 1):
        torch.set_num_threads(threads)
        self.model_config, self.settings = model, settings
        self.rank, self.world = rank, world
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.backend = backend
        self.device = "cuda" if backend == "nccl" else "cpu"
        self.transfer = None  # vLLM's trainer-side weight-transfer engine (open_transfer)

    def endpoint(self) -> tuple[str, int]:
        """This node's address and a free port for the process group's rendezvous."""
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return socket.gethostbyname(socket.gethostname()), port

    def join(self, address: str, port: int) -> None:
        """Join the process group, load the policy and shard it; build AdamW over the shards."""
        from torch.distributed.device_mesh import init_device_mesh

        dist.init_process_group(self.backend, init_method=f"tcp://{address}:{port}",
                                rank=self.rank, world_size=self.world)
        self.mesh = init_device_mesh(self.device, (self.world,))
        self.model = load_policy(self.model_config).to(self.device)
        init = self.settings.init
        start = resolve_checkpoint(init.checkpoint) if init.checkpoint is not None else None
        if start is not None and not (start / SHARDED_DIR).is_dir():  # a single-process one
            load_checkpoint(start, self.model, restore_rng=False)
        shard_policy(self.model, self.mesh, self.model_config.compute_dtype)
        self.optimizer = build_optimizer(self.model.parameters(), self.settings.optimizer)
        self.scheduler = build_scheduler(self.optimizer, self.settings.optimizer,
                                         self.settings.total_updates)

    def learning_rate(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def learn(self, sequences: list[TrainSequence]) -> tuple[LossStats, float]:
        """As ``LocalLearner.learn`` with an engine holding its own copy: the old log-probs
        from the update's forward pass or recomputed over the ranks
        (``rstar2.rl.update.old_logprobs_source``), then ``updates_per_step`` sharded updates."""
        sequences, old_from_forward = old_logprobs_source(
            sequences, self.settings.updates_per_step, sampled_here=False,
            recompute=lambda them: sharded_logprobs(self.model, them, self.settings.update, self.mesh))
        return updates_over_parts(
            sequences, self.settings.updates_per_step,
            lambda part: sharded_update(self.model, self.optimizer, self.scheduler, part,
                                        self.settings.update, self.mesh, old_from_forward))

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole policy on rank 0 (CPU tensors, transformers names); {} on the others."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(self.model, options=options)

    def join_weight_group(self, address: str, port: int, size: int) -> None:
        """Rank 0: open the weight-sync group with the engine members (``weights.wire``)."""
        self.weight_group = open_group(address, port, 0, size)

    def weight_manifest(self) -> list:
        """Rank 0: names, shapes and dtypes of the full state dict, in the order it is sent."""
        return manifest_of({name: torch.empty(tuple(p.shape), dtype=p.dtype, device="meta")
                            for name, p in self.model.state_dict().items()})

    def broadcast_weights(self, bucket_bytes: int) -> None:
        """Every rank (the gather is a collective); rank 0 then sends to the weight group."""
        state = self.full_state_dict()
        if self.rank == 0:
            send(self.weight_group, state, bucket_bytes)

    def open_transfer(self, address: str, port: int, world: int, client) -> None:
        """Every rank: vLLM's trainer-side NCCL weight-transfer engine over this rank's policy
        (``fleet.vllm_transfer``), replacing the one before; rank 0 is the sender and runs
        the handshake through ``client``."""
        from rstar2.fleet.vllm_transfer import open_trainer_transfer

        if self.transfer is not None:
            self.transfer.shutdown()
        self.transfer = open_trainer_transfer(self.model, address=address, port=port,
                                              world=world, rank=self.rank, client=client)

    def send_transfer(self) -> None:
        """Every rank (each parameter's gather is a collective); rank 0 sends."""
        self.transfer.send_weights()

    def save(self, directory: str) -> None:
        """This rank's shards into ``directory/sharded`` (DCP); rank 0 adds the schedule."""
        import torch.distributed.checkpoint as dcp

        dcp.save(self.sharded_state(), checkpoint_id=str(Path(directory) / SHARDED_DIR))
        if self.rank == 0:
            write_durably(Path(directory) / "scheduler.pt", self.scheduler.state_dict())

    def load(self, directory: str, optimizer: bool = True) -> None:
        """Restore the shards (and AdamW and the schedule unless ``optimizer`` is False)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        state = self.sharded_state()
        if not optimizer:
            state.pop("optimizer")
        dcp.load(state, checkpoint_id=str(Path(directory) / SHARDED_DIR))
        if not optimizer:
            set_model_state_dict(self.model, state["model"])
            return
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])
        self.scheduler.load_state_dict(read(Path(directory) / "scheduler.pt"))

    def sharded_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def close(self) -> None:
        if self.transfer is not None:
            self.transfer.shutdown()
        if dist.is_initialized():
            dist.destroy_process_group()
