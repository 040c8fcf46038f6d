"""A test agent program for ``agentrl train --agent``: two turns with the official ``openai``
client (ask, then a follow-up that extends the history), a reward that varies with what the
model wrote (so GRPO groups have a spread), and, for the fault tests, a crash on demand:
``AGENTRL_TEST_CRASH_GROUP=G`` makes every episode of task group G exit 3 after one request,
with a message on stderr and no reward; ``AGENTRL_TEST_REWRITE=1`` makes the follow-up rewrite
the history (the first reply dropped), so the episode is stored as two segments."""

import json
import os
import sys

from openai import OpenAI

from agentrl.serve.client import report_reward, session_headers, task_from_env


def main() -> int:
    task = task_from_env()
    client = OpenAI(default_headers=session_headers(), max_retries=0)
    model = os.environ["AGENTRL_MODEL"]
    messages = list(task["messages"])
    first = client.chat.completions.create(model=model, messages=messages, tools=task["tools"])
    if str(task["group"]) == os.environ.get("AGENTRL_TEST_CRASH_GROUP"):
        print(f"boom: crashing on purpose in group {task['group']}", file=sys.stderr)
        return 3
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    for call in first.choices[0].message.tool_calls or []:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": '{"ok": true}'})
    messages.append({"role": "user", "content": "Answer in one sentence."})
    if os.environ.get("AGENTRL_TEST_REWRITE"):
        messages = [*task["messages"], {"role": "user", "content": "Answer in one sentence."}]
    second = client.chat.completions.create(model=model, messages=messages, tools=task["tools"])
    text = (first.choices[0].message.content or "") + (second.choices[0].message.content or "")
    reward = (sum(map(ord, text)) % 11) / 10
    report_reward(os.environ["OPENAI_BASE_URL"], os.environ["AGENTRL_SESSION"], reward)
    print(json.dumps({"reward": reward}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
