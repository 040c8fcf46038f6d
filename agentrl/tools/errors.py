"""Exceptions that mark a *harness* fault rather than a tool failure the model caused.

A tool raises ``HarnessFault`` (e.g. the sandbox could not start) when the fault is in the
machinery, not in the model's call. The guard reports it with a harness code; the environment
ends the episode with ``harness_error``, which is masked from the loss and from group baselines.
"""

from __future__ import annotations

#: Error codes of harness faults (they end the episode with ``harness_error``).
HARNESS_CODES: tuple[str, ...] = ("worker_crash", "sandbox_error")


class HarnessFault(Exception):
    """The harness, not the model, failed (worker died, sandbox failed to start, ...)."""

    code = "sandbox_error"
