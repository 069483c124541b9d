"""The backend's adapter to the runtime service (``gpu_runtime.client``, torch-free): one client
for every replica (``client.EngineClient``: routing, composing, generating, encoding) and the
purge that must reach every replica before a delete commits (``purge``)."""
