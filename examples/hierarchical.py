"""Hierarchical RL: a manager hands out subgoals, a worker context per subgoal calls the tools.

    python examples/hierarchical.py            # one reference episode's contexts, its rewards
    python examples/hierarchical.py --train    # a short run on the tiny model (a few minutes)
    python examples/hierarchical.py --train --per-role   # the same, a LoRA adapter per role

The first part needs no model: it plays a weather episode (level 2) with the reference solver
in the hierarchical format (what the warm start shows the policy), prints every context, the
subgoal rewards of the workers and the advantages one step would give their rows.
"""

from __future__ import annotations

import argparse

import torch

from agentrl.algos.hierarchical import row_advantages, row_roles, worker_advantages
from agentrl.config import load_config
from agentrl.config.hierarchy import HierarchyConfig
from agentrl.envs import make
from agentrl.planning.hierarchy import Hierarchy


def show_reference_episode(seed: int = 3, level: int = 2) -> None:
    h = Hierarchy(make("weather"), HierarchyConfig())
    h.reset(seed=seed, options={"level": level})
    while (out := h.act(h.reference_action())).kind != "end":
        pass
    for w in h.workers:
        print(f"--- worker: {w['subgoal']} (type {w['type']}, reward {w['reward']:.2f} "
              f"= {w['layers']})")  # fmt: skip
        for m in w["context"].messages[1:]:
            print(f"  {m['role']:9} {m.get('content') or m.get('tool_calls')}")
    print(f"--- manager (episode: {out.termination}, reward {out.reward.total:.2f})")
    for m in h.manager.messages[1:]:
        print(f"  {m['role']:9} {m['content']}")
    # two episodes of one group: this one and a copy whose second worker failed
    from agentrl.types import RewardBreakdown, Segment, Trajectory

    roles = [{k: v for k, v in w.items() if k != "context"} for w in h.workers]
    worse = [dict(r) for r in roles]
    worse[-1]["reward"] = 0.1
    trajs = []
    for r in (roles, worse):
        segments = [Segment([], [], [], [])] * (len(r) + 1)
        trajs.append(Trajectory("t", 0, [], [], [], [], [], RewardBreakdown(), "success",
                                info={"hierarchy": [*r, {"role": "manager"}]},
                                segments=segments))  # fmt: skip
    rr = row_roles(trajs)
    valid = torch.ones(len(rr.worker_key), dtype=torch.bool)
    wadv = worker_advantages(rr.worker_reward, rr.worker_key, valid, scale=False)
    owner = torch.tensor([n for n, r in enumerate((roles, worse)) for _ in range(len(r) + 1)])
    for step in (0, 1):
        adv = row_advantages(torch.tensor([0.5, -0.5]), owner, rr.is_manager, wadv,
                             manager_on=step % 2 == 0)  # fmt: skip
        print(
            f"step {step} row advantages (workers..., manager) x 2: "
            f"{[round(a, 3) for a in adv.tolist()]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="a short run on the tiny model")
    parser.add_argument(
        "--per-role", action="store_true", help="with --train: a LoRA adapter for each role"
    )
    args = parser.parse_args()
    show_reference_episode()
    if args.train:
        from agentrl.train import train

        per_role = ["lora.enabled=true", "rollout.hierarchy.adapters=per_role"]
        cfg = load_config("configs/weather_hierarchical.yaml", [
            "train.steps=2", "train.warmstart_demos=24", "train.eval_episodes=24",
            "rollout.groups_per_step=2", "train.run_dir=runs/example_hierarchical",
            *(per_role if args.per_role else [])])  # fmt: skip
        summary = train(cfg)
        print(f"held-out success {summary['success_before']:.3f} -> "
              f"{summary['success_after']:.3f} ({summary['run_dir']})")  # fmt: skip


if __name__ == "__main__":
    main()
