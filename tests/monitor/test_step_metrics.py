"""step_metrics: tool rates per failure class and per flag (truncated output, coerced)."""

from __future__ import annotations

import torch

from agentrl.monitor.step import step_metrics, tool_rates
from agentrl.types import RewardBreakdown, Trajectory


def _call(name: str, ok: bool = True, code: str | None = None, **flags: bool) -> dict:
    return {"name": name, "arguments": {}, "ok": ok, "error_code": code, "content": "{}", **flags}


def _traj(calls: list[dict], termination: str = "success") -> Trajectory:
    return Trajectory(
        task_id="t",
        group_id=0,
        messages=[],
        token_ids=[1, 2, 3],
        loss_mask=[0, 1, 1],
        logprobs=[0.0, -0.5, -0.5],
        turn_of_token=[-1, 0, 0],
        reward=RewardBreakdown({"outcome": 1.0}, {"outcome": 1.0}),
        termination=termination,
        tool_calls=calls,
        info={"turns": 2, "parse_errors": []},
    )


def _trajs() -> list[Trajectory]:
    # get_weather: 5 calls, 2 truncated (both ok), 1 coerced, 1 timeout (coerced too)
    # add: 4 calls, 1 invalid_arguments, 1 coerced; echo: 2 calls, none flagged
    return [
        _traj(
            [
                _call("get_weather", truncated_output=True),
                _call("get_weather", truncated_output=False, coerced=False),
                _call("add", ok=False, code="invalid_arguments"),
                _call("echo"),
            ]
        ),
        _traj(
            [
                _call("get_weather", truncated_output=True),
                _call("get_weather", ok=False, code="timeout", coerced=True),
                _call("get_weather", coerced=True),
                _call("add", coerced=True),
                _call("add"),
                _call("add"),
                _call("echo"),
            ],
            termination="failure",
        ),
    ]


def test_flagged_calls_get_their_share_of_the_tool_calls() -> None:
    assert tool_rates(_trajs()) == {
        "tool/add/invalid_arguments_rate": 1 / 4,
        "tool/get_weather/timeout_rate": 1 / 5,
        "tool/add/coerced_rate": 1 / 4,
        "tool/get_weather/coerced_rate": 2 / 5,
        "tool/get_weather/truncated_output_rate": 2 / 5,
    }


def test_step_metrics_keep_their_keys_and_add_the_flag_rates() -> None:
    m = step_metrics(3, _trajs(), torch.tensor([True, True]), {"policy": 0.25}, 2.0, 4.0)
    assert m == {
        "step": 3,
        "rollout/episodes": 2,
        "rollout/success_rate": 0.5,
        "rollout/valid_fraction": 1.0,
        "rollout/policy_tokens": 4,
        "rollout/total_tokens": 6,
        "rollout/tokens_per_s": 2.0,
        "rollout/episodes_per_s": 1.0,
        "rollout/mean_turns": 2.0,
        "reward/total": 1.0,
        "reward/std": 0.0,
        "time/rollout_s": 2.0,
        "time/step_s": 4.0,
        "reward/outcome": 1.0,
        "termination/success": 0.5,
        "termination/failure": 0.5,
        "tool/add/invalid_arguments_rate": 0.25,
        "tool/get_weather/timeout_rate": 0.2,
        "tool/add/coerced_rate": 0.25,
        "tool/get_weather/coerced_rate": 0.4,
        "tool/get_weather/truncated_output_rate": 0.4,
        "tool/parse_error_per_episode": 0.0,
        "loss/policy": 0.25,
    }


def test_records_without_flags_give_no_flag_keys() -> None:
    # tool-call records as rollouts write them today carry no flags: no new keys, same values
    plain = [_traj([_call("add"), _call("add", ok=False, code="timeout")])]
    assert tool_rates(plain) == {"tool/add/timeout_rate": 0.5}
