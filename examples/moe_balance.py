"""A Mixture-of-Experts policy under RL: the tiny model upcycled to 4 experts (top-2), its
routing on a weather prompt, and two GRPO steps with the router load-balancing loss.

    python examples/moe_balance.py                       # the default tiny MoE (built once)
    python examples/moe_balance.py --coef 0 --steps 1    # no balancing term: metrics only

The same run from the command line:
``agentrl train configs/weather_grpo.yaml --set model.name=agentrl/tiny-moe --set
algo.moe_aux_coef=0.05``. Any transformers MoE model whose router logits transformers can
record (Qwen2-MoE, Qwen3-MoE, Mixtral, OLMoE, ...) trains the same way by ``model.name``;
``algo.moe_aux_coef`` has no effect on a dense model.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from agentrl.algos.moe import router_capture, routing_stats
from agentrl.chat.render import encode_prompt
from agentrl.config import build_config
from agentrl.envs import make
from agentrl.monitor.metrics import read_jsonl
from agentrl.policy.loading import load_policy
from agentrl.tiny.moe import TINY_MOE_ID, build_tiny_moe
from agentrl.train import train


def show_routing(model_dir: str) -> None:
    """Route one weather prompt through the MoE and print each layer's expert shares."""
    model, tok = load_policy(model_dir)
    env = make("weather")
    messages, _ = env.reset(seed=3, options={"level": 2})
    ids = torch.tensor([encode_prompt(tok, messages, env.tool_schemas)])  # (1, T)
    capture = router_capture(model)
    with torch.no_grad(), capture:
        model(input_ids=ids)
    logits = capture.last_forward()  # one (T, 4) tensor per layer
    stats = routing_stats(logits, torch.ones(ids.shape[1]), capture.top_k, capture.layers)
    print(f"{type(model).__name__}: {ids.shape[1]} prompt tokens, top-{capture.top_k} of "
          f"{logits[0].shape[1]} experts")  # fmt: skip
    for layer in capture.layers:
        shares = [stats[f"moe/expert_share/{layer}/{e}"] for e in range(logits[0].shape[1])]
        print(f"  layer {layer}: shares {[round(s, 2) for s in shares]}  router entropy "
              f"{stats[f'moe/router_entropy/{layer}']:.3f} nats")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=TINY_MOE_ID, help="a MoE model id or directory")
    ap.add_argument("--coef", type=float, default=0.05, help="algo.moe_aux_coef")
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args()
    model_dir = str(build_tiny_moe()) if args.model == TINY_MOE_ID else args.model
    show_routing(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cfg = build_config({}, [
            f"model.name={model_dir}", f"train.run_dir={run}", f"train.steps={args.steps}",
            f"algo.moe_aux_coef={args.coef}", "train.eval_episodes=0", "train.warmstart_demos=0",
            "train.save_model=false", "rollout.group_size=4", "rollout.groups_per_step=2",
            "rollout.max_new_tokens=48", "rollout.max_total_tokens=768", "task.max_turns=4",
        ])  # fmt: skip
        train(cfg, progress=False)
        for m in read_jsonl(run / "metrics.jsonl"):
            layers = sorted({k.split("/")[2] for k in m if k.startswith("moe/router_entropy/")})
            top = max(v for k, v in m.items() if k.startswith("moe/expert_share/"))
            entropy = [round(m[f"moe/router_entropy/{la}"], 3) for la in layers]
            print(f"GRPO step {m['step']}: reward {m['reward/total']:.2f}, moe/aux_loss "
                  f"{m['moe/aux_loss']:.4f}, largest expert share {top:.2f}, router entropy "
                  f"per layer {entropy}")  # fmt: skip


if __name__ == "__main__":
    main()
