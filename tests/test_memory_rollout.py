"""Episodes played with hierarchical memory: every segment is token-exact (DESIGN contract
1 per segment), with a scripted policy and with the tiny model on the engine."""

import copy
import json

import pytest
import torch

from agentrl.algos.forward import forward_logprobs
from agentrl.algos.segments import broadcast_to_rows, segment_batch
from agentrl.chat.render import encode_prompt, render_text, stop_token_ids, tokenize
from agentrl.config.memory import MemoryConfig
from agentrl.engine.decoder import Engine
from agentrl.envs import make
from agentrl.envs.tasks.weather import CITIES
from agentrl.memory.demos import memory_rows
from agentrl.policy.generate import Sample
from agentrl.rollout import EpisodeSpec, run_episodes
from agentrl.types import RewardBreakdown

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'


class LongScript:
    """``calls`` get_weather turns over CITIES, then an answer; records every prompt."""

    def __init__(self, tokenizer, calls: int):
        self.tokenizer, self.calls = tokenizer, calls
        self.stop = stop_token_ids(tokenizer)[0]
        self.seen: list[list[int]] = []
        self.produced: list[list[int]] = []

    def generate(self, prompts, **kwargs):
        turn = len(self.seen)
        text = CALL % CITIES[turn] if turn < self.calls else "Done."
        ids = tokenize(self.tokenizer, text) + [self.stop]
        self.seen.append(copy.deepcopy(prompts[0]))
        self.produced.append(ids)
        return [Sample(list(ids), [-0.25] * len(ids), True) for _ in prompts]


def play(tok, memory, calls=12):
    gen = LongScript(tok, calls)
    env_fn = lambda: make("weather", fault_rate=0.0, max_turns=40)  # noqa: E731
    traj = run_episodes(gen, env_fn, [EpisodeSpec(seed=3, level=1)], max_total_tokens=4096,
                        memory=memory)[0]  # fmt: skip
    return gen, traj


@pytest.mark.parametrize("every,n_segments", [(1, 10), (2, 5)])
def test_scripted_long_episode_segments_are_token_exact(tiny_policy, every, n_segments):
    _, tok = tiny_policy
    cfg = MemoryConfig(enabled=True, hot_turns=3, warm_turns=4, cold_top_k=1, rewrite_every=every)
    gen, traj = play(tok, cfg)
    assert traj.info["turns"] == 13 and traj.termination == "failure"
    segs = traj.contexts()
    # every=1: turns 0-3 in one context, then a rewrite before each of turns 4-12;
    # every=2: rewrites before turns 5, 7, 9 and 11 (the window grows from 3 to 4 turns)
    assert len(segs) == n_segments
    assert traj.token_ids == segs[-1].token_ids
    assert traj.to_record()["num_segments"] == n_segments
    env = make("weather", fault_rate=0.0, max_turns=40)
    tools = env.tool_schemas
    turn = 0
    for k, seg in enumerate(segs):
        # the ids decode to the chat template's rendering of the segment's messages
        text = render_text(tok, seg.messages, tools)
        assert tok.decode(seg.token_ids, skip_special_tokens=False) == text.rstrip("\n")
        prompt_end = seg.loss_mask.index(1)
        if k > 0:  # a rewritten context starts from the memory's view, encoded whole
            assert seg.messages[2]["content"].startswith("[memory]")
            n_turns = len(set(x for x in seg.turn_of_token if x >= 0))
            view = seg.messages[: len(seg.messages) - 2 * n_turns + 1]
            assert seg.token_ids[:prompt_end] == encode_prompt(tok, view, tools)
        # every prompt the policy saw in this context is a prefix of its ids, and the ids it
        # produced follow with mask 1 and their log-probs
        for t in sorted(set(x for x in seg.turn_of_token if x >= 0)):
            seen, produced = gen.seen[t], gen.produced[t]
            assert t == turn
            turn += 1
            assert seg.token_ids[: len(seen)] == seen
            span = slice(len(seen), len(seen) + len(produced))
            assert seg.token_ids[span] == produced and seg.loss_mask[span] == [1] * len(produced)
            assert seg.logprobs[span] == [-0.25] * len(produced)
    assert turn == 13  # every turn the policy played is in exactly one segment
    if every > 1:
        return
    # the prompt stays flat: the last turns' prompts are within 1.2x of the 5th turn's
    lengths = [len(s) for s in gen.seen]
    assert max(lengths[4:]) <= 1.2 * lengths[4]
    assert lengths[-1] < 0.7 * len(play(tok, None)[0].seen[-1])  # full history: far longer
    # warm records in the last prompt carry the key values of their turns
    note = segs[-1].messages[2]["content"]
    for call in traj.tool_calls[5:9]:  # turns 5-8 are warm at the last turn (hot: 9-11)
        temp = json.loads(call["content"])["temperature_c"]
        assert f"t{call['turn']} get_weather(city={call['arguments']['city']}) ok: " \
               f"temperature_c={temp}" in note  # fmt: skip


