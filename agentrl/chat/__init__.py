"""Chat-template rendering with tools, tool-call parsing, incremental tokenization + masks."""

from agentrl.chat.render import (
    assistant_body,
    encode_conversation,
    encode_delta,
    encode_prompt,
    render_text,
    stop_token_ids,
)
from agentrl.chat.template import QWEN25_TOOL_TEMPLATE

__all__ = [
    "QWEN25_TOOL_TEMPLATE",
    "assistant_body",
    "encode_conversation",
    "encode_delta",
    "encode_prompt",
    "render_text",
    "stop_token_ids",
]
