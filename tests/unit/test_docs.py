"""Docs that run: every YAML block and every ``kstage`` command line of README.md and docs/.

* A fenced ``yaml`` block with a top-level ``groups:`` is a whole configuration: it is
  written to a file and passed to ``kstage validate`` (in-process), with the variables it
  references set to dummy values and the repository as working directory; each topic's
  ``sink`` is also validated against its sink type's settings model.
* Any other ``yaml`` block is a fragment: each top-level key is validated as the part of
  the settings it belongs to (a section of :class:`Settings`, a group key, or a topic key;
  ``sink:`` against its type's model). A key that cannot be placed is a failure.
* Every ``kstage ...`` (or ``python -m service ...``) command line in a ``bash``, ``sh``,
  ``shell``, ``console`` or ``text`` block must parse with the CLI's parser.
* Relative links and their ``#anchors`` resolve.
* Every row of the peer comparison (``docs/comparison.md``) gives each project a verdict
  and links each peer's cell to that peer's own documentation.

A ``yaml`` block whose first line is ``# docs-test: helm-values FILE`` holds values of the
Helm chart, not a kstage configuration: ``tests/unit/test_helm_chart.py`` writes it to FILE
and runs the page's ``helm`` commands with it (its ``config`` must pass ``kstage validate``).

A block that cannot be checked says so visibly with a line ``# docs-test: skip REASON``,
a whole configuration whose processor is not installed while the suite runs with
``# docs-test: settings-only REASON`` (the settings model and sinks are still checked, the
processors are not); such markers must stay rare (see :data:`MAX_SKIPS`). The checks
return their problems, so the last tests here feed them broken blocks and see them fail.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from actors.sinks import registry
from service import cli
from settings.errors import SettingsError
from settings.loader import load_settings
from settings.models import GroupSettings, Settings, TopicSettings
from settings.yaml_file import read_yaml
from tests.kafkautil import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGS = {"bash", "sh", "shell", "console", "text"}
SKIP = re.compile(r"#\s*docs-test:\s*skip\b\s*(?P<reason>.*)$", re.MULTILINE)
SETTINGS_ONLY = re.compile(r"#\s*docs-test:\s*settings-only\b\s*(?P<reason>.*)$", re.MULTILINE)
HELM_VALUES = re.compile(r"\A#\s*docs-test:\s*helm-values\s+(?P<file>\S+)\s*$", re.MULTILINE)
MAX_SKIPS = 3
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<default>:-[^}]*)?\}")
_COMMAND = re.compile(r"(^|[\s;&|(])(\S*/)?(kstage|python3? -m service)\s")
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it starts (the line after the fence) and its text."""

    path: Path
    line: int
    lang: str
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path, text: str | None = None) -> list[Block]:
    """The fenced code blocks of a markdown file (or of ``text``, named ``path``)."""
    found: list[Block] = []
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    start, lang = -1, ""
    for number, line in enumerate(lines, 1):
        fence = _FENCE.match(line)
        if fence is None:
            continue
        if start < 0:
            start, lang = number, fence["lang"].lower()
        else:
            found.append(Block(path, start + 1, lang, "\n".join(lines[start:number - 1]) + "\n"))
            start = -1
    assert start < 0, f"{path}:{start}: a fence that is never closed"
    return found


def _all_blocks() -> list[Block]:
    return [block for path in DOCS for block in blocks(path)]


def _yaml_blocks() -> list[Block]:
    return [b for b in _all_blocks() if b.lang in ("yaml", "yml") and not SKIP.search(b.text)
            and not HELM_VALUES.match(b.text)]


def helm_values_blocks() -> list[Block]:
    """The blocks of the Helm chart's values (checked by tests/unit/test_helm_chart.py)."""
    return [b for b in _all_blocks() if b.lang in ("yaml", "yml") and HELM_VALUES.match(b.text)]


def _dummy_environment(text: str) -> dict[str, str]:
    """Values for the ``${VAR}`` references without default that ``text`` makes."""
    env: dict[str, str] = {}
    for ref in _VAR.finditer(text):
        if ref["default"] is None:
            name = ref["name"]
            env[name] = ("http://localhost:8081" if "URL" in name
                         else "localhost:9092" if "BOOTSTRAP" in name else f"dummy-{name}")
    return env


# -------------------------------------------------------------------- the checks