@pytest.mark.parametrize("every", [1, 2])
def test_memory_demonstrations_are_the_rollouts_own_contexts(tiny_policy, every):
    """A warm-start demonstration cut by ``memory_rows`` is, context by context, the ids and
    loss mask the rollout stores when it plays the same turns with the same memory."""
    _, tok = tiny_policy
    cfg = MemoryConfig(enabled=True, hot_turns=3, warm_turns=4, cold_top_k=1, rewrite_every=every)
    _, traj = play(tok, cfg)
    tools = make("weather", fault_rate=0.0, max_turns=40).tool_schemas
    rows = memory_rows(tok, traj.messages, tools, cfg)
    segs = traj.contexts()
    assert len(rows) == len(segs) > 1
    for (ids, mask), seg in zip(rows, segs, strict=True):
        assert ids == seg.token_ids
        assert mask == seg.loss_mask
    # each of the 13 assistant turns is trained in exactly one context
    assert sum(m.count(1) for _, m in rows) == sum(s.loss_mask.count(1) for s in segs)
    # memory off: one row, the whole conversation
    plain = memory_rows(tok, traj.messages, tools, MemoryConfig(enabled=True, hot_turns=20))
    assert len(plain) == 1


def test_memory_off_is_the_plain_rollout(tiny_policy):
    _, tok = tiny_policy
    _, plain = play(tok, None, calls=6)
    _, off = play(tok, MemoryConfig(enabled=False), calls=6)
    assert off.segments == [] and plain.segments == []
    assert off.token_ids == plain.token_ids and off.loss_mask == plain.loss_mask
    assert off.to_record() == plain.to_record() and "num_segments" not in off.to_record()


class CountEnv:
    """Every turn answers with a counter, whatever the model says; ends at max_turns."""

    tool_schemas = [{"type": "function", "function": {
        "name": "count", "description": "Count.", "parameters": {"type": "object",
                                                                 "properties": {}}}}]  # fmt: skip
    max_turns = 5

    def reset(self, seed=None, options=None):
        self.messages = [{"role": "system", "content": "Count."},
                         {"role": "user", "content": "Count to five."}]  # fmt: skip
        self.turn = 0
        return [dict(m) for m in self.messages], {"task_id": f"count-{seed}"}

    def step(self, text):
        self.turn += 1
        obs = [{"role": "tool", "name": "count", "content": json.dumps({"n": self.turn})}]
        self.messages += [{"role": "assistant", "content": text}, *obs]
        info = {"turn": self.turn, "tool_calls": [], "parse_errors": []}
        if self.turn >= self.max_turns:
            info.update(termination="max_turns", reward=self.finish("max_turns"))
            return obs, 0.0, False, True, info
        return obs, 0.0, False, False, info

    def finish(self, reason):
        return RewardBreakdown({"r": 0.0}, {"r": 1.0})


class StopsEveryTurn:
    """The engine, with every turn ending at its token budget counted as stopped (the tiny
    model rarely stops by itself): the last sampled id stands in for the stop token."""

    supports_sessions = True

    def __init__(self, engine):
        self.engine, self.tokenizer = engine, engine.tokenizer

    def shared_prefix(self, prompts):
        return self.engine.shared_prefix(prompts)

    def session(self, *args, **kwargs):
        sess = self.engine.session(*args, **kwargs)
        step = sess.step
        sess.step = lambda: [(k, Sample(s.ids, s.logprobs, True)) for k, s in step()]
        return sess


