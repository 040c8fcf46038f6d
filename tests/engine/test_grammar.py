"""Grammar-constrained tool calls (``agentrl.engine.grammar``): the grammar accepts every
reference solver's turns in every family and refuses malformed calls; the engine, constrained,
samples only calls the parser reads and records the masked distribution's log-probs; a
constrained rollout's turns all follow the grammar."""

from __future__ import annotations

import pytest
import torch
from runhelpers import assistant_turns

from agentrl import envs
from agentrl.chat.parser import parse_action
from agentrl.chat.render import encode_conversation, encode_prompt, stop_token_ids, tokenize
from agentrl.curriculum import family_levels
from agentrl.engine.decoder import Engine
from agentrl.engine.grammar import ToolCallGrammar, allowed_tokens, call_schema, mask_logits
from agentrl.envs.reference import run_reference_episode
from agentrl.rollout import EpisodeSpec, run_episodes

#: a tool whose every argument is an enum: a constrained call is complete within a few tokens
PICK = [{"type": "function", "function": {
    "name": "pick_city", "description": "Choose a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]},
        "days": {"type": "integer", "enum": [1, 2]}}, "required": ["city", "days"]}}}]  # fmt: skip


@pytest.fixture(scope="module")
def grammar(tiny_policy):
    model, tok = tiny_policy
    vocab = model.get_output_embeddings().weight.shape[0]
    return tok, ToolCallGrammar(tok, stop_token_ids(tok), vocab)


def test_every_reference_turn_of_every_family_is_accepted(grammar):
    tok, g = grammar
    calls = 0
    for env_id in envs.list_envs():
        env = envs.make(env_id)
        for level in family_levels(env)[:3]:
            messages, _ = run_reference_episode(env, seed=7, level=level)
            ids, mask = encode_conversation(tok, messages, env.tool_schemas)
            for turn in assistant_turns(ids, mask):
                assert g.accepts(env.tool_schemas, turn), (env_id, level, tok.decode(turn))
                calls += tok.decode(turn).count("<tool_call>")
    assert calls >= 60  # every family's calls were checked, not only final answers


@pytest.mark.parametrize(
    "body",
    ['{"name": "get_weathr", "arguments": {"city": "Paris"}}',  # unknown tool
     '{"name": "get_weather", "arguments": {}}',  # a required argument missing
     '{"name": "get_weather", "arguments": {"city": 7}}',  # wrong type
     '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}',  # undeclared
     '{"name": "get_weather", "arguments": {"city": "Paris"}',  # unbalanced
     '{"name": "get_weather", "args": {"city": "Paris"}}'],  # wrong key
)  # fmt: skip
def test_malformed_calls_are_refused(grammar, body):
    tok, g = grammar
    env = envs.make("weather")
    end = stop_token_ids(tok)[:1]
    good = tokenize(tok, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
                    "\n</tool_call>") + end  # fmt: skip
    assert g.accepts(env.tool_schemas, good)
    bad = tokenize(tok, f"<tool_call>\n{body}\n</tool_call>") + end
    assert not g.accepts(env.tool_schemas, bad)
    assert not g.accepts(env.tool_schemas, tokenize(tok, f"<tool_call>\n{body[:-1]}") + end)


def test_required_mode_refuses_plain_text(grammar):
    tok, g = grammar
    env = envs.make("weather")
    text = tokenize(tok, "Paris is warmer.") + stop_token_ids(tok)[:1]
    assert g.accepts(env.tool_schemas, text)
    assert not g.accepts(env.tool_schemas, text, required=True)


def test_the_packed_bitmask_unpacks_to_tokens():
    words = torch.tensor([[0b101, 0], [-1, 1]], dtype=torch.int32)  # (2, 2): 64 tokens
    allowed = allowed_tokens(words, 40)  # (2, 40)
    assert allowed[0].nonzero().flatten().tolist() == [0, 2]
    assert allowed[1].nonzero().flatten().tolist() == [*range(32), 32]
    logits = torch.zeros(2, 40)

    class Only:  # a constraint that allows tokens 3 and 39
        def fill(self, bitmask, row):
            bitmask[row] = torch.tensor([1 << 3, 1 << 7], dtype=torch.int32)

    out = mask_logits(logits, [None, Only()])
    assert torch.isfinite(out[0]).all()
    assert torch.isfinite(out[1]).nonzero().flatten().tolist() == [3, 39]


def test_undeclared_arguments_are_closed_but_a_schema_that_says_is_kept():
    schema = call_schema(PICK)["anyOf"][0]["properties"]["arguments"]
    assert schema["additionalProperties"] is False
    own = [{"function": {"name": "f", "parameters": {"type": "object", "properties": {},
                                                     "additionalProperties": True}}}]  # fmt: skip
    assert call_schema(own)["anyOf"][0]["properties"]["arguments"]["additionalProperties"]