def _sink_is_a_free_bag() -> bool:
    """Whether a topic's ``sink`` still accepts any key (then the test checks its type)."""
    annotation = TopicSettings.model_fields["sink"].annotation
    return isinstance(annotation, type) and issubclass(annotation, BaseModel) \
        and annotation.model_config.get("extra") == "allow"


def check_sink(value: Any, where: str) -> list[str]:
    """Problems of one topic's ``sink`` mapping.

    It is validated as the topic's ``sink`` field. While that field is a free bag
    (``extra="allow"``), the mapping is also checked against its type's own model here;
    once sinks are a union on ``type`` that refuses unknown keys, the field does it all.
    """
    try:
        sink_type: Any = TopicSettings.model_fields["sink"].annotation
        TypeAdapter(sink_type).validate_python(value)
    except ValidationError as exc:
        return [f"{where}: sink: {exc}"]
    if not _sink_is_a_free_bag():
        return []
    kind = value.get("type", "null") if isinstance(value, dict) else "null"
    try:
        model = registry.load(str(kind)).settings_model
    except registry.SinkTypeError as exc:
        return [f"{where}: sink: {exc}"]
    try:
        model.model_validate(value)
    except ValidationError as exc:
        return [f"{where}: sink ({kind}): {exc}"]
    return []


def check_whole_config(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                       ) -> list[str]:
    """Problems of a whole configuration: ``kstage validate``, then every topic's sink."""
    config = tmp_path / "kstage.yml"
    config.write_text("\n" * (block.line - 1) + block.text, encoding="utf-8")  # same lines
    env = _dummy_environment(block.text)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(ROOT)  # relative paths in the docs (reader_schema) are the repo's
    if SETTINGS_ONLY.search(block.text):
        try:
            load_settings(config)
        except SettingsError as exc:
            return [f"{block}: {str(exc).replace(str(config), str(block.path.name))}"]
    else:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(["validate", "-c", str(config)])
        if code != 0:
            shown = err.getvalue().strip().replace(str(config), str(block.path.name))
            return [f"{block}: kstage validate exit {code}: {shown}"]
    settings = load_settings(config)
    return [problem for gi, group in enumerate(settings.groups)
            for ti, topic in enumerate(group.topics)
            for named in topic.named_sinks()
            for problem in check_sink(named.settings.model_dump(exclude_unset=True),
                                      f"{block}: groups[{gi}].topics[{ti}]")]


def _placed(key: str) -> tuple[str, Any] | None:
    """Where a fragment's top-level ``key`` belongs: (what, the type to validate with)."""
    for what, model in (("settings", Settings), ("group", GroupSettings),
                        ("topic", TopicSettings)):
        if key in model.model_fields and not (what == "settings" and key == "groups"):
            return what, model.model_fields[key].annotation
    return None


def check_fragment(block: Block, tmp_path: Path) -> list[str]:
    """Problems of a fragment: each top-level key validated as its part of the settings."""
    fragment = tmp_path / "fragment.yml"
    fragment.write_text("\n" * (block.line - 1) + block.text, encoding="utf-8")  # same lines
    try:
        data, _ = read_yaml(fragment, str(block.path.relative_to(ROOT)),
                             _dummy_environment(block.text))
    except SettingsError as exc:  # names the markdown file and line
        return [str(exc)]
    if not data:
        return [f"{block}: an empty YAML block"]
    problems: list[str] = []
    for key, value in data.items():
        place = _placed(key)
        if place is None:
            problems.append(f"{block}: {key!r} is not a settings section, group key or "
                            "topic key (mark the block `# docs-test: skip REASON`)")
            continue
        what, annotation = place
        if key == "sink":
            problems += check_sink(value, str(block))
            continue
        try:
            TypeAdapter(annotation).validate_python(value)
        except ValidationError as exc:
            problems.append(f"{block}: {key} (a {what} key): {exc}")
    return problems


def _command_lines(block: Block) -> Iterator[str]:
    """The shell lines of a block (``\\`` continuations joined, ``$`` prompts cut)."""
    pending = ""
    for raw in block.text.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        yield line.removeprefix("$ ")