def test_tiny_model_memory_rollout_logprobs_match_training_forward(tiny_policy):
    """Sampling on the engine with memory, then a training forward over every segment row,
    gives the rollout's log-probs: each segment's ids are exactly what the model saw."""
    model, tok = tiny_policy
    torch.manual_seed(0)
    gen = StopsEveryTurn(Engine(model, tok, stop_token_ids(tok), tok.pad_token_id))
    mem = MemoryConfig(enabled=True, hot_turns=1, warm_turns=1, cold_top_k=1)
    trajs = run_episodes(gen, CountEnv, [EpisodeSpec(seed=s, level=1) for s in range(2)],
                         max_new_tokens=12, max_total_tokens=700, memory=mem)  # fmt: skip
    for t in trajs:
        assert t.termination == "max_turns" and len(t.segments) == 4  # rewrites before 2-4
        assert 5 <= t.num_policy_tokens <= 5 * 12  # a turn ends at a stop or at 12 tokens
        note = t.segments[-1].messages[2]["content"]
        assert note.startswith("[memory]") and "t2 " in note and '"n": 4' in str(t.segments[-1])
    adv = torch.tensor([0.5, -0.5])
    batch, owner = segment_batch(trajs, torch.ones(2, dtype=torch.bool), tok.pad_token_id)
    row_adv = broadcast_to_rows(adv, owner)  # (R,)
    assert owner.tolist() == [0] * 4 + [1] * 4 and row_adv.tolist() == [0.5] * 4 + [-0.5] * 4
    with torch.no_grad():
        logp, _ = forward_logprobs(model, batch, temperature=1.0)
    m = batch.mask.bool()
    assert int(m.sum()) == sum(t.num_policy_tokens for t in trajs)
    assert torch.allclose(logp[m], batch.old_logp[m], atol=2e-3), (
        (logp[m] - batch.old_logp[m]).abs().max()
    )


def test_training_evaluation_and_eval_cli_play_with_the_runs_memory(tiny_policy, tmp_path):
    """``rollout.memory`` reaches every loop that plays episodes: the RL step's rollout, the
    held-out evaluation, and ``agentrl eval`` of a run directory (its config.yaml)."""
    from agentrl.config import build_config, save_config
    from agentrl.eval.api import run_settings
    from agentrl.eval.runner import evaluate
    from agentrl.train.step import collect

    _, tok = tiny_policy
    cfg = build_config({}, ["rollout.memory.enabled=true", "rollout.memory.hot_turns=3",
                            "rollout.max_total_tokens=4096"])  # fmt: skip
    env_fn = lambda: make("weather", fault_rate=0.0, max_turns=40)  # noqa: E731
    specs = [EpisodeSpec(seed=3, level=1)]
    trajs, _ = collect(LongScript(tok, 12), env_fn, specs, cfg.rollout, 1.0)
    assert len(trajs[0].contexts()) == 10  # hot_turns 3: a rewrite before each of turns 4-12
    _, played = evaluate(LongScript(tok, 12), env_fn, episodes=1, levels=[1], seed0=3,
                         max_total_tokens=4096, memory=cfg.rollout.memory)  # fmt: skip
    assert len(played[0].contexts()) == 10
    save_config(cfg, tmp_path / "config.yaml")
    assert run_settings(str(tmp_path))["memory"] == cfg.rollout.memory
    plain = build_config({}, [])
    save_config(plain, tmp_path / "config.yaml")
    assert "memory" not in run_settings(str(tmp_path))


def test_evaluation_reports_each_finished_episode_across_batches(tiny_policy, capsys):
    """``evaluate(on_episode=...)`` counts finished episodes over every batch (training's
    evaluation prints them as plain progress lines, ``Run._eval_progress``)."""
    from agentrl.eval.runner import evaluate
    from agentrl.sft import plain_progress

    _, tok = tiny_policy
    env_fn = lambda: make("weather", fault_rate=0.0, max_turns=40)  # noqa: E731
    seen: list[tuple[int, int]] = []
    record = lambda n, total: seen.append((n, total))  # noqa: E731
    _, played = evaluate(LongScript(tok, 2), env_fn, episodes=3, levels=[1], seed0=3,
                         batch_size=2, on_episode=record)  # fmt: skip
    assert len(played) == 3 and seen == [(1, 3), (2, 3), (3, 3)]
    advance = plain_progress(3, lines=3, unit="episodes", clock=iter(range(0, 99, 5)).__next__)
    for _ in range(3):
        advance("evaluating before RL")
    assert capsys.readouterr().out.splitlines()[-1] == "evaluating before RL: 3/3 episodes, 15 s"
