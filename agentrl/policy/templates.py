"""Chat templates for policies: the named ones, a Jinja file, and the check that tools render.

``model.chat_template`` picks one: ``auto`` keeps the tokenizer's own template (a converted
GGUF or packaged model already carries its default, see ``agentrl.policy.gguf``), ``qwen2.5``
is agentrl's Qwen2.5 tool template (``agentrl.chat.template``; it needs the ChatML tokens
``<|im_start|>`` / ``<|im_end|>``), anything else is the path of a Jinja file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.chat.render import render_text
from agentrl.chat.template import IM_END, IM_START, QWEN25_TOOL_TEMPLATE

#: Named templates (``model.chat_template`` values besides ``auto`` and a file path).
CHAT_TEMPLATES: dict[str, str] = {"qwen2.5": QWEN25_TOOL_TEMPLATE}
TEMPLATE_CHOICES: tuple[str, ...] = ("auto", *CHAT_TEMPLATES)

_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "agentrl_probe_tool",
        "description": "A probe.",
        "parameters": {
            "type": "object",
            "properties": {"x": {"type": "string"}},
            "required": ["x"],
        },
    },
}


def check_tool_template(tokenizer: Any, name: str) -> None:
    """Raise ValueError unless the tokenizer's chat template renders a tool schema."""
    hint = "set model.chat_template to 'qwen2.5' or a Jinja file"
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{name}: tokenizer has no chat template; a template with tools is needed ({hint})"
        )
    msgs = [{"role": "user", "content": "hi"}]
    try:
        text = render_text(tokenizer, msgs, [_PROBE_TOOL], add_generation_prompt=True)
    except Exception as e:  # a template that chokes on tools
        raise ValueError(f"{name}: chat template failed to render tools ({e})") from e
    if "agentrl_probe_tool" not in text:
        raise ValueError(
            f"{name}: the chat template doesn't support tools (a tool's name is not rendered); "
            f"use a tool-calling model (e.g. Qwen2.5-Instruct) or 'agentrl/tiny', or {hint}"
        )


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a tool schema."""
    try:
        check_tool_template(tokenizer, "probe")
    except ValueError:
        return False
    return True


def has_chatml_tokens(tokenizer: Any) -> bool:
    """Whether ``<|im_start|>`` and ``<|im_end|>`` are single tokens (the Qwen2.5 frame)."""
    for tok in (IM_START, IM_END):
        ids = tokenizer(tok, add_special_tokens=False)["input_ids"]
        if len(ids) != 1 or tokenizer.convert_tokens_to_ids(tok) != ids[0]:
            return False
    return True


def template_text(choice: str) -> str | None:
    """The Jinja text ``choice`` names; None for ``auto`` (keep the tokenizer's own)."""
    if choice == "auto":
        return None
    if choice in CHAT_TEMPLATES:
        return CHAT_TEMPLATES[choice]
    path = Path(choice).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"model.chat_template: {choice!r} is not one of {', '.join(TEMPLATE_CHOICES)} "
            "and no Jinja file is there"
        )
    return path.read_text(encoding="utf-8")


def apply_chat_template(tokenizer: Any, choice: str, name: str) -> None:
    """Set the template ``choice`` names on ``tokenizer`` (in place; ``auto`` changes nothing)."""
    text = template_text(choice)
    if text is None:
        return
    if choice in CHAT_TEMPLATES and not has_chatml_tokens(tokenizer):
        raise ValueError(
            f"model.chat_template: {choice!r} needs {IM_START} and {IM_END} as single tokens, "
            f"and {name}'s tokenizer has no such tokens"
        )
    tokenizer.chat_template = text
