"""Shared fixtures: a tiny model built once per test session (a short pretraining)."""

import os

import pytest

# The suite runs in fp32 on every machine (same numbers with or without native bf16); the
# tests of the bf16 paths set AGENTRL_NATIVE_BF16=1 themselves.
os.environ.setdefault("AGENTRL_NATIVE_BF16", "0")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from agentrl.tiny.builder import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "tiny",
        steps=12,
        drill_steps=10,
        induction_steps=10,
        progress=False,
    )


@pytest.fixture(scope="session")
def tiny_policy(tiny_dir):
    from agentrl.policy.loading import load_policy

    return load_policy(str(tiny_dir))
