"""The CLI's error paths name the bad input; --json prints one JSON object last."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.config import Config

runner = CliRunner()


def test_train_bad_field_is_named(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algo:\n  learning_rate: 1\n")
    result = runner.invoke(app, ["train", str(cfg)])
    assert result.exit_code == 2
    assert "algo.learning_rate" in result.output and "clip_eps" in result.output


def test_eval_missing_path_is_named():
    result = runner.invoke(app, ["eval", "/no/such/run"])
    assert result.exit_code == 2
    assert "/no/such/run" in result.output and "does not exist" in result.output


def test_eval_json_last_line(tiny_dir, tmp_path):
    args = ["eval", str(tiny_dir), "--episodes", "3", "--json", "--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # the rates, recomputed from the transcripts: seeds 10000.., levels 1, 2, 3 cycled
    recs = [json.loads(x) for x in (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert [(r["info"]["seed"], r["level"]) for r in recs] == [(10000, 1), (10001, 2), (10002, 3)]
    wins = [r["termination"] == "success" for r in recs]
    assert report["episodes"] == 3 and report["success_rate"] == sum(wins) / 3
    assert report["success_by_level"] == {str(r["level"]): float(r["success"]) for r in recs}
    assert [r["success"] for r in recs] == wins
    assert json.loads((tmp_path / "report.json").read_text()) == report


def test_train_help_lists_every_config_section():
    result = runner.invoke(app, ["train", "--help"])
    config_help = next(
        p.help for p in get_command(app).commands["train"].params if p.name == "config"
    )
    assert list(Config.model_fields) == config_help.split("sections: ")[1].rstrip(").").split(", ")
    assert {"curriculum", "tools"} <= set(Config.model_fields)
    assert all(name in result.output for name in Config.model_fields)


def test_sandbox_run_without_bwrap_names_the_flag(tmp_path, monkeypatch):
    import agentrl.sandbox as sandbox
    from agentrl.sandbox import bwrap
    from agentrl.sandbox import runner as sandbox_runner

    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    for module in (bwrap, sandbox_runner):  # wherever the probe looks bwrap up
        monkeypatch.setattr(module, "find_bwrap", lambda: None)
    sandbox.bwrap_status.cache_clear()
    try:
        result = runner.invoke(app, ["sandbox", "run", str(script)])
        with pytest.raises(sandbox.SandboxUnavailable, match="tools.sandbox.mode=unsafe"):
            sandbox.run_code("print(1)")  # the config path keeps the config's switch
    finally:
        sandbox.bwrap_status.cache_clear()  # no cached "missing" for later tests
    assert result.exit_code == 2
    assert "pass --unsafe" in result.output and "tools.sandbox.mode" not in result.output
    assert "apt-get install -y bubblewrap" in result.output
    assert len(result.output.strip().splitlines()) == 1


# --- the docs and the CLI agree ----------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
README, BENCH_README = ROOT / "README.md", ROOT / "bench" / "README.md"
DOCS = [
    README,
    BENCH_README,
    *sorted((ROOT / "bench").glob("*.py")),
    *(ROOT / "examples").glob("*.py"),
]
OPTION = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def _commands(cmd=None, prefix=""):
    """'eval' -> its click command, 'sandbox run' -> ...: every subcommand of the app."""
    cmd = cmd or get_command(app)
    if not hasattr(cmd, "commands"):
        return {prefix: cmd}
    out = {}
    for name, sub in cmd.commands.items():
        out |= _commands(sub, f"{prefix} {name}".strip())
    return out


def _options(cmd):
    return {"--help", *(o for p in cmd.params for o in (*p.opts, *p.secondary_opts))}


def documented_commands(text: str, names) -> list[tuple[str, str]]:
    """(subcommand, the rest of its line) for every ``agentrl SUB ...`` in ``text``; a span ends
    at a backtick, a ``#`` comment or the line's end (continued lines are joined)."""
    text = re.sub(r"\\+\n\s*", " ", text)
    alt = "|".join(re.escape(n).replace(r"\ ", r"\s+") for n in sorted(names, key=len)[::-1])
    return [
        (" ".join(m.group(1).split()), m.group(2))
        for m in re.finditer(rf"\bagentrl\s+({alt})\b([^`#\n]*)", text)
    ]


def test_documented_commands_use_only_real_options():
    commands = _commands()
    seen, wrong = [], []
    for path in DOCS:
        for name, rest in documented_commands(path.read_text(encoding="utf-8"), commands):
            seen.append(name)
            options = _options(commands[name])
            wrong += [f"{path.name}: agentrl {name} ... {o}" for o in OPTION.findall(rest)
                      if o not in options]  # fmt: skip
    assert not wrong
    assert seen.count("eval") >= 4 and {"demo", "train", "envs", "sandbox run"} <= set(seen)


def test_help_texts_name_only_their_own_options():
    wrong = []
    for name, cmd in _commands().items():
        for text in [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]:
            wrong += [f"{name}: {o}" for o in OPTION.findall(text) if o not in _options(cmd)]
    assert not wrong


