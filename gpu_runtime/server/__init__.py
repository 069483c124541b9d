"""The runtime service: the internal HTTP API over ``InjectionRuntime`` (``python -m gpu_runtime
serve``). Web code lives here only; the engine, connector and pool modules never import it."""
