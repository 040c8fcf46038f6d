"""Our hand-written template renders exactly what Qwen2.5's own template renders (the copy
shipped inside the trl package is the reference; skipped where trl is not installed)."""

import importlib.util
from pathlib import Path

import pytest

from agentrl.chat.render import render_text
from agentrl.envs import make, run_reference_episode


def _qwen_template() -> str:
    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        pytest.skip("trl is not installed")
    path = Path(spec.origin).parent / "chat_templates" / "qwen2_5.jinja"
    if not path.is_file():
        pytest.skip("this trl has no qwen2_5.jinja")
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("level", [1, 3])
def test_rendering_equals_qwen25_template(tiny_policy, level):
    _, tok = tiny_policy
    env = make("weather", fault_rate=0.5)
    messages, _ = run_reference_episode(env, seed=7, level=level)
    assert any(m["role"] == "tool" for m in messages)
    ours = render_text(tok, messages, env.tool_schemas, add_generation_prompt=False)
    theirs = tok.apply_chat_template(
        messages, tools=env.tool_schemas, tokenize=False, chat_template=_qwen_template()
    )
    assert ours == theirs
