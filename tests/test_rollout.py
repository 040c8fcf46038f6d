"""Token-in, token-out (DESIGN contract 1): the ids the trainer uses are the ids the policy
saw and produced, over several turns."""

import copy

import torch

from agentrl.algos.batch import build_batch
from agentrl.algos.forward import forward_logprobs
from agentrl.chat.render import encode_prompt, render_text, stop_token_ids, tokenize
from agentrl.envs import make
from agentrl.policy.generate import HFGenerator, Sample
from agentrl.policy.prefix import common_prefix_length
from agentrl.rollout import EpisodeSpec, run_episodes

SCRIPT = [
    '<tool_call>\n{"name": "get_local_time", "arguments": {"city": "Paris"}}\n</tool_call>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',  # malformed: unclosed
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "It is 20°C and sunny in Paris.",
]


class ScriptedGenerator:
    """Plays SCRIPT turn by turn; records every prompt it was shown and every id it produced."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.stop = stop_token_ids(tokenizer)[0]
        self.seen: list[list[list[int]]] = []
        self.produced: list[list[list[int]]] = []
        self.turn = 0

    def generate(self, prompts, **kwargs):
        ids = tokenize(self.tokenizer, SCRIPT[self.turn]) + [self.stop]
        self.seen.append(copy.deepcopy(prompts))
        self.produced.append([ids for _ in prompts])
        self.turn += 1
        return [Sample(list(ids), [-0.5] * len(ids), True) for _ in prompts]


def test_scripted_rollout_ids_equal_trainer_ids(tiny_policy):
    _, tok = tiny_policy
    gen = ScriptedGenerator(tok)
    trajs = run_episodes(
        gen,
        lambda: make("weather", fault_rate=0.0),
        [EpisodeSpec(seed=s, level=1, group_id=0) for s in (1, 2)],
    )
    assert gen.turn == 4  # four assistant turns, batched for both episodes
    for row, traj in enumerate(trajs):
        assert traj.info["turns"] == 4
        # what the policy saw at turn k is exactly the trajectory's prefix
        for k in range(4):
            prompt = gen.seen[k][row]
            assert traj.token_ids[: len(prompt)] == prompt
            produced = gen.produced[k][row]
            assert traj.token_ids[len(prompt) : len(prompt) + len(produced)] == produced
            assert traj.loss_mask[len(prompt) : len(prompt) + len(produced)] == [1] * len(produced)
        # mask 1 exactly on the produced ids; everything else is prompt / tool / env text
        policy_ids = [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
        assert policy_ids == [i for k in range(4) for i in gen.produced[k][row]]
        assert set(traj.turn_of_token[i] for i, m in enumerate(traj.loss_mask) if m) == {0, 1, 2, 3}
        # the whole sequence decodes to the chat template's rendering of the dialogue
        env = make("weather", fault_rate=0.0)
        first, _ = env.reset(seed=traj.info["seed"], options={"level": 1})
        assert traj.token_ids[: len(encode_prompt(tok, first, env.tool_schemas))] == encode_prompt(
            tok, first, env.tool_schemas
        )
        full = render_text(tok, traj.messages, env.tool_schemas)
        assert tok.decode(traj.token_ids, skip_special_tokens=False) == full.rstrip("\n")
    # the trainer's tensors hold the same ids, with the mask shifted to the targets
    batch = build_batch(trajs, torch.tensor([True, True]), tok.pad_token_id)
    for row, traj in enumerate(trajs):
        n = len(traj.token_ids)
        assert batch.input_ids[row, :n].tolist() == traj.token_ids
        assert batch.mask[row, : n - 1].tolist() == [float(m) for m in traj.loss_mask[1:]]
        assert batch.old_logp[row, : n - 1].tolist() == traj.logprobs[1:]


def test_real_model_rollout_logprobs_match_training_forward(tiny_policy):
    """Sampling with the tiny model, then a training forward over the stored ids, gives the
    same log-probs at every policy token: ids, positions and masks line up exactly."""
    model, tok = tiny_policy
    torch.manual_seed(0)
    gen = HFGenerator(model, tok, stop_token_ids(tok), tok.pad_token_id)
    specs = [EpisodeSpec(seed=s, level=2, group_id=s) for s in range(4)]
    trajs = run_episodes(
        gen, lambda: make("weather"), specs, max_new_tokens=40, max_total_tokens=600
    )
    assert all(t.num_policy_tokens > 0 for t in trajs)
    valid = torch.ones(len(trajs), dtype=torch.bool)
    batch = build_batch(trajs, valid, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = forward_logprobs(model, batch, temperature=1.0)
    m = batch.mask.bool()
    assert torch.allclose(logp[m], batch.old_logp[m], atol=2e-3), (
        (logp[m] - batch.old_logp[m]).abs().max()
    )


def test_shared_prefix_generation_equals_plain_generation(tiny_policy):
    """Encoding the prompts' common prefix once (and repeating its KV cache over the batch)
    changes neither the greedy ids nor their log-probs, for prompts of different lengths."""
    model, tok = tiny_policy
    env = make("weather")
    prompts = []
    for seed, level in ((0, 1), (1, 3), (2, 2)):
        messages, _ = env.reset(seed=seed, options={"level": level})
        prompts.append(encode_prompt(tok, messages, env.tool_schemas))
    assert common_prefix_length(prompts) >= 100  # the system turn with the tool schemas
    shared = HFGenerator(model, tok, stop_token_ids(tok), tok.pad_token_id)
    plain = HFGenerator(model, tok, stop_token_ids(tok), tok.pad_token_id, share_prefix=False)
    a = shared.generate(prompts, max_new_tokens=24, greedy=True)
    b = plain.generate(prompts, max_new_tokens=24, greedy=True)
    for x, y in zip(a, b, strict=True):
        assert x.ids == y.ids and x.stopped == y.stopped
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-3)


def test_common_prefix_length_leaves_every_prompt_a_token():
    assert common_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert common_prefix_length([[7, 1], [8, 1]]) == 0
