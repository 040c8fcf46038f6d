"""Config overrides shared by the tests that train the tiny fixture model for a few steps."""

from __future__ import annotations

from pathlib import Path


def assistant_turns(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The runs of loss-mask 1 of an episode: each assistant turn's ids, its stop included."""
    turns, current = [], []
    for t, m in zip(ids, mask, strict=True):
        if m:
            current.append(t)
        elif current:
            turns.append(current)
            current = []
    return turns + ([current] if current else [])


def tiny_run_overrides(tiny_dir: Path, run: Path) -> list[str]:
    """The smallest weather run: no warm start or evaluation, one group of 2, short turns.

    ``max_total_tokens`` leaves room after the weather prompt (~400 tokens with the tiny
    tokenizer) for a few generated tokens.
    """
    return [
        f"model.name={tiny_dir}",
        f"train.run_dir={run}",
        "train.eval_episodes=0",
        "train.warmstart_demos=0",
        "task.max_turns=2",
        "rollout.group_size=2",
        "rollout.groups_per_step=1",
        "rollout.max_new_tokens=6",
        "rollout.max_total_tokens=480",
    ]


class ToolCallingGenerator:
    """The real generator, except that a first turn whose first sampled id is even becomes a
    ``get_weather`` call for the first city the prompt names.

    The fixture model never writes a parsable tool call on its own; this wrapper gives runs
    episodes that call tools while every token still comes from the real sampling path (the
    coin is the model's own sampled token, so it follows the weights and the RNG state). The
    forced call's log-probs are the model's own, from a forward pass, as a sampler's would be.
    """

    supports_sessions = False  # turn by turn through ``generate`` (the rollout's TurnSession)

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):  # tokenizer, stop_ids, device, ...
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        if name == "inner":
            object.__setattr__(self, name, value)
        else:  # e.g. ``generator.model = policy``: the inner generator samples with it
            setattr(self.inner, name, value)

    def generate(self, prompts, **kwargs):
        import torch

        from agentrl.chat.render import tokenize
        from agentrl.envs.tasks.weather import CITIES
        from agentrl.policy.generate import Sample
        from agentrl.policy.logprobs import token_logprobs

        samples = self.inner.generate(prompts, **kwargs)
        tok, model = self.inner.tokenizer, self.inner.model
        out = []
        for prompt, sample in zip(prompts, samples, strict=True):
            text = tok.decode(prompt)
            first_turn = text.count("<|im_start|>assistant") == 1
            city = next((c for c in CITIES if c in text.split("<|im_start|>user")[-1]), None)
            if not (first_turn and city and sample.ids and sample.ids[0] % 2 == 0):
                out.append(sample)
                continue
            call = f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}'
            ids = tokenize(tok, call + "\n</tool_call>") + [self.inner.stop_ids[0]]
            with torch.no_grad():
                seq = torch.tensor([prompt + ids])  # (1, P + N)
                logits = model(input_ids=seq).logits[:, len(prompt) - 1 : -1]  # (1, N, V)
                temp = 1.0 if kwargs.get("greedy") else kwargs.get("temperature", 1.0)
                lps = token_logprobs(logits, torch.tensor([ids]), temp)[0].tolist()
            out.append(Sample(ids, lps, True))
        return out


def use_tool_calling_generator(module) -> None:
    """Wrap the generator ``module.load_generator`` (``agentrl.train.loop``) returns."""
    real = module.load_generator

    def load(cfg):
        model, tok, generator, device = real(cfg)
        return model, tok, ToolCallingGenerator(generator), device

    module.load_generator = load