def test_no_doc_offers_a_policy_option():
    """The policy is positional: ``agentrl eval POLICY``, ``bench/bfcl_bench.py POLICY``."""
    hits = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in DOCS
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "--policy" in line
    ]
    assert not hits
    eval_args = [p.name for p in _commands()["eval"].params if not p.opts[0].startswith("-")]
    assert eval_args == ["policy"]


def _env_keywords() -> set[str]:
    """What ``task.env_kwargs`` may hold: the env keywords and any built-in family's own."""
    import inspect

    from agentrl.envs import TaskFamily
    from agentrl.envs.registry import ENV_KWARGS

    families, todo = set(), [TaskFamily]
    while todo:
        todo += [c for c in todo.pop().__subclasses__() if c not in families]
        families |= set(todo)
    own = {p for f in families for p in inspect.signature(f.__init__).parameters}
    return set(ENV_KWARGS) | own - {"self", "args", "kwargs"}


def _is_field(key: str) -> bool:
    model, parts = Config, key.split(".")
    for i, part in enumerate(parts):
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            return False
        if parts[: i + 1] == ["task", "env_kwargs"]:  # a dict: its keys go to make()
            return len(parts) == i + 1 or (len(parts) == i + 2 and parts[-1] in _env_keywords())
        model = fields[part].annotation
    return True


def test_documented_config_keys_exist():
    key = re.compile(rf"(?<![\w/.-])((?:{'|'.join(Config.model_fields)})(?:\.[a-z_]\w*)+)")
    found = {k for path in (README, BENCH_README) for k in key.findall(path.read_text())}
    found = {k for k in found if k.rsplit(".", 1)[1] not in ("py", "yaml", "json", "jsonl")}
    assert {"algo.kl.coef", "tools.sandbox.mode", "curriculum.enabled"} <= found
    assert sorted(k for k in found if not _is_field(k)) == []


def test_readme_lists_every_env_and_config_section():
    out = subprocess.run(
        [sys.executable, "-c", "from agentrl.envs import list_envs; print(*list_envs())"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    builtin = set(out.stdout.split())  # a fresh process: only the envs agentrl registers
    text = README.read_text(encoding="utf-8")
    assert "arith_code" in builtin and builtin <= set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    layout = re.search(r"tasks/ \(([^)]*)\)", text).group(1)
    assert set(layout.replace(" ", "").split(",")) == builtin
    sections = re.search(r"in the sections (.*?); `--set", text, re.S).group(1)
    assert re.findall(r"`(\w+)`", sections) == list(Config.model_fields)


def test_demo_model_option_picks_the_pretrained_preset(monkeypatch, tmp_path):
    import agentrl.train

    seen = {}

    def fake_train(cfg, **_):
        seen["cfg"] = cfg
        return {"success_before": 0.1, "success_after": 0.2, "episodes": 96, "run_dir": "x"}

    monkeypatch.setattr(agentrl.train, "train", fake_train)
    run = str(tmp_path / "r")
    result = runner.invoke(app, ["demo", "--model", "agentrl/smollm2-135m", "--run-dir", run])
    assert result.exit_code == 0, result.output
    cfg = seen["cfg"]
    assert cfg.model.name == "agentrl/smollm2-135m" and cfg.algo.lr == 2e-5
    assert cfg.rollout.group_size == 8 and cfg.train.steps == 20
    assert cfg.rollout.max_total_tokens == 1536 and not cfg.curriculum.enabled
    assert runner.invoke(app, ["demo", "--run-dir", run]).exit_code == 0
    assert seen["cfg"].model.name == "agentrl/tiny" and seen["cfg"].curriculum.enabled


def test_eval_general_needs_a_model():
    result = runner.invoke(app, ["eval", "reference", "--general"])
    assert result.exit_code == 2
    assert "--general checks a model" in result.output


def test_eval_search_reports_its_cost_through_the_real_engine(tiny_dir, tmp_path):
    args = ["eval", str(tiny_dir), "--episodes", "2", "--levels", "1", "--search", "3",
            "--depth", "2", "--json", "--max-turns", "2"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    cost = report["search"]
    assert (cost["k"], cost["depth"]) == (3, 2) and report["episodes"] == 2
    turns = report["mean_turns"] * 2
    assert cost["branches"] == 3 * turns  # three candidates at every kept turn
    assert cost["branch_tokens"] >= cost["episode_tokens"] > 0
    assert "tree search K=3 depth=2" in result.output
    bad = runner.invoke(app, ["eval", "reference", "--search", "2"])
    assert bad.exit_code == 2 and "--search and --depth need a model" in bad.output
    assert runner.invoke(app, ["eval", str(tiny_dir), "--search", "0"]).exit_code == 2


def test_serve_names_a_missing_model():
    result = runner.invoke(app, ["serve", "/no/such/model"])
    assert result.exit_code == 2 and "/no/such/model" in result.output
