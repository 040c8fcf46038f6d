"""A LoRA adapter per role in hierarchical RL (``rollout.hierarchy.adapters: per_role``):
decoding, routing, log-probs, updates, saving and the config rule."""

from __future__ import annotations

import copy
import json
import random
from types import SimpleNamespace

import pytest
import torch

from agentrl.algos.batch import Batch
from agentrl.algos.forward import reference_logprobs
from agentrl.algos.role_adapters import role_grpo_update, role_logprobs
from agentrl.chat.render import stop_token_ids, tokenize
from agentrl.config import ConfigError, build_config
from agentrl.config.hierarchy import HierarchyConfig
from agentrl.engine.decoder import Engine
from agentrl.envs import make
from agentrl.planning.hier_rollout import run_hierarchical
from agentrl.policy.generate import Sample
from agentrl.policy.lora import AdapterDisabled, apply_lora
from agentrl.policy.roles import ROLES, role_adapter, save_role_adapters, uses_role_adapters
from agentrl.rollout import EpisodeSpec

GRPO = dict(clip_eps=0.2, kl_coef=0.0, loss_agg="token_mean", epochs=1, minibatches=1,
            max_grad_norm=1.0, temperature=1.0)  # fmt: skip


def _role_policy(tiny_policy, seed: int = 0):
    """The tiny model with a manager and a worker adapter, each nonzero and different."""
    model, tok = tiny_policy
    peft = apply_lora(copy.deepcopy(model), rank=4, alpha=8, dropout=0.0,
                      target_modules=["q_proj", "v_proj"], adapter_names=ROLES)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return peft, tok


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def _lora(model, role: str) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for n, p in model.named_parameters()
                      if "lora_" in n and f".{role}." in n])  # fmt: skip


def test_each_role_decodes_with_its_own_adapter_and_both_stay_trainable(tiny_policy):
    peft, tok = _role_policy(tiny_policy)
    ids = tokenize(tok, "Which city is warmer, Paris or Rome?")
    engine = Engine(peft, tok, stop_token_ids(tok), tok.pad_token_id)
    out = {}
    for role in ROLES:
        with role_adapter(peft, role):
            out[role] = _logits(peft, ids)
        torch.testing.assert_close(_logits(engine.decoding_model(role), ids), out[role],
                                   atol=1e-4, rtol=1e-4)  # fmt: skip
    assert (out["manager"] - out["worker"]).abs().max() > 1e-2
    assert peft.active_adapter == "manager"  # restored after every block
    AdapterDisabled(peft)(input_ids=torch.tensor([ids]))  # the reference: peft's own
    # disable_adapter freezes the adapter that is not active when it ends; ours does not
    assert all(p.requires_grad for n, p in peft.named_parameters() if "lora_" in n)
    assert not any(p.requires_grad for n, p in peft.named_parameters() if "lora_" not in n)
    with pytest.raises(ValueError, match="role must be one of"), role_adapter(peft, "critic"):
        pass


class RoleSessions:
    """A session generator that plays each role's replies in its own session and records, per
    context it opens, the role of the session it was added to (log-probs mark the role)."""

    supports_sessions = True
    LOGPROB = {"manager": -0.1, "worker": -0.2}
    model = SimpleNamespace(peft_config={"manager": "lora", "worker": "lora"})  # what it decodes

    def __init__(self, tokenizer, replies: dict[str, list[str]]):
        self.tokenizer, self.stop = tokenizer, stop_token_ids(tokenizer)[0]
        self.replies, self.opened, self.roles = replies, [], []

    def session(self, n, capacity, *, temperature, top_p, greedy, adapter=None):
        self.roles.append(adapter)
        return _Session(self, adapter)


class _Session:
    def __init__(self, owner: RoleSessions, role: str) -> None:
        self.owner, self.role, self.waiting = owner, role, set()

    def add(self, key, ids, max_new, seed):
        text = self.owner.tokenizer.decode(ids)
        self.owner.opened.append((self.role, "You are a worker" in text))
        self.waiting.add(key)

    def extend(self, key, delta, max_new):
        self.waiting.add(key)

    def release(self, key):
        self.waiting.discard(key)

    @property
    def busy(self):
        return bool(self.waiting)

    def step(self):
        out = []
        for key in sorted(self.waiting):
            reply = self.owner.replies[self.role].pop(0)
            ids = tokenize(self.owner.tokenizer, reply) + [self.owner.stop]
            out.append((key, Sample(ids, [self.owner.LOGPROB[self.role]] * len(ids), True)))
        self.waiting.clear()
        return out


