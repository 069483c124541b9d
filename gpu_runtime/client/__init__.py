"""What a client of the runtime service needs, torch-free: the internal API's wire types, an HTTP
client, and the prompt composer with the served model's tokenizer and chat template.

The backend and the Celery workers import only this subpackage and ``gpu_runtime.types``: they
never load torch or vLLM.
"""
