"""A weather agent written with the official ``openai`` client and its own tool loop, trained
unchanged by agentrl:

    agentrl train configs/weather_grpo.yaml --agent "python examples/openai_agent.py"

Nothing here is agentrl's loop: the tools are plain functions, their schemas go in ``tools=``,
the program runs the calls the model asks for and sends the results back, and at the end it
scores its own answer and reports the reward. What ties it to training is three environment
variables the trainer sets (``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, read by the client
itself; ``AGENTRL_SESSION``, sent as a header so the episode's requests are grouped;
``AGENTRL_TASK``, which task to solve) and one call, ``report_reward``.

The task is a weather-family instance (``agentrl.envs.tasks.weather``): the program rebuilds
its world from the task's seed and level and checks the answer with the family's verifier, so
the reward is real. Run by hand against ``agentrl serve MODEL --record DIR`` it works the same:
``AGENTRL_TASK='{"seed": 3, "level": 1}' OPENAI_BASE_URL=http://127.0.0.1:8000/v1
OPENAI_API_KEY=x AGENTRL_SESSION=demo-1 python examples/openai_agent.py``.
"""

from __future__ import annotations

import json
import os
import random
import sys

from openai import OpenAI

from agentrl.envs.tasks.weather import WeatherFamily
from agentrl.serve.client import report_reward, session_headers, task_from_env

MAX_TURNS = 6


def make_tools(world: dict) -> dict:
    """The agent's tools: plain functions over the task's world."""

    def get_weather(city: str) -> dict:
        w = world.get(city.strip().title()) or world.get(city.strip())
        if w is None:
            return {"error": "unknown_city", "message": f"Unknown city {city!r}."}
        return {"city": city, "temperature_c": w["temperature_c"], "condition": w["condition"]}

    def get_local_time(city: str) -> dict:
        w = world.get(city.strip().title()) or world.get(city.strip())
        return {"city": city, "time": w["time"]} if w else {"error": "unknown_city"}

    return {"get_weather": get_weather, "get_local_time": get_local_time}


SCHEMAS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current temperature (Celsius) and condition.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_local_time", "description": "Local time (HH:MM) in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
]  # fmt: skip


def run_agent(client: OpenAI, model: str, question: str, tools: dict, schemas: list) -> str:
    """The tool loop: ask, run every requested call, send the results back, until an answer."""
    messages = [{"role": "system", "content": WeatherFamily.system_prompt},
                {"role": "user", "content": question}]  # fmt: skip
    for _ in range(MAX_TURNS):
        reply = client.chat.completions.create(model=model, messages=messages, tools=schemas)
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            fn = tools.get(call.function.name)
            try:
                result = fn(**json.loads(call.function.arguments)) if fn else {
                    "error": "unknown_tool"}  # fmt: skip
            except (TypeError, ValueError) as err:
                result = {"error": "bad_arguments", "message": str(err)}
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": json.dumps(result)})  # fmt: skip
    return ""


def main() -> int:
    task = task_from_env() or {"seed": 0, "level": 1}
    family = WeatherFamily()
    instance = family.sample(random.Random(task["seed"]), task["level"])
    # the trainer's task carries the env's own opening messages; use its question if present
    question = next((m["content"] for m in task.get("messages", []) if m["role"] == "user"),
                    instance.prompt)  # fmt: skip
    client = OpenAI(default_headers=session_headers(), max_retries=0)
    model = os.environ.get("OPENAI_MODEL", "policy")
    schemas = task.get("tools") or SCHEMAS  # the env's own schemas when the trainer sends them
    answer = run_agent(client, model, question, make_tools(instance.data["world"]), schemas)
    success = family.check_answer(instance, answer)
    session = os.environ.get("AGENTRL_SESSION")
    if session:
        report_reward(os.environ["OPENAI_BASE_URL"], session, float(success), success=success)
    print(json.dumps({"answer": answer, "success": success}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