def _call(city: str) -> str:
    call = {"name": "get_weather", "arguments": {"city": city}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def test_manager_and_worker_contexts_decode_in_their_roles_sessions(tiny_policy):
    _, tok = tiny_policy
    env = make("weather", fault_rate=0.0)
    env.reset(seed=9, options={"level": 2})
    a, b = env.instance.data["cities"]
    ta, tb = (env.instance.data["world"][c]["temperature_c"] for c in (a, b))
    warmer, colder = (a, b) if ta > tb else (b, a)
    hot, cold = max(ta, tb), min(ta, tb)
    call = _call
    gen = RoleSessions(tok, {
        "manager": [f"Subgoal: get_weather(city={a})", f"Subgoal: get_weather(city={b})",
                    f"{warmer} is warmer: {hot}°C vs {cold}°C in {colder}."],
        "worker": [call(a), f"subgoal done: {a} {ta}", call(b), f"subgoal done: {b} {tb}"],
    })  # fmt: skip
    cfg = HierarchyConfig(adapters="per_role")
    (traj,) = run_hierarchical(gen, lambda: make("weather", fault_rate=0.0),
                               [EpisodeSpec(seed=9, level=2)], cfg)  # fmt: skip
    assert traj.termination == "success" and not any(gen.replies.values())
    assert gen.roles == ["manager", "worker"]
    # every context went to its role's session: manager, worker, manager again, ...
    assert gen.opened == [("manager", False), ("worker", True), ("manager", False),
                          ("worker", True), ("manager", False)]  # fmt: skip
    roles = [r["role"] for r in traj.info["hierarchy"]]
    assert roles == ["worker", "worker", "manager"]
    for seg, role in zip(traj.segments, roles, strict=True):
        sampled = {lp for lp, m in zip(seg.logprobs, seg.loss_mask, strict=True) if m}
        assert sampled == {RoleSessions.LOGPROB[role]}


def _batch(tok, texts: list[str]) -> Batch:
    rows = [tokenize(tok, t) for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])  # (R, T)
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    mask = attention[:, 1:].float()  # (R, T-1)
    return Batch(ids, attention, ids[:, 1:], mask, torch.zeros(mask.shape))


def test_role_logprobs_and_updates_use_each_rows_adapter(tiny_policy):
    peft, tok = _role_policy(tiny_policy, seed=1)
    batch = _batch(tok, ["Subgoal: get_weather(city=Paris)", "Paris is warmer.",
                               "subgoal done: Paris 21", "subgoal done: Rome 18"])  # fmt: skip
    is_manager = torch.tensor([True, True, False, False])
    lp = role_logprobs(peft, batch, is_manager, 1.0)  # (4, T-1)
    for row, role in enumerate(["manager", "manager", "worker", "worker"]):
        with role_adapter(peft, role):
            own = reference_logprobs(peft, batch, 1.0)[row]
        torch.testing.assert_close(lp[row], own)
    batch = Batch(batch.input_ids, batch.attention, batch.targets, batch.mask, lp)
    optimizer = torch.optim.AdamW([p for p in peft.parameters() if p.requires_grad], lr=1e-2)
    base = [p.detach().clone() for n, p in peft.named_parameters() if "lora_" not in n]
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])  # (R,)
    before = {r: _lora(peft, r) for r in ROLES}
    stats, by_role = role_grpo_update(peft, optimizer, batch, adv, is_manager,
                                      rng=random.Random(0), **GRPO)  # fmt: skip
    assert stats["stepped"] == [True, True] and stats["updates"] == 2.0
    assert by_role["hier/manager/updates"] == by_role["hier/worker/updates"] == 1.0
    moved = {r: float((_lora(peft, r) - before[r]).abs().max()) for r in ROLES}
    assert moved["manager"] > 1e-4 and moved["worker"] > 1e-4
    assert all(torch.equal(a, p) for a, p in
               zip(base, [p for n, p in peft.named_parameters() if "lora_" not in n],
                   strict=True))  # fmt: skip
    # off the manager's time scale its rows carry no tokens: only the worker's adapter moves
    off = Batch(batch.input_ids, batch.attention, batch.targets,
                batch.mask * (~is_manager).float()[:, None], lp)  # fmt: skip
    before = {r: _lora(peft, r) for r in ROLES}
    stats, by_role = role_grpo_update(peft, optimizer, off, adv, is_manager,
                                      rng=random.Random(0), **GRPO)  # fmt: skip
    assert stats["stepped"] == [True] and "hier/manager/updates" not in by_role
    assert torch.equal(_lora(peft, "manager"), before["manager"])
    assert float((_lora(peft, "worker") - before["worker"]).abs().max()) > 1e-4


