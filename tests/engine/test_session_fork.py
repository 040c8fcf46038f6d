"""``DecodeSession.fork`` and ``rewind`` (what batched tree search stands on): a fork copies
its source's cache and decodes what a fresh sequence with the whole history decodes, while
computing only the tokens its source had not fed; a rewound sequence forgets the turns after
the point it is rewound to."""

from __future__ import annotations

import pytest

from agentrl.chat.render import encode_prompt, stop_token_ids, tokenize
from agentrl.engine.decoder import Engine
from agentrl.envs import make

GREEDY = (True, 1.0, 1.0)


def _prompt(tok) -> list[int]:
    env = make("weather")
    msgs, _ = env.reset(seed=3, options={"level": 2})
    return encode_prompt(tok, msgs, env.tool_schemas)


def _turn(sess, key) -> list[int]:
    """Step until ``key``'s turn ends; its ids."""
    while True:
        for k, sample in sess.step():
            if k == key:
                return sample.ids


def _fresh(engine, ids: list[int], max_new: int) -> list[int]:
    (sample,) = engine.generate([ids], max_new_tokens=max_new, greedy=True)
    return sample.ids


def test_a_fork_decodes_the_whole_history_but_prefills_only_the_unfed_delta(tiny_policy):
    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id, share_prefix=False)
    prompt, delta = _prompt(tok), tokenize(tok, "\nThe weather tool answered: 21C, rain.\n")
    sess = engine.session(3, 1200, greedy=True)
    sess.add("a", prompt, 12, None)
    first = _turn(sess, "a")
    sess.extend("a", delta, 12)
    cached = sess.cached("a")
    assert cached == len(prompt) + len(first) - 1  # the turn's last token is not fed yet
    before = sess.stats["prefill_tokens"]
    sess.fork("b", "a", 12, seed=5, sampling=(False, 1.0, 1.0))
    sess.fork("c", "a", 12, seed=None, sampling=GREEDY)
    ends = {}
    while len(ends) < 3:
        ends.update({k: s.ids for k, s in sess.step()})
    # a, b and c each fed only the last sampled token and the delta
    assert sess.stats["prefill_tokens"] - before == 3 * (1 + len(delta))
    history = prompt + first + delta
    assert ends["a"] == ends["c"] == _fresh(engine, history, 12)
    assert ends["b"] != ends["a"]  # sampled, from the same cached history


def test_rewind_forgets_the_lookahead_and_a_new_delta_continues_from_there(tiny_policy):
    model, tok = tiny_policy
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id, share_prefix=False)
    prompt = _prompt(tok)
    look, kept = tokenize(tok, "\nlookahead result\n"), tokenize(tok, "\nkept result: 7\n")
    sess = engine.session(1, 1200, greedy=True)
    sess.add("a", prompt, 10, None)
    first = _turn(sess, "a")
    at_first = sess.cached("a")
    sess.extend("a", look, 10)
    with pytest.raises(ValueError, match="cannot be rewound"):  # mid-turn
        sess.rewind("a", at_first, first[-1:])
    _turn(sess, "a")
    with pytest.raises(ValueError, match="cannot be rewound"):  # past what is cached
        sess.rewind("a", sess.cached("a") + 1, [])
    sess.rewind("a", at_first, first[-1:])
    sess.extend("a", kept, 10)
    again = _turn(sess, "a")
    assert again == _fresh(engine, prompt + first + kept, 10)
