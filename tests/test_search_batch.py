"""Tree search batched across episodes (``agentrl.planning.search_batch``) on the real engine
plays exactly the episodes the one-episode path plays: the same kept tokens, the same costs,
with and without lookahead, with a scorer that keeps sampled candidates, and with too few
slots for every episode at once."""

from __future__ import annotations

import pytest

from agentrl.chat.render import stop_token_ids
from agentrl.engine.decoder import Engine
from agentrl.envs import make
from agentrl.planning import search_episodes
from agentrl.planning.search_train import search_rollout
from agentrl.rollout import EpisodeSpec

SPECS = [EpisodeSpec(seed=s, level=1 + s % 3) for s in range(4)]


class GoesOn:
    """Weather where an answer is read as a malformed call, so episodes last every turn (the
    tiny model answers at once; the search's later turns, forks and rewinds need more)."""

    def __init__(self) -> None:
        self.env = make("weather", fault_rate=0.0, max_turns=3)

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, text: str):
        return self.env.step(text + "</tool_call>")


def _engine(tiny_policy, slots: int = 64) -> Engine:
    """Turns end at one token in six (the tiny model rarely emits its stop token)."""
    model, tok = tiny_policy
    vocab = model.get_output_embeddings().weight.shape[0]
    stops = stop_token_ids(tok) + [i for i in range(vocab) if i % 6 == 0 or i == 223]
    return Engine(model, tok, stops, tok.pad_token_id, slots=slots)


def _by_length(sequences: list[list[int]]) -> list[float]:
    """A scorer that often prefers a sampled candidate (a stand-in for a critic)."""
    return [float(len(s) % 7) for s in sequences]


@pytest.mark.parametrize(("slots", "k", "depth", "scorer"), [
    (64, 1, 1, None), (64, 3, 1, None), (64, 3, 2, _by_length), (3, 3, 2, _by_length),
    (5, 2, 3, None),
])  # fmt: skip
def test_batched_search_plays_what_one_episode_at_a_time_plays(tiny_policy, slots, k, depth,
                                                               scorer):  # fmt: skip
    engine = _engine(tiny_policy, slots)
    kwargs = {"k": k, "depth": depth, "max_new_tokens": 24, "max_total_tokens": 1400,
              "scorer": scorer}  # fmt: skip
    one, one_cost = search_episodes(engine, GoesOn, SPECS, batched=False, **kwargs)
    done = []
    progress = lambda n, total: done.append((n, total))  # noqa: E731
    many, cost = search_episodes(engine, GoesOn, SPECS, batched=True, on_episode=progress,
                                 **kwargs)  # fmt: skip
    for a, b in zip(one, many, strict=True):
        assert b.token_ids == a.token_ids and b.loss_mask == a.loss_mask
        assert b.turn_of_token == a.turn_of_token and b.messages == a.messages
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
        assert b.info["turns"] == 3 and b.termination == "max_turns"
    assert {**cost.as_dict(), "seconds": 0} == {**one_cost.as_dict(), "seconds": 0}
    assert cost.branches == (0 if k == 1 else k * 3 * len(SPECS))
    assert done == [(n, len(SPECS)) for n in range(1, len(SPECS) + 1)]
    # the greedy turn is one token; the scorer keeps longer, sampled ones (after lookahead)
    assert (cost.episode_tokens > 3 * len(SPECS)) == (scorer is not None)


def test_batched_search_says_when_memory_holds_fewer_slots_than_candidates(tiny_policy):
    engine = _engine(tiny_policy, slots=2)
    with pytest.raises(ValueError, match="K=3 needs 3 KV-cache slots"):
        search_episodes(engine, GoesOn, SPECS, k=3, max_new_tokens=8, max_total_tokens=1400)


@pytest.mark.parametrize(("slots", "k", "depth"), [(64, 2, 1), (64, 3, 2), (4, 3, 2)])
def test_the_training_search_batched_plays_what_it_plays_one_episode_at_a_time(
    tiny_policy, slots, k, depth
):
    """Every candidate sampled (the first too), the siblings numbered by episode and turn."""
    engine = _engine(tiny_policy, slots)
    kwargs = {"k": k, "depth": depth, "max_new_tokens": 24, "max_total_tokens": 1400,
              "temperature": 1.0, "top_p": 0.9, "seed": 11}  # fmt: skip
    one, one_cost = search_rollout(engine, GoesOn, SPECS, batched=False, **kwargs)
    many, cost = search_rollout(engine, GoesOn, SPECS, batched=True, **kwargs)
    assert len(many) == len(one) == len(SPECS) * (1 + 3 * k)  # 3 turns, k siblings each
    for a, b in zip(one, many, strict=True):
        assert b.token_ids == a.token_ids and b.loss_mask == a.loss_mask
        assert b.group_id == a.group_id and b.info == a.info
        assert b.reward.total == pytest.approx(a.reward.total)
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    assert {**cost.as_dict(), "seconds": 0} == {**one_cost.as_dict(), "seconds": 0}
    siblings = many[len(SPECS):]
    assert [t.group_id for t in siblings[::k]] == list(range(-1, -1 - 3 * len(SPECS), -1))
    # sampled, not greedy: the first candidates of a turn are not all one token long
    assert any(t.loss_mask.count(1) > 1 for t in siblings[::k])
    again, _ = search_rollout(engine, GoesOn, SPECS, batched=True, **{**kwargs, "seed": 12})
    assert [t.token_ids for t in again] != [t.token_ids for t in many]
