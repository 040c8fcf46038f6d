"""Fixtures of the multi-agent tests."""

import sys

import pytest

from agentrl.envs import registry


@pytest.fixture
def duo_registered():
    """``meeting_duo`` registered for one test only (other tests loop over every env id)."""
    saved = dict(registry._REGISTRY)
    sys.modules.pop("agentrl.multiagent.envs", None)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
    sys.modules.pop("agentrl.multiagent.envs", None)
