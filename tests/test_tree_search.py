"""Tree search (``agentrl.planning.search``) on a scripted policy: the branch that looks
ahead wins over the greedy action, the kept trajectory is token-exact, costs are counted."""

import json
import re

import pytest

from agentrl.chat.render import render_text, stop_token_ids, tokenize
from agentrl.envs import make
from agentrl.planning import search_episodes
from agentrl.policy.generate import Sample
from agentrl.rollout import EpisodeSpec

RESULT = re.compile(r'\{"city": "[^"]+", "temperature_c": -?\d+, "condition": "[^"]+"\}')


class GreedyGuesser:
    """Greedy: answers at once with a guess (fails) unless a weather result is in the prompt,
    then answers from it (succeeds). Sampled: calls get_weather for ``city``."""

    def __init__(self, tokenizer, city: str):
        self.tokenizer, self.city = tokenizer, city
        self.stop = stop_token_ids(tokenizer)[0]
        self.calls: list[tuple[int, bool]] = []  # (batch size, greedy)

    def _turn(self, prompt: list[int], greedy: bool) -> str:
        found = RESULT.findall(self.tokenizer.decode(prompt))
        if found:
            r = json.loads(found[-1])
            return f"It is {r['temperature_c']}°C and {r['condition']} in {r['city']}."
        if greedy:
            return "It is 99°C and sunny."
        call = {"name": "get_weather", "arguments": {"city": self.city}}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"

    def generate(self, prompts, *, max_new_tokens, greedy=False, **kwargs):
        self.calls.append((len(prompts), greedy))
        out = []
        for p in prompts:
            ids = tokenize(self.tokenizer, self._turn(p, greedy)) + [self.stop]
            out.append(Sample(ids, [-0.25] * len(ids), True))
        return out


def _setup(tok, seed=4):
    make_env = lambda: make("weather", fault_rate=0.0)  # noqa: E731
    env = make_env()
    env.reset(seed=seed, options={"level": 1})
    return make_env, GreedyGuesser(tok, env.instance.data["cities"][0])


def test_search_finds_the_call_greedy_decoding_skips(tiny_policy):
    _, tok = tiny_policy
    make_env, gen = _setup(tok)
    spec = [EpisodeSpec(seed=4, level=1)]
    (plain,), plain_cost = search_episodes(gen, make_env, spec, k=1)
    assert plain.termination == "failure" and plain_cost.branch_tokens == 0
    (found,), cost = search_episodes(gen, make_env, spec, k=2, depth=1)
    assert found.termination == "success"
    assert [c["name"] for c in found.tool_calls] == ["get_weather"]
    assert cost.branches == 4  # two turns, two candidates each
    assert cost.branch_tokens > cost.episode_tokens > 0
    # the kept episode is token-exact: it decodes to the dialogue, mask 1 on sampled turns
    text = tok.decode(found.token_ids, skip_special_tokens=False)
    assert text == render_text(tok, found.messages, make_env().tool_schemas).rstrip("\n")
    sampled = [t for t, m in zip(found.token_ids, found.loss_mask, strict=True) if m]
    turns = [m for m in found.messages if m["role"] == "assistant"]
    assert len(sampled) == sum(
        len(tokenize(tok, gen._turn([], False) if "tool_calls" in m else m["content"])) + 1
        for m in turns
    )
    assert set(found.turn_of_token) == {-1, 0, 1}


def test_depth_lets_a_branch_finish_before_it_is_scored(tiny_policy):
    _, tok = tiny_policy
    make_env, gen = _setup(tok)
    (found,), cost = search_episodes(gen, make_env, [EpisodeSpec(seed=4, level=1)], k=2, depth=2)
    assert found.termination == "success"
    # turn 1: 2 candidates + 2 lookahead turns (the guess ended; the call's branch answered)
    assert (1, False) in gen.calls and cost.branches == 4
    with pytest.raises(ValueError, match="k >= 1"):
        search_episodes(gen, make_env, [], k=0)


def test_a_scorer_values_the_branches_that_are_still_running(tiny_policy):
    _, tok = tiny_policy
    make_env, gen = _setup(tok)
    spec = [EpisodeSpec(seed=4, level=1)]
    seen = []

    def pessimist(sequences):  # a running branch (the call) looks worse than a failed answer
        seen.extend(sequences)
        return [-10.0] * len(sequences)

    (traj,), _ = search_episodes(gen, make_env, spec, k=2, depth=1, scorer=pessimist)
    assert traj.termination == "failure" and len(seen) == 1  # the guess was kept
    assert "get_weather" in tok.decode(seen[0])  # what was scored: the branch after its call
    (traj,), _ = search_episodes(gen, make_env, spec, k=2, scorer=lambda s: [5.0] * len(s))
    assert traj.termination == "success"


def test_critic_scorer_reads_a_ppo_runs_critic(tiny_dir, tiny_policy, tmp_path):
    import torch

    from agentrl.algos.value import make_critic, policy_forward
    from agentrl.config import load_config
    from agentrl.planning.value import critic_scorer, critic_values, load_critic

    model, _ = tiny_policy
    run = tmp_path / "ppo_run"
    run.mkdir()
    cfg = load_config(None, ["algo.name=ppo", "algo.ppo.critic=head"])
    (run / "config.yaml").write_text(json.dumps(cfg.model_dump(mode="json")))
    critic = make_critic(model, "head")
    torch.nn.init.normal_(critic.head.proj.weight, std=0.5)
    torch.save(critic.state_dict(), run / "critic.pt")
    score = critic_scorer(run, model)
    ids = [[1, 2, 3, 4], [5, 6]]
    want = []
    for seq in ids:
        x = torch.tensor([seq])
        _, hidden = policy_forward(model, x, torch.ones_like(x), with_hidden=True)
        want.append(float(critic(x, torch.ones_like(x), hidden)[0, -1].detach()))
    assert score(ids) == pytest.approx(want) and want[0] != 0.0
    along = critic_values(load_critic(run, model), model, [1, 2, 3, 4, 5, 6])
    prefixes = score([[1, 2, 3, 4, 5, 6][: i + 1] for i in range(6)])
    assert along == pytest.approx(prefixes, abs=1e-5)  # causal: one pass scores every prefix
    with pytest.raises(FileNotFoundError, match="critic.pt"):
        critic_scorer(tmp_path, model)
