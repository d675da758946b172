"""One owner per part of a worker's state (issue 36, point 1): the Committer owns the
offsets and commits, the Flow its own fields.

Read from the source, so that a new part cannot quietly take a share again: outside
``actors/worker/committer.py`` no module of the actors (the worker and everything it
runs; the operator tools of ``service/ops`` commit their own consumers) calls a
consumer's ``commit``, builds an :class:`~actors.offsets.OffsetTracker` or reaches a
tracker; the other parts hold :class:`~actors.offsets.OffsetView` (read-only, which mypy
enforces) and report events to the Committer.
"""

from __future__ import annotations

import ast
from pathlib import Path

from aiokafka import TopicPartition

from actors.worker.commit_policies import CommitPolicy
from actors.worker.committer import Committer
from settings.models import CommitSettings
from tests.doc_blocks import run_block

ROOT = Path(__file__).resolve().parents[2]
OWNER = ROOT / "actors" / "worker" / "committer.py"
TRACKER = ROOT / "actors" / "offsets.py"


def _product_modules() -> list[Path]:
    return sorted((ROOT / "actors").rglob("*.py"))


def _offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = ast.unparse(node.func.value)
            if node.func.attr == "commit" and "consumer" in receiver.lower():
                found.append(f"{where}: {receiver}.commit(...)")
        if isinstance(node, ast.Name) and node.id == "OffsetTracker":
            found.append(f"{where}: OffsetTracker")
        if isinstance(node, ast.Attribute) and node.attr in ("tracker", "_tracker"):
            found.append(f"{where}: .{node.attr}")
    return found


def test_only_the_committer_commits_and_changes_the_offsets() -> None:
    offences = [o for path in _product_modules() if path not in (OWNER, TRACKER)
                for o in _offences(path)]
    assert offences == []


def test_the_check_sees_the_committer_itself() -> None:
    """The check is not blind: the owner's own module does each thing it forbids."""
    found = "\n".join(_offences(OWNER))
    assert ".commit(...)" in found and "OffsetTracker" in found and "._tracker" in found


FLOW = ROOT / "actors" / "worker" / "flow.py"
# Events the parts wait on and signal: signalling one is no change of the flow's state.
FLOW_SIGNALS = {"progress", "room"}
MUTATORS = {"append", "add", "clear", "discard", "pop", "popitem", "remove", "set",
            "setdefault", "update"}


def _flow_writes(path: Path) -> list[str]:
    """Writes to a Flow's fields (``flow.x = ...``, ``flow.x[k] = ...``, ``flow.x += ...``,
    ``flow.x.update(...)``) in ``path``."""
    found = []
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path

    def flow_field(node: ast.expr) -> str | None:
        if isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Attribute) and ast.unparse(node.value).endswith("flow"):
            return node.attr
        return None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets
                       for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATORS):
            field = flow_field(node.func.value)
            if field is not None and field not in FLOW_SIGNALS:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node.func)}(...)")
        for target in targets:
            if flow_field(target) is not None:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(target)} =")
    return found


def test_only_the_flow_changes_its_fields() -> None:
    """The other parts report to the Flow through its methods (assign, revoke,
    processing, park, hold, ...); they read its fields, never write them."""
    offences = [o for path in _product_modules() if path != FLOW for o in _flow_writes(path)]
    assert offences == []


def test_the_flow_check_sees_writes(tmp_path: Path) -> None:
    """The check is not blind: each kind of write it forbids is found."""
    module = tmp_path / "probe.py"
    code = ("def f(flow, self, tp):\n    flow.assigned = set()\n    self.flow.lanes[tp] = 1\n"
            "    flow.in_flight += 1\n    flow.held.update({})\n    del self.flow.lanes[tp]\n"
            "    flow.progress.set()\n    flow.current_tp, flow.current_gen = tp, 0\n")
    module.write_text(code)
    found = _flow_writes(module)
    assert len(found) == 7, found  # the tuple assignment writes two fields


async def test_the_commit_mode_of_the_architecture_doc_commits_when_caught_up() -> None:
    """docs/architecture.md's example policy, run by a real Committer over a consumer
    that records commits: an idle advance commits at once, an ack commits when due."""
    policy_type = run_block("docs/architecture.md", "class CaughtUpCommits")["CaughtUpCommits"]
    assert issubclass(policy_type, CommitPolicy)
    committed: list[dict[TopicPartition, int]] = []

    class Consumer:
        async def commit(self, offsets: dict[TopicPartition, int]) -> None:
            committed.append(dict(offsets))

    stats = {"committed": 0}
    committer = Committer(policy_type(CommitSettings(mode="batch", max_messages=3)),
                          Consumer(), label="t", stats=stats)  # type: ignore[arg-type]
    tp = TopicPartition("t", 0)
    committer.seeded(tp, 0)
    entry = committer.shipped(tp, 2, 2, savepoint=False)
    committer.acked(entry)
    assert not committer.due.is_set(), "2 acked of max_messages 3: not due yet"
    await committer.idle(committer.reached(tp, 5))  # caught up past a commit marker
    assert committed == [{tp: 5}] and stats["committed"] == 1
    third = committer.shipped(tp, 8, 3, savepoint=False)
    committer.acked(third)
    assert committer.due.is_set(), "3 acked since the last commit: due"
