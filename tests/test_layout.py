"""The code-shape rules of DESIGN.md as tests: file and function sizes, no import circles,
and the direction of the layers. Pure ``ast``: nothing of ``agentrl`` is imported.

Import graph: one node per module, a package ``agentrl.x`` is its ``__init__.py``.
``import a.b`` is an edge to ``a.b``; ``from a import b`` is an edge to ``a`` (its
``__init__`` runs) and, when ``a.b`` is a module, to ``a.b`` too. Imports under
``if TYPE_CHECKING:`` are ignored; imports inside functions are "deferred" edges: they do not
make an import-time circle, but a deferred import that closes a circle only hides it.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "agentrl"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
TRAIN = ("agentrl.train", "agentrl.trainer", "agentrl.rl_setup")  # the last two move into train/
LAYER_RULES = (  # (importer layers, forbidden layers)
    (("agentrl.eval", "agentrl.serve"), TRAIN),
    (("agentrl.policy",), ("agentrl.algos", "agentrl.engine")),
    (("agentrl.engine",), ("agentrl.rollout", "agentrl.algos", *TRAIN)),
)

Graph = dict[str, set[str]]


def discover(root: Path, package: str) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` under ``root`` (the package directory)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def iter_imports(node: ast.AST, deferred: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement under ``node`` with whether it sits inside a function."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, deferred
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from iter_imports(ast.Module([other], []), deferred)
        else:
            inner = deferred or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            yield from iter_imports(child, inner)


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of dotted ``name`` that is a module of the package."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def import_targets(stmt: ast.stmt, module: str, modules: dict[str, Path]) -> set[str]:
    """The package's modules that one import statement of ``module`` loads."""
    found: list[str | None] = []
    if isinstance(stmt, ast.Import):
        found = [_known(alias.name, modules) for alias in stmt.names]
    elif isinstance(stmt, ast.ImportFrom):
        base = stmt.module or ""
        if stmt.level:
            is_pkg = modules[module].name == "__init__.py"
            anchor = module.split(".")[: None if is_pkg else -1]
            anchor = anchor[: len(anchor) - (stmt.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        found.append(_known(base, modules))
        found += [f"{base}.{a.name}" for a in stmt.names if f"{base}.{a.name}" in modules]
    return {t for t in found if t is not None and t != module}


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> tuple[Graph, Graph]:
    """(module-level edges, deferred edges) between the modules of ``package``."""
    modules = discover(root, package)
    eager: Graph = {m: set() for m in modules}
    deferred: Graph = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for stmt, inside_function in iter_imports(tree):
            (deferred if inside_function else eager)[module] |= import_targets(
                stmt, module, modules
            )
    for module in modules:
        deferred[module] -= eager[module]
    return eager, deferred


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def shortest_path(graph: Graph, start: str, goal: str, within: set[str] | None = None):
    """The shortest path ``[start, ..., goal]`` of at least one edge, or ``None``."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph.get(v, ())):
            if within is not None and w not in within:
                continue
            if w == goal:
                path = [w, v]
                while path[-1] in parent:
                    path.append(parent[path[-1]])
                return path[::-1]
            if w not in parent and w != start:
                parent[w] = v
                queue.append(w)
    return None


def circles(graph: Graph) -> list[str]:
    """One line per strongly connected component: its shortest circle ``a -> b -> a``, its
    size when bigger, and its edges into an own package's ``__init__`` (the usual culprit)."""
    out = []
    for component in strongly_connected(graph):
        members = set(component)
        path = shortest_path(graph, component[0], component[0], members)
        text = " -> ".join(path)
        if len(component) > len(path) - 1:
            text += f"  [{len(component)} modules: {', '.join(component)}]"
        own = [
            f"{u} -> {v}"
            for u in component
            for v in sorted(graph[u] & members)
            if u.startswith(v + ".")
        ]
        if own:
            text += f"  [imports of an own package's __init__: {'; '.join(own)}]"
        out.append(text)
    return out


def hidden_circles(eager: Graph, deferred: Graph) -> list[str]:
    """Circles closed only by a deferred (in-function) import, one per deferred edge."""
    both = {m: eager.get(m, set()) | deferred.get(m, set()) for m in {*eager, *deferred}}
    out = []
    for a in sorted(deferred):
        for b in sorted(deferred[a]):
            back = shortest_path(both, b, a)
            if back is not None:
                hops = [
                    f"{u} -> " if v in eager.get(u, ()) else f"{u} -(in a function)-> "
                    for u, v in zip([a, *back], back, strict=False)
                ]
                out.append("".join(hops) + a)
    return out


def in_layer(module: str, layers: tuple[str, ...]) -> bool:
    return any(module == layer or module.startswith(layer + ".") for layer in layers)


def layer_violations(eager: Graph, deferred: Graph) -> list[str]:
    """For each module of a lower layer, its shortest import chain into a forbidden layer."""
    both = {m: eager.get(m, set()) | deferred.get(m, set()) for m in {*eager, *deferred}}
    out = []
    for sources, forbidden in LAYER_RULES:
        for start in sorted(m for m in both if in_layer(m, sources)):
            parent: dict[str, str] = {start: start}
            queue = deque([start])
            while queue:
                v = queue.popleft()
                if in_layer(v, forbidden):
                    chain = [v]
                    while chain[-1] != start:
                        chain.append(parent[chain[-1]])
                    out.append(" -> ".join(chain[::-1]))
                    break
                for w in sorted(both[v] - parent.keys()):
                    parent[w] = v
                    queue.append(w)
    return out


def report(title: str, problems: list[str]) -> str:
    text = f"{len(problems)} {title}:\n  " + "\n  ".join(problems)
    print(text)
    return text


# --- the rules, on agentrl/ -----------------------------------------------------------


def test_no_file_over_the_line_limit():
    long = []
    for path in discover(ROOT, PACKAGE).values():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_FILE_LINES:
            long.append(f"{path.relative_to(ROOT.parent)}: {n} lines")
    assert not long, report(f"files over {MAX_FILE_LINES} lines", long)


def test_no_function_over_the_line_limit():
    long = []
    for path in discover(ROOT, PACKAGE).values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1  # from the `def` line, decorators excluded
                if n > MAX_FUNCTION_LINES:
                    where = f"{path.relative_to(ROOT.parent)}:{node.lineno}"
                    long.append(f"{where}::{node.name}: {n} lines")
    assert not long, report(f"functions over {MAX_FUNCTION_LINES} lines", long)


def test_no_import_circle():
    eager, _ = import_graph()
    found = circles(eager)
    assert not found, report("import circles (module-level imports)", found)


def test_no_circle_hidden_by_an_import_inside_a_function():
    found = hidden_circles(*import_graph())
    assert not found, report("import circles closed by an import inside a function", found)


def test_layers_import_one_way():
    found = layer_violations(*import_graph())
    assert not found, report("imports against the layer direction", found)


# --- the checker itself, on hand-made graphs and a hand-made package ---------------------


def test_the_checker_reads_the_real_package():
    """Guards against passing vacuously (a wrong root finds no files and no edges)."""
    modules = discover(ROOT, PACKAGE)
    assert len(modules) > 50 and modules["agentrl.chat.parser"] == ROOT / "chat" / "parser.py"
    assert modules["agentrl.chat"] == ROOT / "chat" / "__init__.py"
    eager, _ = import_graph()
    assert "agentrl.types" in eager["agentrl.chat.parser"]


def test_circle_finder_on_a_tiny_graph():
    graph = {
        "a": {"b"},
        "b": {"a", "c"},  # a <-> b
        "c": {"d"},
        "d": {"e"},
        "e": {"c", "f"},  # c -> d -> e -> c
        "f": set(),
        "g": {"f"},
    }
    assert strongly_connected(graph) == [["a", "b"], ["c", "d", "e"]]
    assert circles(graph) == ["a -> b -> a", "c -> d -> e -> c"]
    assert circles({"x": {"y"}, "y": {"z"}, "z": set()}) == []
    # a component bigger than its shortest circle says so
    assert circles({"p": {"q", "r"}, "q": {"p"}, "r": {"q"}}) == [
        "p -> q -> p  [3 modules: p, q, r]"
    ]
    assert circles({"x": {"x.y"}, "x.y": {"x"}}) == [
        "x -> x.y -> x  [imports of an own package's __init__: x.y -> x]"
    ]


def test_hidden_circles_and_layers_on_a_tiny_graph():
    eager = {"m.a": {"m.b"}, "m.b": set(), "m.c": set()}
    deferred = {"m.a": set(), "m.b": {"m.a"}, "m.c": set()}
    assert circles(eager) == []
    assert hidden_circles(eager, deferred) == ["m.b -(in a function)-> m.a -> m.b"]
    graph = {
        "agentrl.eval.run": {"agentrl.rollout"},
        "agentrl.rollout": {"agentrl.train.loop"},
        "agentrl.train.loop": set(),
        "agentrl.trainerx": set(),
    }
    assert layer_violations(graph, {}) == [
        "agentrl.eval.run -> agentrl.rollout -> agentrl.train.loop"
    ]
    assert in_layer("agentrl.train", TRAIN) and not in_layer("agentrl.trainerx", TRAIN)


def test_import_graph_on_a_hand_made_package(tmp_path):
    files = {
        "__init__.py": "",
        "p/__init__.py": "from pkg.p.core import Env\n",
        "p/core.py": "from pkg.p import ref\n",  # own package's __init__: a circle
        "p/ref.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.q import Q\n"
            "def f():\n    from . import core\n"  # deferred, closes ref -> core -> ref
        ),
        "q.py": "import os\nimport pkg.p.ref as r\nclass Q:\n    from .p import core\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    eager, deferred = import_graph(tmp_path, "pkg")
    assert eager == {
        "pkg": set(),
        "pkg.p": {"pkg.p.core"},
        "pkg.p.core": {"pkg.p", "pkg.p.ref"},
        "pkg.p.ref": set(),
        "pkg.q": {"pkg.p", "pkg.p.core", "pkg.p.ref"},
    }
    assert deferred["pkg.p.ref"] == {"pkg.p", "pkg.p.core"}
    assert circles(eager) == [
        "pkg.p -> pkg.p.core -> pkg.p  [imports of an own package's __init__: pkg.p.core -> pkg.p]"
    ]
    assert "pkg.p.ref -(in a function)-> pkg.p.core -> pkg.p.ref" in hidden_circles(eager, deferred)
