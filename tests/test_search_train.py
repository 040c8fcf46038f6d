"""Tree search as a training rollout (``agentrl.planning.search_train``): episodes plus one
sibling per candidate per turn, token-exact, whose groups give per-turn advantages."""

import json

import pytest
import torch

from agentrl.algos.grpo import compute_advantages
from agentrl.chat.render import stop_token_ids, tokenize
from agentrl.envs import make
from agentrl.planning.search_train import episodes_only, is_sibling, search_rollout
from agentrl.policy.generate import Sample
from agentrl.rollout import EpisodeSpec
from tests.test_tree_search import RESULT


class Coin:
    """Sampled turns: in each batch the first candidate answers with a guess (fails), the
    others call get_weather for ``city``; once a result is in the prompt, every candidate
    answers from it (succeeds)."""

    def __init__(self, tokenizer, city):
        self.tokenizer, self.city = tokenizer, city
        self.stop = stop_token_ids(tokenizer)[0]

    def _text(self, prompt, i):
        found = RESULT.findall(self.tokenizer.decode(prompt))
        if found:
            r = json.loads(found[-1])
            return f"It is {r['temperature_c']}°C and {r['condition']} in {r['city']}."
        if i == 0:
            return "It is 99°C and sunny."
        call = {"name": "get_weather", "arguments": {"city": self.city}}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"

    def generate(self, prompts, *, max_new_tokens, greedy=False, **kwargs):
        out = []
        for i, p in enumerate(prompts):
            ids = tokenize(self.tokenizer, self._text(p, i)) + [self.stop]
            out.append(Sample(ids, [-0.25] * len(ids), True))
        return out


def _rollout(tok, k=2):
    make_env = lambda: make("weather", fault_rate=0.0)  # noqa: E731
    env = make_env()
    env.reset(seed=4, options={"level": 1})
    gen = Coin(tok, env.instance.data["cities"][0])
    gen.tokenizer = tok
    return search_rollout(gen, make_env, [EpisodeSpec(seed=4, level=1, group_id=0)], k=k)


def test_episode_and_siblings_are_token_exact(tiny_policy):
    _, tok = tiny_policy
    trajs, cost = _rollout(tok)
    (episode,) = episodes_only(trajs)
    siblings = [t for t in trajs if is_sibling(t)]
    assert episode.termination == "success" and episode.group_id == 0
    assert [c["name"] for c in episode.tool_calls] == ["get_weather"]
    assert len(siblings) == 4 and cost.branches == 4  # two turns, two candidates each
    assert [s.info["search_turn"] for s in siblings] == [0, 0, 1, 1]
    assert len({s.group_id for s in siblings}) == 2 and all(s.group_id < 0 for s in siblings)
    for s in siblings:
        n_hist = s.loss_mask.index(1)
        # the history is the episode's own ids up to that turn, not trained
        assert s.token_ids[:n_hist] == episode.token_ids[:n_hist]
        assert set(s.loss_mask[:n_hist]) == {0} and set(s.loss_mask[n_hist:]) == {1}
        assert s.logprobs[n_hist:] == [-0.25] * (len(s.token_ids) - n_hist)
        assert set(s.turn_of_token[n_hist:]) == {s.info["search_turn"]}
    # the kept turn-0 candidate (the call) is what the episode played next
    call = max(siblings[:2], key=lambda s: s.reward.total)
    assert episode.token_ids[: len(call.token_ids)] == call.token_ids


def test_sibling_groups_give_the_per_turn_advantage(tiny_policy):
    _, tok = tiny_policy
    trajs, _ = _rollout(tok)
    adv, valid = compute_advantages(trajs, "zero", scale=False)
    siblings = [(t, a) for t, a in zip(trajs, adv.tolist(), strict=True) if is_sibling(t)]
    (guess, a_guess), (call, a_call), (_, a1), (_, a2) = siblings
    assert guess.reward.total < call.reward.total  # the guess ended the episode as a failure
    mean = (guess.reward.total + call.reward.total) / 2
    assert a_call == pytest.approx(call.reward.total - mean)  # a branch minus its siblings' mean
    assert a_guess == pytest.approx(guess.reward.total - mean) and a_guess < 0 < a_call
    assert a1 == a2 == 0.0  # both answered from the result: no preference at turn 1
    assert valid.all()


def test_search_rollout_needs_two_candidates(tiny_policy):
    _, tok = tiny_policy
    with pytest.raises(ValueError, match="k >= 2"):
        _rollout(tok, k=1)


def test_search_rollout_on_the_real_engine_keeps_ids_exact(tiny_policy):
    from agentrl.engine.decoder import Engine

    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    make_env = lambda: make("weather", fault_rate=0.0, max_turns=2)  # noqa: E731
    specs = [EpisodeSpec(seed=s, level=1, group_id=s) for s in (1, 2)]
    torch.manual_seed(0)
    trajs, cost = search_rollout(engine, make_env, specs, k=3, max_new_tokens=8,
                                 max_total_tokens=600)  # fmt: skip
    episodes = episodes_only(trajs)
    siblings = [t for t in trajs if is_sibling(t)]
    assert [e.group_id for e in episodes] == [1, 2]
    assert len(siblings) == 3 * sum(e.info["turns"] for e in episodes)
    for s in siblings:
        episode = episodes[s.info["sibling_of"]]
        n_hist = s.loss_mask.index(1)
        assert s.token_ids[:n_hist] == episode.token_ids[:n_hist]
        assert all(lp <= 0.0 for lp in s.logprobs[n_hist:])
    assert cost.branch_tokens >= cost.episode_tokens > 0


def test_a_training_step_with_search_trains_siblings_and_logs_episodes(tiny_dir, tmp_path,
                                                                       monkeypatch):  # fmt: skip
    from runhelpers import tiny_run_overrides

    import agentrl.train.step as step_module
    from agentrl.config import build_config
    from agentrl.train import train

    seen = []
    real = step_module.compute_advantages

    def spy(trajs, *args, **kwargs):
        adv, valid = real(trajs, *args, **kwargs)
        seen.append((list(trajs), adv))
        return adv, valid

    monkeypatch.setattr(step_module, "compute_advantages", spy)
    run = tmp_path / "run"
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "train.steps=1",
                            "rollout.search_k=2", "algo.minibatches=1"])  # fmt: skip
    train(cfg, progress=False)
    ((trajs, adv),) = seen
    episodes = episodes_only(trajs)
    siblings = [t for t in trajs if is_sibling(t)]
    assert len(episodes) == 2 and len(siblings) == 2 * sum(e.info["turns"] for e in episodes)
    assert len(adv) == len(trajs)
    for group in {s.group_id for s in siblings}:  # each turn's pair is centred on its mean
        pair = [a for t, a in zip(trajs, adv.tolist(), strict=True) if t.group_id == group]
        assert len(pair) == 2 and sum(pair) == pytest.approx(0.0, abs=1e-5)
    (m,) = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert m["rollout/episodes"] == 2 and m["rollout/search_siblings"] == len(siblings)
    logged = (run / "trajectories.jsonl").read_text().splitlines()
    assert len(logged) == 2  # episodes only
