"""The table jobs' edges (docs/architecture.md): the shell (``service/``) reaches the
lakehouse table jobs (``actors/tables/``) only through the package's entry, the names of
``actors/tables/__init__.py``'s ``__all__``, and the sinks (``actors/sinks/``) never import
the table jobs: the jobs build on the sink, not the other way round."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOBS = "actors.tables"


def _entry() -> set[str]:
    """The names the entry exports (its ``__all__``)."""
    tree = ast.parse((ROOT / "actors" / "tables" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def _jobs_imports(package: str) -> list[tuple[str, str]]:
    """``(file:line, what)`` for every import of the table jobs in ``package`` (at the
    top, in a function or under ``TYPE_CHECKING``): ``what`` is the module imported, or
    ``actors.tables:NAME`` for a name taken from the package itself."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if node.module == JOBS:
                    found += [(where, f"{JOBS}:{alias.name}") for alias in node.names]
                elif node.module.startswith(JOBS + "."):
                    found.append((where, node.module))
            elif isinstance(node, ast.Import):
                found += [(where, alias.name) for alias in node.names
                          if alias.name == JOBS or alias.name.startswith(JOBS + ".")]
    return found


def _is_module(what: str) -> bool:
    """Whether ``actors.tables:NAME`` names a module of the package (not the entry's)."""
    name = what.partition(":")[2]
    jobs = ROOT / "actors" / "tables"
    return (jobs / f"{name}.py").exists() or (jobs / name / "__init__.py").exists()


def test_the_shell_reaches_the_table_jobs_through_the_entry_only() -> None:
    entry = _entry()
    assert entry, "actors/tables/__init__.py exports nothing (__all__)"
    beside = [f"{where} imports {what}" for where, what in _jobs_imports("service")
              if ":" not in what or _is_module(what) or what.partition(":")[2] not in entry]
    assert beside == [], "service/ imports table jobs beside their entry:\n" + "\n".join(beside)


def test_the_sinks_never_import_the_table_jobs() -> None:
    upward = [f"{where} imports {what}" for where, what in _jobs_imports("actors/sinks")]
    assert upward == [], "the sinks import the table jobs:\n" + "\n".join(upward)


def test_every_name_of_the_entry_is_found() -> None:
    import actors.tables as entry

    missing = [name for name in sorted(_entry()) if not hasattr(entry, name)]
    assert missing == []
    assert not hasattr(entry, "no_such_job")


def test_a_name_exported_under_another_is_the_job_even_once_its_module_is_loaded() -> None:
    """``merge_tables`` is the merge function although ``actors.tables.merge`` (the module,
    bound in the package on import) is loaded, and ``legacy_problems`` legacy's ``problems``."""
    import actors.tables as entry
    from actors.tables import legacy, merge

    assert entry.merge is merge  # the module: why the entry exports the function as merge_tables
    assert entry.merge_tables is merge.merge
    assert entry.legacy_problems is legacy.problems
