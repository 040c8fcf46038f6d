"""The training wing: ``train(cfg)`` (loop.py) and the components it calls: build.py (things
built once), step.py (one RL step), run.py (run directory, sinks, checkpoints, signals),
sampler.py (uniform or curriculum task sampling), state.py (loop state and checkpoints)."""

from agentrl.train.loop import train

__all__ = ["train"]
