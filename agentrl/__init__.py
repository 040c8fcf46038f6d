"""agentrl: train tool-using LLM agents with reinforcement learning (GRPO)."""

__version__ = "0.1.0"
