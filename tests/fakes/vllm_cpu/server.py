"""A ``vllm serve`` stand-in: vLLM's own RL router (the weight-transfer routes, with their
request models) over a ``FakeAsyncLLM``, beside ``rstar2 serve-model``'s completions and
``/metrics`` over the same ``HFEngine``, so weights pushed through the routes change what the
server samples."""

from __future__ import annotations


def serve_app(llm, model_name: str = "default"):
    """The ASGI app (serve it with ``tests.engines.serving.serving``)."""
    from vllm.entrypoints.rl.online.api_router import router

    from rstar2.serve.server import create_app

    app = create_app(llm.engine, model_name)
    app.include_router(router)
    app.state.engine_client = llm
    return app
