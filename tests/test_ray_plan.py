"""The Ray pool's shape for a cluster's resources (pipeline/ray_executor.py `plan_pool`,
`execution_providers`): GPUs asked for when the cluster has them and the model runs on one.
No cluster here has a GPU, so the decision is tested as a function; tests/test_ray.py shows
what the actors of a CPU-only cluster report (num_gpus 0, the configured batch size)."""

from __future__ import annotations

import pytest

from pipeline.ray_executor import PoolPlan, execution_providers, plan_pool


def test_a_cpu_cluster_gets_one_actor_per_cpu_and_no_gpu() -> None:
    assert plan_pool({"CPU": 8.0}, 0, 100, wants_gpu=True) == PoolPlan(8, 1.0, 0.0)
    assert plan_pool({"CPU": 8.0, "GPU": 0.0}, 0, 100, wants_gpu=True) == PoolPlan(8, 1.0, 0.0)
    assert plan_pool({"CPU": 8.0}, 3, 100, wants_gpu=False) == PoolPlan(
        3, 1.0, 0.0
    )  # MDVDB_WORKERS
    assert plan_pool({"CPU": 8.0}, 0, 2, wants_gpu=False) == PoolPlan(2, 1.0, 0.0)  # 2 batches
    assert plan_pool({}, 0, 5, wants_gpu=False) == PoolPlan(1, 1.0, 0.0)


def test_gpus_go_to_the_encoder_one_actor_per_gpu_or_an_even_share() -> None:
    resources = {"CPU": 16.0, "GPU": 2.0}
    assert plan_pool(resources, 0, 100, wants_gpu=True) == PoolPlan(2, 1.0, 1.0)
    assert plan_pool(resources, 4, 100, wants_gpu=True) == PoolPlan(4, 1.0, 0.5)
    # Three actors on two GPUs: halves, so that two fit on a GPU and all three are placed.
    assert plan_pool(resources, 3, 100, wants_gpu=True) == PoolPlan(3, 1.0, 0.5)
    assert plan_pool(resources, 0, 1, wants_gpu=True) == PoolPlan(1, 1.0, 1.0)
    # WordLlama is a table lookup: a GPU does not speed it up, so its actors take CPUs.
    assert plan_pool(resources, 0, 100, wants_gpu=False) == PoolPlan(16, 1.0, 0.0)


def test_an_actor_given_a_gpu_runs_the_encoder_on_cuda_only_when_onnxruntime_has_it() -> None:
    cpu = ("CPUExecutionProvider",)
    assert execution_providers([], ["CUDAExecutionProvider", *cpu]) == cpu
    assert execution_providers(["0"], list(cpu)) == cpu  # onnxruntime without CUDA
    assert execution_providers(["0"], ["CUDAExecutionProvider", *cpu]) == (
        "CUDAExecutionProvider",
        *cpu,
    )


def test_the_driver_refuses_actors_with_another_mdvdb_or_other_model_weights() -> None:
    """Another version would chunk otherwise, other weights would put other vectors under
    this run's cache key: the run stops with one line before any batch is written."""
    from kernel.version import __version__
    from pipeline.ray_executor import EncoderEmbed, _check_actors
    from pipeline.workers import WorkerDied

    folder = EncoderEmbed("/models/mine", 384, "ab12")
    good = {"version": __version__, "model": "/models/mine@ab12"}
    _check_actors([good, good], folder)
    _check_actors([{**good, "model": "wordllama-l2-supercat"}], None)  # WordLlama: the package's
    with pytest.raises(WorkerDied, match="install the same version on every node"):
        _check_actors([good, {**good, "version": "0.0.1"}], folder)
    with pytest.raises(WorkerDied, match="the same model files on every node") as raised:
        _check_actors([good, {**good, "model": "/models/mine@ffff"}], folder)
    assert "\n" not in str(raised.value) and "/models/mine@ab12" in str(raised.value)
