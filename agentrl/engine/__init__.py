"""Rollout engines: the PyTorch decoder with a KV cache kept across turns and continuous
batching (``Engine``), behind the batch ``generate`` interface and the session interface the
rollout uses."""
