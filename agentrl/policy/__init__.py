"""Policy models: HF loading (local path, hub id, or the local tiny model)."""

from agentrl.policy.loading import load_policy, save_policy

__all__ = ["load_policy", "save_policy"]
