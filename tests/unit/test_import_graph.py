"""caovan's modules import each other without a circle, and the plugin's patches of vLLM never ask adapters/.

A circle (adapters -> plugin -> adapters, as the uniform-decode guard once made by asking the registry for the
family) makes import order matter and hides which side owns what. The graph is read from the source (every
``import`` and ``from ... import``, those inside functions included, those under ``if TYPE_CHECKING:`` left out:
they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
#: The plugin's entry (start-up) selects the adapter: the one module of plugin/ that may import adapters/.
PLUGIN_ENTRY = {"caovan.plugin", "caovan.plugin.startup"}


def _module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = {_module_name(p, src): p for p in src.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package[: len(package) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_of_caovan_imports_itself_through_others():
    assert cycles(import_graph()) == []


def test_the_plugins_patches_of_vllm_are_handed_the_family_never_ask_adapters():
    graph = import_graph()
    asking = {
        module: sorted(t for t in targets if t.startswith("caovan.adapters"))
        for module, targets in graph.items()
        if module.startswith("caovan.plugin") and module not in PLUGIN_ENTRY
    }
    assert {m: t for m, t in asking.items() if t} == {}


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"a.py": "from . import b\n", "b.py": "def f():\n    from .a import x\n"}, [["pkg.a", "pkg.b"]]),
        (
            {
                "a.py": "from . import b\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
            },
            [],
        ),
    ],
)
def test_the_checker_finds_a_circle_through_a_function_level_import_and_skips_type_checking(
    tmp_path: Path, files, expected
):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in files.items():
        (package / name).write_text(text)
    assert cycles(import_graph(tmp_path)) == expected
