"""Where encoded fact KV lives between encoding and injection."""