def _invocations(line: str) -> Iterator[list[str]]:
    """The argument lists of each ``kstage`` / ``python -m service`` command of ``line``."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segment: list[str] = []
    for token in [*lexer, ";"]:
        if token and set(token) <= set("();<>|&"):
            if segment and (segment[0] == "kstage" or segment[0].endswith("/kstage")):
                yield segment[1:]
            elif len(segment) >= 3 and re.fullmatch(r"(\S*/)?python3?", segment[0]) \
                    and segment[1:3] == ["-m", "service"]:
                yield segment[3:]
            segment = []
        else:
            segment.append(token)


def check_commands(block: Block) -> list[str]:
    """Problems of the ``kstage`` command lines of a shell or text block."""
    problems: list[str] = []
    for line in _command_lines(block):
        if not _COMMAND.search(line):
            continue
        try:
            invocations = list(_invocations(line))
        except ValueError as exc:
            problems.append(f"{block}: {line!r}: not a shell line: {exc}")
            continue
        for argv in invocations:
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    cli.parser().parse_args(argv)
                except SystemExit as exc:
                    if exc.code not in (0, None):
                        problems.append(f"{block}: kstage {shlex.join(argv)}: "
                                        f"{(err.getvalue().strip().splitlines() or ['?'])[-1]}")
    return problems


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    inside, found = False, set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            inside = not inside
        elif not inside and line.startswith("#"):
            found.add(_anchor(line.lstrip("#")))
    return found


def check_links(path: Path, text: str | None = None) -> list[str]:
    """Relative links of a markdown file (or of ``text``, named ``path``) that point nowhere."""
    problems: list[str] = []
    text = path.read_text(encoding="utf-8") if text is None else text
    for number, line in enumerate(text.splitlines(), 1):
        for link in _LINK.finditer(line):
            target = link["target"]
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            goal = (path.parent / file).resolve() if file else path
            if not goal.exists():
                problems.append(f"{path.relative_to(ROOT)}:{number}: {target}: no such file")
            elif anchor and goal.suffix == ".md" and anchor not in _anchors(goal):
                problems.append(f"{path.relative_to(ROOT)}:{number}: {target}: no such heading")
    return problems


# -------------------------------------------------------------------- the tests


def _ids(items: list[Block]) -> list[str]:
    return [str(b) for b in items]


WHOLE = [b for b in _yaml_blocks() if re.search(r"^groups:", b.text, re.MULTILINE)]
FRAGMENTS = [b for b in _yaml_blocks() if b not in WHOLE]
SHELL = [b for b in _all_blocks() if b.lang in SHELL_LANGS]


def test_the_docs_have_blocks_to_check() -> None:
    assert len(WHOLE) >= 5 and len(FRAGMENTS) >= 3 and len(SHELL) >= 8, \
        (len(WHOLE), len(FRAGMENTS), len(SHELL))


def test_skips_are_rare_and_say_why() -> None:
    skips = [(b, SKIP.search(b.text) or SETTINGS_ONLY.search(b.text)) for b in _all_blocks()
             if SKIP.search(b.text) or SETTINGS_ONLY.search(b.text)]
    assert len(skips) <= MAX_SKIPS, [str(b) for b, _ in skips]
    for block, match in skips:
        assert match and match["reason"].strip(), f"{block}: a skip without a reason"


@pytest.mark.parametrize("block", WHOLE, ids=_ids(WHOLE))
def test_whole_config_validates(block: Block, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_whole_config(block, tmp_path, monkeypatch) == []


@pytest.mark.parametrize("block", FRAGMENTS, ids=_ids(FRAGMENTS))
def test_fragment_fits_the_settings(block: Block, tmp_path: Path) -> None:
    assert check_fragment(block, tmp_path) == []


@pytest.mark.parametrize("block", SHELL, ids=_ids(SHELL))
def test_command_lines_parse(block: Block) -> None:
    assert check_commands(block) == []


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_links_resolve(path: Path) -> None:
    assert check_links(path) == []


def _setting_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every field of ``model``, nested models included, as dotted paths."""
    def models(annotation: Any) -> Iterator[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield annotation
        else:
            for arg in get_args(annotation):
                yield from models(arg)

    for name, field in model.model_fields.items():
        yield prefix + name
        for nested in models(field.annotation):
            yield from _setting_paths(nested, f"{prefix}{name}.")


def test_every_setting_is_documented() -> None:
    # fence lines out first: their backticks would pair with the spans' (one block more
    # or less would shift which text counts as a span)
    spans = [span for path in DOCS
             for span in re.findall(r"`([^`]+)`", re.sub(
                 r"^\s*```.*$", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE))]
    missing = [path for path in _setting_paths(Settings)
               if not any(re.search(rf"(?<!\w){path.rsplit('.', 1)[-1]}(?!\w)", span)
                          for span in spans)]
    assert not missing, f"settings no doc names (in `backticks`): {missing}"


def test_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.startswith("# kstage\n\n```bash\nmake demo   #")
    assert "\nmake test   #" in readme.split("```", 2)[1]  # CI runs README's test command
    assert len(readme.splitlines()) <= 200


# ---------------------------------------------- the checks fail on broken blocks


def _block(text: str, lang: str = "yaml") -> Block:
    return Block(ROOT / "docs" / "broken.md", 1, lang, text)


def test_a_block_that_does_not_parse_fails(tmp_path: Path) -> None:
    broken = _block("sink:\n  type: http\n  url: https://x\n  auth: {bearer: ${API_TOKEN}}\n")
    (problem,) = check_fragment(broken, tmp_path)
    assert problem.startswith("docs/broken.md:4:19: ")  # the line in the markdown file


def test_a_wrong_or_unplaceable_fragment_fails(tmp_path: Path) -> None:
    assert check_fragment(_block("spark:\n  flush_max_rowz: 10\n"), tmp_path)
    assert check_fragment(_block("sink: {type: http, url: https://x, timeout: 3}\n"), tmp_path)
    assert check_fragment(_block("sink: {type: sparkk}\n"), tmp_path)
    assert check_fragment(_block("sink: {type: jsonl, path: x, fsynk: true}\n"), tmp_path)
    assert check_fragment(_block("dead_letters: x.log\n"), tmp_path)


def test_a_broken_whole_config_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unknown = _block("groups:\n  - topics:\n      - {topic: t, processor: no_such_processor}\n")
    assert "no_such_processor" in check_whole_config(unknown, tmp_path, monkeypatch)[0]
    settings_only = _block("# docs-test: settings-only not installed\ngroups:\n  - topics:\n"
                           "      - {topic: t, processor: not_installed, sink: {type: nul}}\n")
    assert "nul" in check_whole_config(settings_only, tmp_path, monkeypatch)[0]
    assert check_whole_config(_block("# docs-test: settings-only x\ngroups: []\nkafkaa: {}\n"),
                              tmp_path, monkeypatch)
    bad_sink = _block("groups:\n  - topics:\n      - {topic: t, processor: json_rows, "
                      "sink: {type: spark, tabel: x}}\n")
    assert "tabel" in check_whole_config(bad_sink, tmp_path, monkeypatch)[0]


def test_a_wrong_command_line_fails() -> None:
    block = _block("kstage lag -c kstage.yml [--json]\nkstage offsets reset --to earliest\n"
                   "pip install x && kstage dlq shw\n"
                   "$ .venv/bin/python -m service merge --tabel x\n", lang="console")
    problems = check_commands(block)
    assert len(problems) == 4, problems


def test_a_dead_link_fails() -> None:
    page = ROOT / "docs" / "broken.md"
    assert check_links(page, "[ok](operations.md#readyz) [ok](../kstage.yml)\n") == []
    assert len(check_links(page, "[a](nowhere.md) [b](operations.md#nowhere)\n")) == 2


_REPO_PATH = re.compile(
    r"`((?:actors|processors|service|settings|tests|bench|examples|docs)/[\w./-]*)`")
_LAYOUT_NAME = re.compile(r"`(\w+\.py|\w+/)`")


def check_layout_paths(text: str) -> list[str]:
    """Paths the architecture page names that do not exist: every repository path in
    backquotes, and every ``name.py`` or ``dir/`` of the layout table, relative to its
    row's package (or a top-level directory)."""
    missing = [p for p in _REPO_PATH.findall(text) if not (ROOT / p.split()[0]).exists()]
    layout = text.split("## The layout", 1)[-1].split("\n## ", 1)[0]
    for row in layout.splitlines():
        cells = row.split("|")
        if len(cells) < 4 or not cells[1].strip().startswith("`"):
            continue
        package = cells[1].strip().strip("`")
        missing += [f"{package}{name}" for name in _LAYOUT_NAME.findall(cells[2])
                    if not (ROOT / package / name).exists() and not (ROOT / name).exists()]
    return missing


def test_the_architecture_names_only_paths_that_exist() -> None:
    assert check_layout_paths((ROOT / "docs" / "architecture.md").read_text()) == []


def test_a_moved_module_fails_the_architecture_check() -> None:
    text = ("`actors/worker.py` holds it\n## The layout\n\n| package | holds | must not |\n"
            "|---|---|---|\n| `actors/sinks/` | `base.py`, `sinks.py` | |\n")
    assert check_layout_paths(text) == ["actors/worker.py", "actors/sinks/sinks.py"]


# ------------------------------------------- the comparison with other projects

COMPARISON = ROOT / "docs" / "comparison.md"
PEERS_HEADER = "| feature | kstage | DataHub Actions | Kafka Connect | FastStream | Quix Streams |"
_VERDICT = re.compile(r"^(✓|✗|partial\b|not documented\b)")
_REF_DEFINITION = re.compile(r"^\[(?P<ref>[^\]]+)\]:\s*(?P<url>\S+)\s*$", re.MULTILINE)
_REF_USE = re.compile(r"\]\[(?P<ref>[^\]]+)\]")
_WEB = re.compile(r"^https?://")


def check_comparison(text: str) -> list[str]:
    """Cells of the comparison table that do not say what they claim, or where.

    Every cell starts with a verdict (✓, ✗, partial, not documented); kstage's cell links
    to a page of these docs (checked by :func:`check_links`); every peer's cell links to a
    web page, inline or by a reference defined as an ``http(s)`` URL. A claim without its
    source is a bug: the reader could not check it.
    """
    lines = text.splitlines()
    if PEERS_HEADER not in lines:
        return [f"no table with the header {PEERS_HEADER!r}"]
    references = {m["ref"].lower(): m["url"] for m in _REF_DEFINITION.finditer(text)}
    problems = [f"reference [{ref}] is not a web page: {url}"
                for ref, url in references.items() if not _WEB.match(url)]
    peers = [c.strip() for c in PEERS_HEADER.strip("|").split("|")][2:]
    rows = lines[lines.index(PEERS_HEADER) + 2:]
    rows = rows[:next((i for i, line in enumerate(rows) if not line.startswith("|")),
                      len(rows))]
    if not rows:
        problems.append("the comparison table has no rows")
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        feature = cells[0]
        if len(cells) != len(peers) + 2:
            problems.append(f"{feature}: {len(cells)} cells, not {len(peers) + 2}")
            continue
        for name, cell in zip(["kstage", *peers], cells[1:], strict=True):
            if not _VERDICT.match(cell):
                problems.append(f"{feature} / {name}: no verdict (✓, ✗, partial, not documented)")
            for ref in _REF_USE.findall(cell):
                if ref.lower() not in references:
                    problems.append(f"{feature} / {name}: [{ref}] is never defined")
        if not re.search(r"\]\((?!https?:)[\w./-]+\.md(#[\w-]+)?\)", cells[1]):
            problems.append(f"{feature} / kstage: no link to these docs")
        for name, cell in zip(peers, cells[2:], strict=True):
            inline = [u for u in re.findall(r"\]\(([^)\s]+)\)", cell) if _WEB.match(u)]
            cited = [r for r in _REF_USE.findall(cell) if r.lower() in references]
            if not inline and not cited:
                problems.append(f"{feature} / {name}: no link to {name}'s documentation")
    return problems


def test_every_comparison_claim_links_to_the_peers_docs() -> None:
    text = COMPARISON.read_text(encoding="utf-8")
    assert check_comparison(text) == []
    features = [line.split("|")[1] for line in text.splitlines() if line.startswith("| **")]
    for feature in ("Start from the end", "Dead-letter topic", "Fan-out", "filter",
                    "Retries", "MetadataChangeProposal", "JDBC upsert"):
        assert any(feature in row for row in features), feature  # issue 13's features


def test_a_comparison_claim_without_its_source_fails() -> None:
    header = PEERS_HEADER + "\n|---|---|---|---|---|---|\n"
    good = ("| **x** | ✓ a ([c](configuration.md#filters)) | ✓ [d][dh] | ✗ [e](https://e.org) "
            "| partial [f][dh] | not documented ([g][dh]) |\n\n[dh]: https://d.org/x\n")
    assert check_comparison(header + good) == []
    assert check_comparison(good) != []  # no table at all
    broken = [
        good.replace("✗ [e](https://e.org)", "✗ trust me"),            # no source
        good.replace("[f][dh]", "[f][nowhere]"),                       # undefined reference
        good.replace("https://d.org/x", "configuration.md"),           # not a web page
        good.replace("not documented (", "("),                         # no verdict
        good.replace("([c](configuration.md#filters))", "(see the docs)"),  # kstage unsourced
        good.replace(" | partial [f][dh]", ""),                        # a cell missing
    ]
    for text in broken:
        assert check_comparison(header + text) != [], text