def _replayed_logprobs(model, g, prompt, ids, temperature):
    """Each sampled id's log-prob under the grammar-masked, temperature-scaled softmax,
    from one plain forward and a fresh matcher replaying the turn."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()  # (T, V)
    matcher = g.matcher(PICK, required=True)
    words = torch.zeros(1, (logits.shape[-1] + 31) // 32, dtype=torch.int32)
    out = []
    for k, t in enumerate(ids):
        from llguidance.torch import fill_next_token_bitmask

        fill_next_token_bitmask(matcher, words, 0)
        row = logits[len(prompt) + k - 1] / temperature
        row = row.masked_fill(~allowed_tokens(words, row.shape[0])[0], float("-inf"))
        out.append(float(torch.log_softmax(row, dim=-1)[t]))
        assert matcher.consume_token(t)
    return out


def test_constrained_sampling_writes_only_calls_the_parser_reads(tiny_policy, grammar):
    model, tok = tiny_policy
    _, g = grammar
    msgs = [{"role": "user", "content": "Pick a city for a trip."}]
    prompt = encode_prompt(tok, msgs, PICK)
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    texts = {}
    for constrained in (False, True):
        torch.manual_seed(0)
        sess = engine.session(12, len(prompt) + 64, temperature=1.0)
        for i in range(12):
            c = engine.tool_call_constraint(PICK, required=True) if constrained else None
            sess.add(i, prompt, 64, seed=i, **({"constraint": c} if c else {}))
        got = {}
        while len(got) < 12:
            for key, sample in sess.step():
                got[key] = sample
                sess.release(key)
        texts[constrained] = [got[i] for i in range(12)]
    for sample in texts[True]:
        text = tok.decode(sample.ids, skip_special_tokens=False)
        if not sample.stopped:  # cut at the budget, inside a further call: the complete ones
            text = text[: text.rindex("</tool_call>") + len("</tool_call>")]
        action = parse_action(text)
        assert action.tool_calls and not action.errors, action
        assert all(c.name == "pick_city" and c.arguments["city"] in ("Paris", "Rome", "Oslo")
                   for c in action.tool_calls)  # fmt: skip
        want = _replayed_logprobs(model, g, prompt, sample.ids, 1.0)
        assert sample.logprobs == pytest.approx(want, abs=1e-4)
    unconstrained = [parse_action(tok.decode(s.ids, skip_special_tokens=False))
                     for s in texts[False]]  # fmt: skip
    assert not any(a.tool_calls for a in unconstrained)  # the tiny model alone writes none


def test_a_constrained_rollout_follows_the_grammar_every_turn(tiny_policy, grammar):
    model, tok = tiny_policy
    _, g = grammar
    engine = Engine(model, tok, stop_token_ids(tok), tok.pad_token_id)
    specs = [EpisodeSpec(seed=s, level=1 + s % 3) for s in range(6)]
    torch.manual_seed(1)
    trajs = run_episodes(engine, lambda: envs.make("weather", max_turns=3), specs,
                         max_new_tokens=48, max_total_tokens=1024, temperature=1.0,
                         constrained="tool_calls")  # fmt: skip
    schemas = envs.make("weather").tool_schemas
    turns = [turn for t in trajs for turn in assistant_turns(t.token_ids, t.loss_mask)]
    assert len(turns) >= 6
    for turn in turns:
        if turn[-1] in stop_token_ids(tok):
            assert g.accepts(schemas, turn), tok.decode(turn)
        else:  # cut at its token budget: still a prefix the grammar allows
            assert g.matcher(schemas).validate_tokens(turn) == len(turn), tok.decode(turn)
    with pytest.raises(ValueError, match="tool_calls"):
        run_episodes(engine, lambda: envs.make("weather"), specs[:1], constrained="json")


def test_a_constrained_training_step_recomputes_the_old_logprobs(tiny_dir, tmp_path):
    from runhelpers import tiny_run_overrides

    from agentrl.config import load_config
    from agentrl.monitor.metrics import read_jsonl
    from agentrl.train import train

    run = tmp_path / "run"
    overrides = [*tiny_run_overrides(tiny_dir, run), "train.steps=1", "rollout.dtype=float32",
                 "rollout.constrained=tool_calls", "rollout.max_new_tokens=24",
                 "rollout.max_total_tokens=640", "train.general_check=false",
                 "train.save_model=false"]  # fmt: skip
    train(load_config(None, overrides), progress=False)
    (line,) = read_jsonl(run / "metrics.jsonl")
    # the update's old log-probs are the unconstrained policy's: they differ from the masked
    # distribution's wherever the grammar removed probability mass
    assert line["rollout/logprob_gap"] > 0
    with pytest.raises(ValueError, match="search_k"):
        load_config(None, ["rollout.constrained=tool_calls", "rollout.search_k=2"])
