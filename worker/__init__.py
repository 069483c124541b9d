"""InferScale Celery worker: encoding and re-encoding jobs."""
