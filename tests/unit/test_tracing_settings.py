"""``observability:`` (OpenTelemetry tracing): the settings, checked by ``kstage validate``
with file and line; when tracing is on (the settings or the ``OTEL_*`` variables); the
exporter each protocol gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors import tracing
from actors.tracing_mask import MaskingExporter
from service.cli import main
from settings import load_settings
from settings.models import ObservabilitySettings


def config(tmp_path: Path, observability: str) -> Path:
    """A config whose ``observability:`` keys start on line 6."""
    path = tmp_path / "kstage.yml"
    path.write_text("name: traced\ngroups:\n  - topics:\n      - {topic: events, "
                    "processor: json_rows}\nobservability:\n" + observability, encoding="utf-8")
    return path


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    return code, (out + err).splitlines()


def test_off_by_default() -> None:
    settings = ObservabilitySettings()
    assert (settings.tracing, settings.protocol, settings.sample_ratio) == (
        False, "http/protobuf", 1.0)
    assert not tracing.enabled(settings, {})


@pytest.mark.parametrize(("keys", "key", "line", "why"), [
    ("  tracing: true\n  protocol: thrift\n", "protocol", 7, "'http/protobuf' or 'grpc'"),
    ("  sample_ratio: 1.5\n", "sample_ratio", 6, "less than or equal to 1"),
    ("  endpoint: collector:4318\n", "endpoint", 6, "http(s)://host"),
    ("  tracing: true\n  exporter: otlp\n", "exporter", 7, "Extra inputs are not permitted"),
])
def test_validate_refuses_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             keys: str, key: str, line: int, why: str) -> None:
    path = config(tmp_path, keys)
    code, lines = validate(path, capsys)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"kstage: {path}: observability.{key} (line {line}): "), lines
    assert why in lines[0], lines


def test_a_valid_section_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config(tmp_path, "  tracing: true\n  endpoint: http://collector:4317\n"
                  "  protocol: grpc\n  service_name: orders\n  sample_ratio: 0.25\n")
    assert validate(path, capsys)[0] == 0
    obs = load_settings(path).observability
    assert (obs.tracing, obs.endpoint, obs.protocol, obs.service_name, obs.sample_ratio) == (
        True, "http://collector:4317", "grpc", "orders", 0.25)


@pytest.mark.parametrize(("env", "on"), [
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "console,otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ({"OTEL_SERVICE_NAME": "x"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
])
def test_the_environment_turns_tracing_on(env: dict[str, str], on: bool) -> None:
    assert tracing.enabled(ObservabilitySettings(), env) is on


def test_otel_sdk_disabled_wins_over_the_settings() -> None:
    assert tracing.enabled(ObservabilitySettings(tracing=True), {})
    assert not tracing.enabled(ObservabilitySettings(tracing=True), {"OTEL_SDK_DISABLED": "true"})


def test_the_exporter_of_each_protocol() -> None:
    http = tracing.Tracing.start(ObservabilitySettings(
        tracing=True, endpoint="http://127.0.0.1:4318"), "svc", {})
    grpc = tracing.Tracing.start(ObservabilitySettings(
        tracing=True, endpoint="http://127.0.0.1:4317", protocol="grpc"), "svc", {})
    by_env = tracing.Tracing.start(ObservabilitySettings(tracing=True), "svc",
                                   {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                                    "OTEL_SERVICE_NAME": "from-env"})
    try:
        masking = [t.provider._active_span_processor._span_processors[0]  # type: ignore[attr-defined]
                   ._batch_processor._exporter for t in (http, grpc, by_env)]
        # every exporter behind the masking of the process's secrets
        assert all(isinstance(m, MaskingExporter) for m in masking)
        exporters = [m.exporter for m in masking]
        assert type(exporters[0]).__module__.endswith("proto.http.trace_exporter")
        assert exporters[0]._endpoint == "http://127.0.0.1:4318/v1/traces"
        assert type(exporters[1]).__module__.endswith("proto.grpc.trace_exporter")
        assert type(exporters[2]).__module__.endswith("proto.grpc.trace_exporter")
        assert (http.service_name, by_env.service_name) == ("svc", "from-env")
    finally:
        for t in (http, grpc, by_env):
            t.shutdown()


def test_an_unknown_protocol_from_the_environment_is_refused() -> None:
    with pytest.raises(ValueError, match="http/protobuf or grpc"):
        tracing.Tracing.start(ObservabilitySettings(tracing=True), "svc",
                              {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})


def test_validate_names_a_missing_exporter_package(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    real = tracing.importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if name.endswith("proto.grpc") else real(name, package)

    monkeypatch.setattr(tracing.importlib.util, "find_spec", find_spec)
    path = config(tmp_path, "  tracing: true\n  protocol: grpc\n")
    code, lines = validate(path, capsys)
    assert code == 2, lines
    assert lines == [f"kstage: {path}: observability.tracing (line 6): tracing is on but "
                     "opentelemetry-exporter-otlp-proto-grpc is not installed: pip install "
                     "'kstage[otel]' (or turn tracing off: see docs/operations.md#tracing)"]
    # over http/protobuf the same environment has what it needs
    assert validate(config(tmp_path, "  tracing: true\n"), capsys)[0] == 0
