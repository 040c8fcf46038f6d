"""The engine's contract: greedy equals ``model.generate``; recorded log-probs equal a fresh
forward over multi-turn sequences; each new turn computes only its delta; a sequence samples
the same tokens whatever batch it shares; the slots are refilled."""

from __future__ import annotations

import torch

from agentrl.chat.render import encode_prompt, stop_token_ids, tokenize
from agentrl.engine.decoder import Engine
from agentrl.envs import make
from agentrl.policy.generate import HFGenerator


def _prompts(tok, n: int) -> list[list[int]]:
    out = []
    for s in range(n):
        env = make("weather")
        msgs, _ = env.reset(seed=s, options={"level": 1 + s % 3})
        out.append(encode_prompt(tok, msgs, env.tool_schemas))
    return out


def _fresh_logprobs(model, ids: list[int], at: list[int], temperature: float) -> torch.Tensor:
    """Log-probs of ``ids[t]`` for t in ``at`` under one plain forward."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return torch.stack([logp[t - 1, ids[t]] for t in at])


def test_greedy_equals_model_generate(tiny_policy):
    model, tok = tiny_policy
    prompts = _prompts(tok, 5)
    prompts[1] = prompts[1] + prompts[1][-17:]  # rows of different lengths
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    hf = HFGenerator(model, tok, stop_token_ids(tok), tok.pad_token_id, share_prefix=False)
    ours = engine.generate(prompts, max_new_tokens=20, greedy=True)
    theirs = hf.generate(prompts, max_new_tokens=20, greedy=True)
    assert [s.ids for s in ours] == [s.ids for s in theirs]
    assert [s.stopped for s in ours] == [s.stopped for s in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_multi_turn_logprobs_equal_a_fresh_forward_and_only_deltas_are_computed(tiny_policy):
    """Three sequences, four turns each; between turns a tool call and its tool response are
    appended (as the rollout does); sampled at temperature 0.7 with a slot cache of 2."""
    model, tok = tiny_policy
    prompts = _prompts(tok, 3)
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id, slots=2)
    sess = engine.session(3, 900, temperature=0.7)
    shared = engine.shared_prefix(prompts)
    assert shared >= 32
    sess.set_prefix(prompts[0][:shared])
    seqs = {i: list(p) for i, p in enumerate(prompts)}
    sampled: dict[int, list[int]] = {i: [] for i in seqs}  # positions of sampled tokens
    recorded: dict[int, list[float]] = {i: [] for i in seqs}
    for i, p in enumerate(prompts):
        sess.add(i, p, 6, seed=100 + i)
    delta = tokenize(tok, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}'
                     '\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n'
                     '{"city": "Oslo", "temperature_c": -3}\n</tool_response><|im_end|>\n'
                     '<|im_start|>assistant\n')  # fmt: skip
    turns = dict.fromkeys(seqs, 0)
    expected_prefill = sum(len(p) - shared for p in prompts)
    while sess.busy:
        for i, sample in sess.step():
            sampled[i] += range(len(seqs[i]), len(seqs[i]) + len(sample.ids))
            seqs[i] += sample.ids
            recorded[i] += sample.logprobs
            turns[i] += 1
            if turns[i] == 4:
                sess.release(i)
            else:
                expected_prefill += 1 + len(delta)  # the turn's last sampled id, then the delta
                seqs[i] += delta
                sess.extend(i, delta, 6)
    assert turns == {0: 4, 1: 4, 2: 4}
    assert sess.stats["prefill_tokens"] == expected_prefill  # no history was computed again
    for i, ids in seqs.items():
        fresh = _fresh_logprobs(model, ids, sampled[i], temperature=0.7)
        assert torch.allclose(fresh, torch.tensor(recorded[i]), atol=1e-4), i


def test_a_sequence_samples_the_same_tokens_alone_or_in_a_batch(tiny_policy):
    model, tok = tiny_policy
    prompts = _prompts(tok, 4)
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)

    def run(indices: list[int]) -> dict[int, list[int]]:
        sess = engine.session(len(indices), 700, temperature=1.0)
        for i in indices:
            sess.add(i, prompts[i], 16, seed=7 + i)
        out = {}
        while sess.busy:
            for key, sample in sess.step():
                out[key] = sample.ids
                sess.release(key)
        return out

    together = run([0, 1, 2, 3])
    assert {i: run([i])[i] for i in range(4)} == together
    assert len({tuple(v) for v in together.values()}) > 1  # real sampling, not one constant


def test_slots_are_refilled_and_every_sequence_finishes(tiny_policy):
    model, tok = tiny_policy
    prompts = _prompts(tok, 7)
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id, slots=3)
    sess = engine.session(7, 700, temperature=1.0)
    assert len(sess.slots) == 3
    for i, p in enumerate(prompts):
        sess.add(i, p, 3 + i, seed=40 + i)
    occupancy, waiting, finished, steps = [], [], {}, 0
    while sess.busy:
        ended = sess.step()
        steps += 1
        occupancy.append(sum(s is not None for s in sess.slots))
        waiting.append(len(sess.queue))
        for key, sample in ended:
            finished[key] = sample
            sess.release(key)
    assert sorted(finished) == list(range(7))
    # full while sequences still wait: every freed slot was refilled at the next step
    assert waiting[0] == 4 and waiting[-1] == 0
    assert all(n == 3 for n, w in zip(occupancy, waiting, strict=True) if w > 0)
    assert steps < sum(len(s.ids) for s in finished.values())  # rows decoded together
    for i in range(7):  # what each sequence sampled does not depend on the slots it shared
        alone = engine.session(1, 700, temperature=1.0)
        alone.add(i, prompts[i], 3 + i, seed=40 + i)
        got = []
        while alone.busy:
            got += [s.ids for _, s in alone.step()]
        assert got == [finished[i].ids]
