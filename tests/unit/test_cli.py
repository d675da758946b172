"""Tests of service.cli in-process: exit codes and where config errors point.

``validate`` and ``processors`` never connect to a broker, so no Kafka is needed here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import main, parser

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
name: cli-test
groups:
  - topics:
      - {topic: events, processor: json_rows, format: json}
"""


def write(tmp_path: Path, text: str, name: str = "kstage.yml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------- validate


def test_validate_good_config_prints_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, GOOD)
    code, out, err = run_cli(capsys, "validate", "-c", str(path))
    assert code == 0
    assert out.strip() == f"{path}: OK (1 group(s), 1 topic(s))"
    assert err == ""


def test_validate_bad_yaml_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "name: t\ngroups:\n  - topics: [\n      {topic: a\n")
    code, out, err = run_cli(capsys, "validate", "-c", str(path))
    assert code == 2
    assert out == ""
    assert err.startswith(f"kstage: {path}:5:")  # the stream ends on line 5
    assert "flow mapping at line 4" in err


def test_validate_unset_variable_names_variable_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLI_TEST_UNSET_VAR", raising=False)
    path = write(tmp_path, "name: t\nkafka:\n  bootstrap: ${CLI_TEST_UNSET_VAR}\n")
    code, out, err = run_cli(capsys, "validate", "-c", str(path))
    assert code == 2
    assert out == ""
    assert err.startswith(f"kstage: {path}:3:")
    assert "environment variable CLI_TEST_UNSET_VAR is not set" in err


def test_validate_validation_error_names_path_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "name: t\ngroups:\n  - topics:\n      - topic: a\n        format: json\n"
    path = write(tmp_path, text)
    code, out, err = run_cli(capsys, "validate", "-c", str(path))
    assert code == 2
    assert out == ""
    assert str(path) in err
    assert "groups[0].topics[0].processor (line 4): Field required" in err


def test_validate_unknown_processor_names_it_and_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD.replace("json_rows", "no_such_processor"))
    code, out, err = run_cli(capsys, "validate", "-c", str(path))
    assert code == 2
    assert out == ""
    assert "groups[0].topics[0].processor" in err
    assert "unknown processor 'no_such_processor'" in err
    assert "json_rows" in err  # lists what is installed


@pytest.mark.parametrize("command", [["merge"], ["tables", "show"], ["tables", "maintain"],
                                     ["tables", "migrate"]])
def test_table_commands_name_an_unknown_processor_as_validate_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """``merge`` and ``tables`` read the processors' tables: a processor the file names
    wrongly is a configuration error (exit 2) with its line, before any Spark starts."""
    path = write(tmp_path, GOOD.replace("json_rows", "json_row"))
    code, out, err = run_cli(capsys, *command, "-c", str(path))
    assert code == 2, err
    assert out == ""
    assert f"{path}: groups[0].topics[0].processor (line 4): unknown processor 'json_row'" \
        in err, err


def test_validate_format_the_processor_does_not_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD.replace("format: json", "format: bytes"))
    code, _, err = run_cli(capsys, "validate", "-c", str(path))
    assert code == 2
    assert "groups[0].topics[0].format" in err
    assert "'json_rows' accepts ['json', 'avro', 'protobuf', 'json_schema'], not 'bytes'" in err


def test_validate_warns_that_commit_mode_auto_can_lose_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD + "    commit:\n      mode: auto\n"
                 "  - group_id: other\n    commit: {mode: batch}\n    topics:\n"
                 "      - {topic: more, processor: json_rows}\n")
    code, out, err = run_cli(capsys, "validate", "-c", str(path))
    assert code == 0  # a warning, not an error
    assert out.strip() == f"{path}: OK (2 group(s), 2 topic(s))"
    lines = err.splitlines()
    assert len(lines) == 1, err  # only the auto group
    assert lines[0].startswith(f"kstage: warning: {path}: groups[0].commit.mode (line 6): "
                               "'auto' can lose data:")
    assert "whether or not the sink wrote them" in lines[0]


def test_validate_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "absent.yml"
    code, out, err = run_cli(capsys, "validate", "-c", str(path))
    assert code == 2
    assert out == ""
    assert f"kstage: {path}: cannot read configuration file" in err


# ----------------------------------------------------------------------- processors


def test_processors_lists_the_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "processors")
    assert code == 0
    names = {line.split()[0] for line in out.splitlines() if line and not line[0].isspace()}
    assert {"json_rows", "log"} <= names
    json_rows = next(line for line in out.splitlines() if line.startswith("json_rows "))
    assert "BROKEN" not in json_rows
    assert " json/avro/protobuf/json_schema " in json_rows


def test_processors_with_config_shows_topic_users(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD)
    code, out, _ = run_cli(capsys, "processors", "-c", str(path))
    assert code == 0
    assert "topic cli-test/events (json)" in out


def test_processors_with_unknown_processor_in_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, GOOD.replace("json_rows", "no_such_processor"))
    code, out, _ = run_cli(capsys, "processors", "-c", str(path))
    assert code == 2
    assert "no_such_processor" in out
    assert "NOT INSTALLED (used by cli-test/events (json))" in out


def test_processors_with_bad_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "processors", "-c", str(tmp_path / "absent.yml"))
    assert code == 2
    assert "cannot read configuration file" in err


# ----------------------------------------------------------------------- entry point


def test_python_dash_m_service_runs_the_cli(tmp_path: Path) -> None:
    path = write(tmp_path, "name: t\ngroups:\n  - topics: [\n")
    proc = subprocess.run(
        [sys.executable, "-m", "service", "validate", "-c", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"kstage: {path}:" in proc.stderr
    assert proc.stdout == ""


def test_help_says_what_kstage_and_each_command_are_for(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "kstage consumes Kafka topics" in out
    assert "``" not in out and ":class:" not in out, "no reStructuredText in the help"
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("    ")}
    assert listed == set(parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]


# ------------------------------------------------------------------- the command table

def test_every_command_is_one_module_of_the_table_with_its_contract() -> None:
    """A command is a module of service.commands named as in the table, with
    add_arguments and run (the CommandModule contract), and nothing else is a command."""
    from service.commands import COMMANDS

    modules = {p.stem for p in (ROOT / "service" / "commands").glob("*.py")}
    names = [command.name for command in COMMANDS]
    assert len(names) == len(set(names))
    assert set(names) == modules - {"__init__", "common"}
    for command in COMMANDS:
        module = command.module()
        assert callable(module.add_arguments) and callable(module.run), command.name


def test_a_command_parses_with_only_its_own_options(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """main() builds only the named command's options; the result is the same as with the
    whole parser (a command's options never leak into another's)."""
    whole = parser().parse_args(["lag", "-c", "x.yml", "--json"])
    alone = parser("lag").parse_args(["lag", "-c", "x.yml", "--json"])
    assert vars(whole) == vars(alone)
    with pytest.raises(SystemExit):
        parser("validate").parse_args(["validate", "--json"])  # lag's option, not validate's
    assert "unrecognized arguments: --json" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["validate", "--help"], ["tables", "--help"]])
def test_help_imports_neither_the_settings_nor_the_actors(argv: list[str]) -> None:
    """kstage --help (and a command's --help) starts without loading pydantic, the
    settings, the actors or a Kafka client: what makes it quick (bench/throughput.py
    prints its time)."""
    heavy = ("pydantic", "settings", "actors", "aiokafka", "httpx", "processors")
    code = ("import sys\nfrom service.cli import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit:\n    pass\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))")
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
