"""Mixture-of-Experts routing during RL: the load-balancing auxiliary loss over the policy
tokens only, and the routing metrics (expert shares, router entropy).

A transformers MoE model (Qwen2-MoE, Qwen3-MoE, Mixtral, OLMoE, ...) names its router module
in ``_can_record_outputs["router_logits"]``; ``RouterCapture`` hooks those modules during the
policy's forward and keeps each layer's router logits (N, E), one row per input position, in
the autograd graph. transformers' own ``load_balancing_loss_func`` averages over every
non-padding token (prompts and tool outputs included); here only the positions the RL loss
scores count: position t of the forward whose hidden state predicts a policy token
(``batch.mask[:, t]`` > 0). A dense model has no router: nothing is hooked, nothing added.

Loss (Switch Transformer eq. 4, Mixtral), per layer, then averaged over layers::

    f_e = (top-k slots of the masked tokens routed to e) / (N_masked * k)   # sums to 1
    P_e = mean softmax probability of e over the masked tokens               # sums to 1
    aux = E * sum_e f_e * P_e                                                # 1 when balanced

The gradient flows through P (f is a count). Metrics: ``moe/expert_share/<layer>/<e>`` (the
fraction of policy tokens with e among their top-k: sums to k per layer),
``moe/router_entropy/<layer>`` (nats), ``moe/aux_loss``, and ``moe/collapse_share`` (the
largest share of policy tokens any one expert gets as first choice, over layers; logged with
4 or more experts, where one above 0.75 is a collapse: the ``moe_collapse`` alert).
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Any

import torch

from agentrl.algos.batch import Batch
from agentrl.policy.prefix import hf_model

#: Experts a router needs before ``moe/collapse_share`` is logged (with 2, 0.5 is balance).
COLLAPSE_MIN_EXPERTS = 4


def load_balancing_loss(
    router_logits: list[torch.Tensor], mask: torch.Tensor, top_k: int
) -> torch.Tensor:
    """Switch/Mixtral load-balancing loss over the masked positions, averaged over layers.

    ``router_logits``: one (N, E) tensor per layer; ``mask`` (N,): 1 where a position counts.
    Balanced routing gives 1, everything on k experts gives E/k. No masked position: 0.
    """
    keep = mask.reshape(-1) > 0  # (N,)
    n = int(keep.sum())
    if n == 0 or not router_logits:
        return router_logits[0].new_zeros(()) if router_logits else torch.zeros(())
    terms = []
    for logits in router_logits:
        probs = torch.softmax(logits[keep].float(), dim=-1)  # (n, E)
        experts = probs.shape[-1]
        chosen = probs.topk(top_k, dim=-1).indices  # (n, k)
        counts = torch.zeros(experts, device=probs.device).index_add_(
            0, chosen.reshape(-1), torch.ones(n * top_k, device=probs.device)
        )  # (E,)
        f = counts / (n * top_k)  # (E,) share of the top-k slots
        p = probs.mean(dim=0)  # (E,) mean router probability
        terms.append(experts * (f * p).sum())
    return torch.stack(terms).mean()


def routing_stats(
    router_logits: list[torch.Tensor], mask: torch.Tensor, top_k: int, layers: list[int]
) -> dict[str, float]:
    """Routing metrics of the masked positions: per-layer expert shares (top-k counted) and
    router entropy, and ``moe/collapse_share`` with >= ``COLLAPSE_MIN_EXPERTS`` experts.

    ``router_logits``: (N, E) per layer; ``mask`` (N,); ``layers``: each tensor's layer index.
    """
    keep = mask.reshape(-1) > 0  # (N,)
    n = int(keep.sum())
    out: dict[str, float] = {}
    if n == 0:
        return out
    top1 = []
    with torch.no_grad():
        for layer, logits in zip(layers, router_logits, strict=True):
            probs = torch.softmax(logits[keep].float(), dim=-1)  # (n, E)
            experts = probs.shape[-1]
            chosen = probs.topk(top_k, dim=-1).indices  # (n, k)
            hits = torch.zeros(n, experts).scatter_(1, chosen.cpu(), 1.0)  # (n, E)
            for e, share in enumerate(hits.mean(dim=0).tolist()):
                out[f"moe/expert_share/{layer}/{e}"] = share
            entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1)  # (n,)
            out[f"moe/router_entropy/{layer}"] = float(entropy.mean())
            first = torch.bincount(chosen[:, 0].cpu(), minlength=experts).float() / n  # (E,)
            if experts >= COLLAPSE_MIN_EXPERTS:
                top1.append(float(first.max()))
    if top1:
        out["moe/collapse_share"] = max(top1)
    return out


def routed_mask(mask: torch.Tensor, width: int, rows_seen: int) -> torch.Tensor:
    """(B * T',) 1 where a captured router row is a scored position.

    ``mask`` (B, T-1): target t is scored, so input position t counts. ``width`` = T. The
    forward saw the last T' = ``rows_seen`` / B positions of each row (a shared prompt prefix,
    which carries no loss, is computed once and left out)."""
    b = mask.shape[0]
    if rows_seen % b:
        raise ValueError(f"router rows {rows_seen} are not a multiple of the batch size {b}")
    seen = rows_seen // b
    full = torch.cat([mask, mask.new_zeros(b, 1)], dim=1)  # (B, T): no target after T-1
    return full[:, width - seen :].reshape(-1)  # (B * T',)


class RouterCapture:
    """Hooks a MoE model's router modules; ``with capture:`` records the router logits of the
    forwards run inside it (this thread only), one (N, E) tensor per layer and forward."""

    def __init__(self, routers: list[tuple[int, torch.nn.Module]], index: int, top_k: int):
        self.layers = [layer for layer, _ in routers]
        self.modules = [m for _, m in routers]
        self.index, self.top_k = index, top_k
        self.logits: list[torch.Tensor] = []
        self._handles: list[Any] = []
        self._thread = 0

    def __enter__(self) -> RouterCapture:
        self.logits, self._thread = [], threading.get_ident()
        self._handles = [m.register_forward_hook(self._hook) for m in self.modules]
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _hook(self, _module, _inputs, output) -> None:
        if threading.get_ident() != self._thread:
            return  # another thread's forward (a decoding worker) is not this loss's
        out = output[self.index] if isinstance(output, tuple | list) else output
        self.logits.append(out.reshape(-1, out.shape[-1]))  # (N, E)

    def last_forward(self) -> list[torch.Tensor]:
        """The router logits of the last forward: one (N, E) per layer (a shared-prefix
        forward runs every layer twice, the prefix first)."""
        n = len(self.modules)
        if len(self.logits) < n:
            raise RuntimeError(f"captured {len(self.logits)} router outputs, expected {n}")
        return self.logits[-n:]

    def term(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """(aux loss, routing metrics incl. ``moe/aux_loss``) of the last forward on ``batch``."""
        logits = self.last_forward()
        self.logits = []  # the graph's tensors are not held past this loss
        mask = routed_mask(batch.mask, batch.input_ids.shape[1], logits[0].shape[0])
        mask = mask.to(logits[0].device)
        aux = load_balancing_loss(logits, mask, self.top_k)
        stats = routing_stats(logits, mask, self.top_k, self.layers)
        return aux, {**stats, "moe/aux_loss": float(aux.detach())}


def router_capture(model: Any) -> RouterCapture | None:
    """A ``RouterCapture`` for ``model`` (plain or peft-wrapped), or None for a dense model."""
    hf = hf_model(model)
    spec = (getattr(hf, "_can_record_outputs", None) or {}).get("router_logits")
    config = getattr(hf, "config", None)
    top_k = getattr(config, "num_experts_per_tok", None) if config is not None else None
    if spec is None or top_k is None:
        return None
    target = getattr(spec, "target_class", None)
    name = getattr(spec, "class_name", None)
    routers = []
    for qualified, module in model.named_modules():
        if (target is not None and isinstance(module, target)) or (
            name and type(module).__name__.endswith(name)
        ):
            found = re.search(r"layers\.(\d+)\.", qualified)
            routers.append((int(found.group(1)) if found else len(routers), module))
    if not routers:
        return None
    return RouterCapture(routers, int(getattr(spec, "index", 0) or 0), int(top_k))


def capturing(capture: RouterCapture | None) -> Any:
    """``capture`` itself as a context manager, or a no-op one for a dense model."""
    return capture if capture is not None else contextlib.nullcontext()


def add_aux_loss(
    capture: RouterCapture | None, batch: Batch, loss: torch.Tensor, coef: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """``loss + coef * aux`` and the routing metrics of the forward ``capture`` recorded;
    ``loss`` itself (the same tensor) and no metrics for a dense model; with ``coef`` 0 the
    loss is left as it is and only the metrics are added."""
    if capture is None:
        return loss, {}
    aux, stats = capture.term(batch)
    return (loss + coef * aux if coef > 0 else loss), stats
