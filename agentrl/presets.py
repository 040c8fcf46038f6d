"""The demo's settings per model: ``agentrl demo`` and ``agentrl demo --model MODEL``.

The tiny model's demo is the config defaults plus dynamic difficulty. A pretrained model gets
the settings measured on SmolLM2-135M-Instruct (``configs/smollm2_weather.yaml`` spells them
out, with how each was chosen): a gentle warm start, full fine-tuning at lr 2e-5 with groups
of 8, a token budget that holds three lookups, uniform levels.
"""

from __future__ import annotations

TINY = "agentrl/tiny"

#: The tiny model's demo = the config defaults plus dynamic difficulty: RL starts on level 1
#: and moves up when the rolling success passes curriculum.promote_above (measured, 30 steps:
#: level 1 went from 0.38 to 0.84 with it, to 0.31 with levels drawn uniformly). 15 steps, not
#: the default 30: held-out success is 0.271 at steps 10, 15, 20 and 25 (0.281 at 30), and 15
#: keep a first run, model build included, inside 15 minutes on 2 cores. fp32 throughout on
#: every machine (bf16 buys a 2.2M-parameter model nothing), so its figures are the same.
TINY_DEMO = ("curriculum.enabled=true", "train.steps=15", "rollout.dtype=float32",
             "train.autocast=off")  # fmt: skip

#: A pretrained instruct model's demo (measured on SmolLM2-135M-Instruct; see
#: configs/smollm2_weather.yaml for how each value was chosen).
PRETRAINED_DEMO = (
    "task.levels=[1,2,3]",
    "task.max_turns=6",
    "rollout.group_size=8",
    "rollout.groups_per_step=4",
    "rollout.temperature=0.8",
    "rollout.max_new_tokens=96",
    "rollout.max_total_tokens=1536",
    "algo.name=grpo",
    "algo.lr=2e-5",
    "algo.kl.coef=0.02",
    "train.steps=20",
    "train.warmstart_demos=64",
    "train.warmstart_epochs=2",
    "train.warmstart_lr=5e-5",
    "train.eval_episodes=96",
    "curriculum.enabled=false",
)


def demo_overrides(model: str) -> list[str]:
    """The demo's config overrides for ``model`` (its ``model.name``)."""
    if model == TINY:
        return list(TINY_DEMO)
    return [f"model.name={model}", *PRETRAINED_DEMO]
