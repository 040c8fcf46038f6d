"""Serve a model or a trained run behind an OpenAI-compatible API (``agentrl serve``)."""

from agentrl.serve.app import create_app
from agentrl.serve.batcher import Batcher, Job

__all__ = ["Batcher", "Job", "create_app"]