def test_saved_role_adapters_load_for_evaluation_and_are_refused_where_one_policy_is_needed(
    tiny_policy, tmp_path
):
    from agentrl.eval.api import load_eval_engine
    from agentrl.export.export import export_model
    from agentrl.serve.run import build_server

    peft, tok = _role_policy(tiny_policy, seed=2)
    ids = tokenize(tok, "Subgoal: get_weather(city=Oslo)")
    want = {}
    for role in ROLES:
        with role_adapter(peft, role):
            want[role] = _logits(peft, ids)
    run = tmp_path / "run"
    save_role_adapters(peft, tok, run / "model", run / "adapter")
    engine = load_eval_engine(str(run), "cpu")
    assert uses_role_adapters(engine.model)
    for role in ROLES:
        torch.testing.assert_close(_logits(engine.decoding_model(role), ids), want[role],
                                   atol=1e-4, rtol=1e-4)  # fmt: skip
    with pytest.raises(ValueError, match="adapter per role"):
        build_server(str(run))
    with pytest.raises(ValueError, match="adapter per role"):
        export_model(str(run), tmp_path / "out")


def test_per_role_needs_lora_and_the_hierarchical_mode():
    with pytest.raises(ConfigError, match="lora.enabled=true and rollout.mode=hierarchical"):
        build_config({}, ["rollout.mode=hierarchical", "rollout.hierarchy.adapters=per_role"])
    with pytest.raises(ConfigError, match="rollout.hierarchy.adapters=per_role"):
        build_config({}, ["lora.enabled=true", "rollout.hierarchy.adapters=per_role"])
    cfg = build_config({}, ["lora.enabled=true", "rollout.mode=hierarchical",
                            "rollout.hierarchy.adapters=per_role"])  # fmt: skip
    assert cfg.rollout.hierarchy.adapters == "per_role"


def test_a_per_role_run_end_to_end(tiny_dir, tmp_path):
    """The real engine and trainer: both adapters in the checkpoint, the manager's adapter
    updated on its step (an entropy bonus gives it a gradient; the fixture model writes no
    subgoal, so there are no worker rows and the worker's adapter stays at its zero start),
    both saved, the run evaluated with them."""
    from runhelpers import tiny_run_overrides
    from safetensors.torch import load_file

    from agentrl.eval.api import load_eval_engine
    from agentrl.train import train

    run = tmp_path / "run"
    cfg = build_config({}, [*tiny_run_overrides(tiny_dir, run), "rollout.mode=hierarchical",
                            "rollout.hierarchy.adapters=per_role", "lora.enabled=true",
                            "lora.target_modules=[q_proj,v_proj]", "rollout.group_size=2",
                            "rollout.max_new_tokens=8", "rollout.max_total_tokens=700",
                            "train.steps=2", "train.eval_episodes=2", "algo.minibatches=1",
                            "train.general_check=false", "algo.kl.coef=0.05",
                            "algo.entropy_coef=0.01", "train.checkpoint_every=1"])  # fmt: skip
    summary = train(cfg, progress=False)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["hier/manager_trained"] for m in lines] == [1.0, 0.0]
    assert lines[0]["hier/manager/updates"] == 1.0  # manager rows, manager adapter, step 0
    assert "hier/manager/updates" not in lines[1]
    assert lines[0]["policy/grad_norm"] > 0
    # step 1 decoded the manager's contexts from its moved adapter: the sampled log-probs are
    # the ones the trainer recomputes with that adapter (up to the shadow's rounding)
    assert all(m["rollout/logprob_gap"] < 1e-4 for m in lines)
    assert lines[1]["policy/updates"] == 0.0  # no worker rows, the manager off its time scale
    policy = torch.load(run / "checkpoints" / "step_000002" / "policy.pt", weights_only=False)
    assert {r for r in ROLES if any(f".{r}." in n for n in policy)} == set(ROLES)
    saved = {r: load_file(run / "adapter" / r / "adapter_model.safetensors") for r in ROLES}
    b_max = {r: max(float(t.abs().max()) for n, t in saved[r].items() if "lora_B" in n)
             for r in ROLES}  # fmt: skip
    assert b_max["manager"] > 0 and b_max["worker"] == 0.0  # only the manager's rows trained
    assert uses_role_adapters(load_eval_engine(str(run), "cpu").model)
    assert summary["success_after"] in (0.0, 0.5, 1.0)
