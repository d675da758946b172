"""The package edges the architecture promises (docs/architecture.md): no import cycle
inside ``actors/`` (imports under ``TYPE_CHECKING`` count too), the worker's parts never
import the worker, and no module of ``actors/worker/`` grows past ~450 lines; no import
cycle inside ``settings/`` (lazy imports included) and no module of it past 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _imports(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of ``package`` it imports (whether at
    the top, in a function or under ``TYPE_CHECKING``)."""
    modules = {_module(p): p for p in (ROOT / package).rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                found = resolve(target)
                if found is not None and found != name:
                    out.add(found)
        edges[name] = out
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``edges`` (None: there is none)."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_cycle_inside_actors() -> None:
    cycle = _cycle(_imports("actors"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_worker_parts_never_import_the_worker() -> None:
    edges = _imports("actors")
    importers = sorted(name for name, out in edges.items()
                       if "actors.worker.worker" in out and name != "actors.worker")
    assert importers == [], importers


def test_no_import_cycle_inside_settings() -> None:
    cycle = _cycle(_imports("settings"))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_no_settings_module_is_over_400_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines())
             for p in (ROOT / "settings").rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 400} == {}


def test_no_worker_module_is_over_450_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines())
             for p in (ROOT / "actors" / "worker").glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 450} == {}


FLOORS = {"settings": 0, "processors": 1, "actors": 2, "service": 3}
"""The product's floors, lowest first: a package imports only its own floor or lower ones."""


def _upward_imports() -> list[str]:
    """``file:line imports module`` for every import of a product module (at the top, in a
    function or under ``TYPE_CHECKING``) that reaches a higher floor than its own."""
    found = []
    for package, floor in FLOORS.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            here = _module(path).split(".")
            if path.name != "__init__.py":
                here = here[:-1]  # the package a relative import starts from
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom):
                    base = here[:len(here) - node.level + 1] if node.level else []
                    targets = [".".join([*base, node.module or ""]).rstrip(".")]
                elif isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                else:
                    continue
                for target in targets:
                    if FLOORS.get(target.partition(".")[0], -1) > floor:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    return found


def test_no_upward_import() -> None:
    upward = _upward_imports()
    assert upward == [], "upward imports (settings → processors → actors → service):\n" \
        + "\n".join(upward)
