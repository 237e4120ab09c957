"""The plan: the 14B recipes fit 8 nodes x 8 GPUs, the one-node recipe one node of 8 GPUs, the
one-GPU recipes one 80 GiB GPU, a placement that cannot fit is refused in one line, and the
parameter count the memory estimate rests on is the real model's."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rstar2.cli.app import app
from rstar2.cluster.architectures import KNOWN, UnknownArchitecture, architecture, from_config_json
from rstar2.cluster.plan import (
    GIB,
    PlacementError,
    UnsupportedPlacement,
    check_cluster_run,
    place,
    plan_run,
    span,
)
from rstar2.run.plan import LocalPlan, local_plan
from rstar2.run.recipe import load_config, validate_config
from rstar2.run.settings import cluster_job

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
STAGES = sorted(RECIPES.glob("qwen3-14b-stage*.yaml"))
ONE_GPU = sorted(RECIPES.glob("qwen3-1.7b-stage*.yaml"))


@pytest.mark.parametrize("recipe", STAGES, ids=lambda p: p.stem)
def test_paper_recipes_fit_eight_nodes_of_eight_gpus(recipe):
    plan = plan_of(load_config(recipe))
    cluster = load_config(recipe).cluster
    assert (cluster.nodes, cluster.gpus_per_node) == (8, 8)
    placed_ranks = sorted(r for node in plan.nodes for r in node.learner_ranks)
    placed_members = sorted(m for node in plan.nodes for m in node.engine_members)
    assert placed_ranks == list(range(cluster.learner.ranks))
    assert placed_members == list(range(cluster.engines.members))
    assert all(node.free_gpus >= 0 and node.free_cpus >= 0 for node in plan.nodes)
    assert sum(plan.learner_bytes.values()) < cluster.gpu_memory_gib * GIB
    assert plan.in_flight_per_member >= 1 and plan.weight_sync == "broadcast"  # vLLM's transfer


def test_the_one_node_recipe_fills_one_node_of_eight_gpus():
    """Learner ranks and vLLM members share the node's 8 GPUs, each fitting its 80 GiB; it starts
    where the one-GPU stage 1 does, from the one-GPU SFT run, with its prompt."""
    config = load_config(RECIPES / "qwen3-1.7b-8gpu.yaml")
    plan = plan_of(config)
    cluster = config.cluster
    assert (cluster.nodes, cluster.gpus_per_node, cluster.gpu_memory_gib) == (1, 8, 80)
    [node] = plan.nodes
    assert node.learner_ranks == list(range(cluster.learner.ranks))
    assert node.engine_members == list(range(cluster.engines.members))
    assert node.free_gpus == 0 and node.free_cpus >= 0 and node.sandbox_services >= 1
    assert sum(plan.learner_bytes.values()) < 72 * GIB  # room for the CUDA context and the allocator
    assert plan.in_flight_per_member >= 32 and plan.weight_sync == "broadcast"
    one_gpu = load_config(RECIPES / "qwen3-1.7b-stage1.yaml")
    assert config.rl.init.checkpoint == "runs/qwen3-1.7b-sft/checkpoints" and config.rl.init.reset_optimizer
    assert config.rollout.prompt == one_gpu.rollout.prompt and config.model.path == one_gpu.model.path
    shown = CliRunner().invoke(app, ["train", str(RECIPES / "qwen3-1.7b-8gpu.yaml"), "--plan"])
    assert shown.exit_code == 0 and "node 0: learner ranks 0-1, engine members 0-5" in shown.output
    assert "node 1" not in shown.output


def test_cli_prints_the_plan_and_refuses_in_one_line():
    runner = CliRunner()
    recipe = str(RECIPES / "qwen3-14b-stage1.yaml")
    shown = runner.invoke(app, ["train", recipe, "--plan"])
    assert shown.exit_code == 0, shown.output
    assert "node 7:" in shown.output and "rollouts in flight" in shown.output
    for override in ("cluster.nodes=4", "cluster.learner.ranks=2",
                     "cluster.engines.gpus_per_member=16"):  # TP wider than a node
        refused = runner.invoke(app, ["train", recipe, "--plan", "--set", override])
        assert refused.exit_code == 2
        message = refused.output.strip()
        assert message.startswith("error:") and "fit" in message and "\n" not in message
        assert "Traceback" not in message


def plan_of(config):
    return plan_run(cluster_job(config))


@pytest.mark.parametrize("recipe", ONE_GPU, ids=lambda p: p.stem)
def test_the_one_gpu_recipes_fit_one_80_gib_gpu(recipe):
    """Read offline: the table knows Qwen/Qwen3-1.7B-Base, nothing is fetched."""
    plan = local_plan(load_config(recipe))
    assert isinstance(plan, LocalPlan) and plan.gpu and plan.gpu_memory_gib == 80
    total = sum(plan.learner_bytes.values()) + sum(plan.engine_bytes.values())
    assert total < 72 * GIB  # room for the CUDA context and the allocator's slack
    assert plan.in_flight >= 32 and plan.kv_tokens // plan.rollout_tokens == plan.in_flight
    shown = CliRunner().invoke(app, ["train", str(recipe), "--plan"])
    assert shown.exit_code == 0 and "of a 80 GiB GPU" in shown.output and "one process" in shown.output


def test_a_one_gpu_run_without_a_kv_bound_is_refused_in_one_line():
    recipe = str(RECIPES / "qwen3-1.7b-stage1.yaml")
    refused = CliRunner().invoke(app, ["train", recipe, "--plan", "--set", "engine.members=[]"])
    assert refused.exit_code == 2
    message = refused.output.strip()
    assert message.startswith("error: does not fit one 80 GiB GPU") and "kv_budget_tokens" in message
    assert "\n" not in message


def test_the_table_numbers_count_the_real_architecture():
    """Every known architecture's parameter count against the transformers model built on the
    meta device from the same numbers (Qwen3's per-head q/k norms are the only extra)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    for name, arch in KNOWN.items():
        kind = LlamaConfig if name.startswith("smollm2") else Qwen3Config
        config = kind(hidden_size=arch.hidden, num_hidden_layers=arch.layers, num_attention_heads=arch.heads,
                      num_key_value_heads=arch.kv_heads, head_dim=arch.head_dim,
                      intermediate_size=arch.intermediate, vocab_size=arch.vocab,
                      tie_word_embeddings=arch.tied_embeddings)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        assert arch.parameters == pytest.approx(sum(p.numel() for p in model.parameters()), rel=1e-4), name


def config_with(cluster, **rl):
    return validate_config({"name": "plan", "data": {"train": "unused.jsonl"},
                            "model": {"gradient_checkpointing": rl.pop("checkpointing", True)},
                            "rl": {"steps": 1, **rl}, "cluster": cluster})


def test_sharding_and_checkpointing_shrink_the_learner():
    cluster = {"nodes": 2, "gpus_per_node": 8, "architecture": "qwen3-14b",
               "engines": {"members": 4, "gpus_per_member": 2}}
    few = plan_of(config_with({**cluster, "learner": {"ranks": 8}}))
    many = plan_of(config_with({**cluster, "learner": {"ranks": 8}, "nodes": 4}))
    assert few.learner_bytes == many.learner_bytes  # nodes alone change nothing per rank
    sharded = config_with({**cluster, "learner": {"ranks": 8}})
    with pytest.raises(PlacementError, match="ranks"):
        plan_of(config_with({**cluster, "learner": {"ranks": 2}}))
    full = config_with({**cluster, "learner": {"ranks": 8}}, checkpointing=False)
    with pytest.raises(PlacementError, match="learner rank needs"):
        plan_of(full)
    assert plan_of(sharded).learner_bytes["optimizer"] * 8 == pytest.approx(
        2 * 2 * KNOWN["qwen3-14b"].parameters)


def test_placement_never_splits_a_member_across_nodes():
    cluster = config_with({"nodes": 2, "gpus_per_node": 4, "engines": {"members": 2,
                                                                       "gpus_per_member": 3}}).cluster
    with pytest.raises(PlacementError, match="engine member"):
        place(cluster.model_copy(update={"engines": cluster.engines.model_copy(
            update={"members": 3})}))
    nodes = place(cluster)
    assert [n.engine_members for n in nodes] == [[0], [1]]
    assert [n.learner_ranks for n in nodes] == [[0], []]


def test_cpu_cluster_counts_cores():
    cluster = {"nodes": 1, "cpus_per_node": 4, "learner": {"ranks": 2},
               "engines": {"members": 2, "gpus_per_member": 0},
               "sandbox": {"services_per_node": 1, "workers_per_service": 1}}
    with pytest.raises(PlacementError, match="no node"):
        plan_of(config_with(cluster))
    plan = plan_of(config_with({**cluster, "cpus_per_node": 5}))
    assert plan.nodes[0].learner_ranks == [0, 1] and plan.nodes[0].free_cpus == 0
    assert plan.weight_sync == "broadcast"


@pytest.mark.parametrize("override, named", [("rl.loss.kl_coef=0.01", "KL reference"),
                                             ("model.lora.rank=8", "LoRA")])
def test_learner_options_the_cluster_cannot_train_are_refused_at_plan_time(override, named):
    """Before any rank starts: ``--plan`` and ``rstar2 train`` both answer one line."""
    recipe = str(RECIPES / "cpu-cluster.yaml")
    for extra in (["--plan"], []):
        refused = CliRunner().invoke(app, ["train", recipe, *extra, "--set", override])
        assert refused.exit_code == 2, refused.output
        message = refused.output.strip().splitlines()[-1]  # after the device line
        assert message.startswith("error:") and named in message
        assert "Traceback" not in refused.output


def test_a_cluster_run_without_any_sandbox_is_refused():
    config = load_config(RECIPES / "cpu-cluster.yaml", ["cluster.sandbox.services_per_node=0"])
    with pytest.raises(UnsupportedPlacement, match="sandbox.urls"):
        check_cluster_run(cluster_job(config))


def test_parameter_count_matches_the_real_model():
    from rstar2.models.loading import load_model

    model = load_model("default", dtype="float32")
    arch = from_config_json(model.config.to_dict())
    assert arch == KNOWN["smollm2-135m"] == architecture(None, "default")
    assert arch.parameters == sum(p.numel() for p in model.parameters())
    with pytest.raises(UnknownArchitecture, match="cluster.architecture"):
        architecture(None, "/nonexistent/model")


def test_span():
    assert span([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8" and span([]) == ""
