"""The PPO critic: a value head on the policy's last hidden state, or a separate critic model.

``algo.ppo.critic = "head"``: one linear layer reads the policy's final (post-norm) hidden state,
so the critic costs almost nothing but shares the trunk's gradients with the policy.
``"separate"``: a copy of the starting policy's transformer with its own head, trained with
its own loss only (more memory, no interference).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


class ValueHead(nn.Module):
    """Linear map hidden state -> scalar value, zero-initialized (V = 0 at the start)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, T)."""
        return self.proj(hidden.to(self.proj.weight.dtype)).squeeze(-1)


class Critic(nn.Module):
    """V(s_t) at every position t of a token sequence."""

    def __init__(self, hidden_size: int, backbone: Any | None = None) -> None:
        super().__init__()
        self.head = ValueHead(hidden_size)
        self.backbone = backbone  # a transformer trunk, or None: read the policy's hidden

    @property
    def separate(self) -> bool:
        return self.backbone is not None

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T)
        attention: torch.Tensor,  # (B, T)
        policy_hidden: torch.Tensor | None = None,  # (B, T, H) when sharing the policy's trunk
    ) -> torch.Tensor:  # (B, T)
        if self.backbone is None:
            if policy_hidden is None:
                raise ValueError("a value head needs the policy's hidden states")
            return self.head(policy_hidden)
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention).last_hidden_state
        return self.head(hidden)  # (B, T)


def make_critic(policy: Any, kind: str) -> Critic:
    """A critic for ``policy`` (an HF causal LM): ``head`` or ``separate`` (trunk copied)."""
    hidden = policy.config.hidden_size
    if kind == "head":
        critic = Critic(hidden)
    elif kind in ("separate", "central"):  # central: the same trunk, fed joint team views
        trunk = copy.deepcopy(policy.get_decoder())
        trunk.requires_grad_(True)
        critic = Critic(hidden, trunk)
    else:
        raise ValueError(
            f"config field 'algo.ppo.critic' must be 'head', 'separate' or 'central', got {kind!r}"
        )
    param = next(policy.parameters())
    return critic.to(device=param.device, dtype=torch.float32 if kind == "head" else param.dtype)


def policy_forward(
    model: Any, input_ids: torch.Tensor, attention: torch.Tensor, with_hidden: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits (B, T, V) and, if asked, the last hidden state (B, T, H) of a causal LM."""
    out = model(input_ids=input_ids, attention_mask=attention, output_hidden_states=with_hidden)
    return out.logits, (out.hidden_states[-1] if with_hidden else None)
