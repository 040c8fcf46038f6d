"""train.step: what the loop's knobs resolve to."""

import pytest

from agentrl.config import ConfigError, build_config
from agentrl.train.step import resolve_truncation


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_auto_truncation_scores_truncated_episodes_for_both_algorithms(algo):
    assert resolve_truncation(build_config({}, [f"algo.name={algo}"])) == "zero"


def test_explicit_truncation_is_kept_and_bootstrap_needs_ppo():
    cfg = build_config({}, ["algo.name=ppo", "algo.truncation=bootstrap"])
    assert resolve_truncation(cfg) == "bootstrap"
    assert resolve_truncation(build_config({}, ["algo.truncation=mask"])) == "mask"
    with pytest.raises(ConfigError, match="needs a value function"):
        build_config({}, ["algo.name=grpo", "algo.truncation=bootstrap"])
