"""Shared-prefix forward: the same log-probs and the same gradients as the plain forward."""

import copy

import torch

from agentrl.algos.batch import build_batch
from agentrl.algos.forward import forward_logprobs, loss_free_prefix_length
from agentrl.chat.render import encode_prompt, stop_token_ids
from agentrl.envs import make
from agentrl.policy.generate import HFGenerator
from agentrl.policy.prefix import batch_prefix_length
from agentrl.rollout import EpisodeSpec, run_episodes


def _batch(model, tok):
    torch.manual_seed(1)
    gen = HFGenerator(model, tok, stop_token_ids(tok), tok.pad_token_id)
    specs = [EpisodeSpec(seed=s, level=1 + s % 3, group_id=s) for s in range(3)]
    trajs = run_episodes(gen, lambda: make("weather"), specs, max_new_tokens=24)
    return build_batch(trajs, torch.ones(3, dtype=torch.bool), tok.pad_token_id)


ADVANTAGES = torch.tensor([1.0, -0.5, 0.25])


def test_shared_prefix_forward_matches_plain_forward_and_gradients(tiny_policy):
    model, tok = tiny_policy
    batch = _batch(model, tok)
    env = make("weather")
    messages, _ = env.reset(seed=0, options={"level": 1})
    system_turn = len(encode_prompt(tok, messages[:1], env.tool_schemas))
    shared = loss_free_prefix_length(model, batch)
    assert shared >= system_turn - 5  # the whole system turn with the tool schemas is shared
    first_loss = int(batch.mask.bool().any(0).nonzero()[0])
    assert shared <= first_loss

    plain_model = copy.deepcopy(model)
    # activation checkpointing turns the shared prefix off (as agentrl.train.build enables it)
    plain_model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    assert loss_free_prefix_length(plain_model, batch) == 0
    losses = []
    for m in (model, plain_model):
        m.train()
        m.zero_grad()
        logp, ent = forward_logprobs(m, batch, temperature=1.0, with_entropy=True)
        loss = (-(logp * ADVANTAGES[:, None]) + 0.01 * ent) * batch.mask
        loss = loss.sum()
        loss.backward()
        losses.append((logp.detach(), loss.item()))
    m = batch.mask.bool()
    assert torch.allclose(losses[0][0][m], losses[1][0][m], atol=1e-4)
    assert abs(losses[0][1] - losses[1][1]) < 1e-3 * max(1.0, abs(losses[1][1]))
    for (name, a), b in zip(model.named_parameters(), plain_model.parameters(), strict=True):
        if a.grad is None:
            assert b.grad is None or b.grad.abs().max() == 0, name
            continue
        assert b.grad.norm() > 0, name
        assert (a.grad - b.grad).norm() < 1e-4 * b.grad.norm(), name
    model.zero_grad()
    model.eval()


def test_batch_prefix_length_stops_at_the_first_difference_and_padding():
    ids = torch.tensor([[5, 6, 7, 8, 0], [5, 6, 7, 9, 9], [5, 6, 7, 8, 1]])
    attention = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert batch_prefix_length(ids, attention) == 3
    assert batch_prefix_length(ids[:1, :3], attention[:1, :3]) == 2  # one token left to predict
