import pytest

from agentrl.config import ConfigError, build_config, load_config


def test_defaults_and_override_types():
    cfg = build_config({}, ["algo.lr=1e-5", "rollout.group_size=4", "task.levels=[1, 2]"])
    assert cfg.algo.lr == 1e-5
    assert cfg.rollout.group_size == 4
    assert cfg.task.levels == [1, 2]
    assert cfg.reward.weights()["completion"] == 1.0


def test_unknown_field_named_with_allowed_ones():
    with pytest.raises(ConfigError) as err:
        build_config({}, ["algo.learning_rate=1e-5"])
    msg = str(err.value)
    assert "algo.learning_rate" in msg and "lr" in msg and "clip_eps" in msg


def test_bad_value_names_field_and_allowed_values():
    with pytest.raises(ConfigError) as err:
        build_config({"algo": {"loss_agg": "sum"}})
    assert "algo.loss_agg" in str(err.value) and "token_mean" in str(err.value)
    with pytest.raises(ConfigError, match="rollout.group_size"):
        build_config({}, ["rollout.group_size=0"])


def test_eval_every_needs_held_out_episodes():
    with pytest.raises(ConfigError, match="train.eval_every=5 needs held-out episodes"):
        build_config({}, ["train.eval_every=5", "train.eval_episodes=0"])
    assert build_config({}, ["train.eval_every=5"]).train.eval_every == 5


def test_yaml_file_and_missing_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  steps: 3\nalgo:\n  kl:\n    coef: 0\n")
    cfg = load_config(p, ["train.steps=5"])
    assert cfg.train.steps == 5 and cfg.algo.kl.coef == 0
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(p)


def test_env_factory_applies_the_tools_section():
    from agentrl.tools import runtime
    from agentrl.train.build import env_factory

    cfg = build_config({"tools": {"timeout_base": 2.5, "breaker_failures": 3}})
    try:
        env_factory(cfg)
        settings = runtime.current_settings()
        assert settings.timeout_base == 2.5 and settings.breaker_failures == 3
    finally:
        runtime.configure(None)
    assert runtime.current_settings().timeout_base == 3.0  # back to the defaults


def test_shipped_configs_load_and_the_weather_one_spells_out_the_demo():
    from pathlib import Path

    from agentrl.presets import TINY_DEMO, demo_overrides

    configs = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))
    assert len(configs) >= 3
    loaded = {p.stem: load_config(p) for p in configs}  # a stale key would raise ConfigError
    demo = build_config({}, list(TINY_DEMO))
    weather = loaded["weather_grpo"]
    assert weather.train.steps == demo.train.steps == 15
    assert weather.curriculum.enabled and demo.curriculum.enabled
    assert weather.rollout == demo.rollout and weather.algo == demo.algo
    assert weather.train.autocast == demo.train.autocast == "off"
    assert weather.task.levels == demo.task.levels == [1, 2, 3]
    # the real model's config spells out the pretrained demo
    smol = loaded["smollm2_weather"]
    real = build_config({}, demo_overrides("agentrl/smollm2-135m"))
    assert smol.model.name == real.model.name == "agentrl/smollm2-135m"
    assert smol.rollout == real.rollout and smol.algo == real.algo and smol.task == real.task
    assert smol.curriculum == real.curriculum
    fields = ("steps", "warmstart_demos", "warmstart_epochs", "warmstart_lr", "eval_episodes")
    assert all(getattr(smol.train, f) == getattr(real.train, f) for f in fields)


@pytest.mark.parametrize(
    ("old", "new"),
    [("algo.kl_coef=0.1", "algo.kl.coef"), ("algo.gamma=0.9", "algo.ppo.gamma"),
     ("algo.advantage=rloo", "algo.grpo.advantage"),
     ("algo.lr_schedule=cosine", "algo.schedule.lr"),
     ("algo.entropy_coef_final=0", "algo.schedule.entropy_final")],
)  # fmt: skip
def test_flat_algo_keys_are_refused_naming_their_new_key(old, new):
    with pytest.raises(ConfigError) as err:
        build_config({}, [old])
    assert f"{old.split('=')[0]} -> {new}" in str(err.value)


def test_algo_sections_and_train_seed_limit():
    cfg = build_config({}, ["algo.kl.coef=0.1", "algo.ppo.gamma=0.9", "train.seed_limit=50"])
    assert cfg.algo.kl.coef == 0.1 and cfg.algo.ppo.gamma == 0.9
    assert cfg.train.seed_limit == 50 and cfg.train.eval_seed == 10_000  # no longer one field
    with pytest.raises(ConfigError, match="train.log_every was removed"):
        build_config({}, ["train.log_every=1"])


def test_training_seeds_stay_below_seed_limit():
    import random

    from agentrl.train.sampler import make_sampler

    cfg = build_config({}, ["train.seed_limit=5", "rollout.group_size=2"])
    specs = make_sampler(cfg, random.Random(0)).next(groups=200, first_group=0)
    assert {s.seed for s in specs} == set(range(5))
    assert [s.group_id for s in specs[:4]] == [0, 0, 1, 1]
