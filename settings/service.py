"""The process's sections: ``supervisor:`` (restarts, stop grace periods), ``service:``
(logging, the status server, the control API) and ``observability:`` (tracing)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from settings.base import Model


class SupervisorSettings(Model):
    shutdown_grace_s: float = Field(30, ge=0, description="Drain-and-commit phase of a stop.")
    abort_grace_s: float = Field(10, ge=0, description="Cancel phase of a stop, after the drain.")
    max_restarts: int = Field(5, ge=0, description="Crashes tolerated within restart_window_s.")
    restart_window_s: float = Field(60, gt=0, description="Window of the restart intensity.")
    min_backoff_s: float = Field(0.5, ge=0, description="First restart delay (full jitter).")
    max_backoff_s: float = Field(30, ge=0, description="Cap of the restart delay.")
    sink_unready_after_s: float = Field(
        10, ge=0, description="/readyz turns 503 once a worker's sink writes have failed "
        "for this long without a success (at once for refused credentials).")

    @model_validator(mode="after")
    def _backoff_order(self) -> SupervisorSettings:
        if self.max_backoff_s < self.min_backoff_s:
            raise ValueError("max_backoff_s must be >= min_backoff_s")
        return self

class ServiceSettings(Model):
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Level.")
    log_format: Literal["text", "json"] = Field("text", description="Log line format.")
    status_interval_s: float = Field(30, gt=0, description="Period of the status log line.")
    http_port: int = Field(
        9108, ge=0, le=65535, description="Port of /metrics, /healthz, /readyz (0 disables)."
    )
    http_host: str = Field(
        "127.0.0.1", description="Address the status server binds. Loopback by default: "
        "/metrics and /readyz are unauthenticated and name topics, groups and sink errors; "
        "0.0.0.0 (all interfaces) only where the network is private, e.g. a container.")
    http_port_tries: int = Field(
        16, ge=1, le=1000,
        description="Ports tried from http_port up when it is taken (processes sharing one "
                    "config on one host get http_port, +1, +2 ...); then any free port.",
    )
    control_token: SecretStr | None = Field(
        None, min_length=16,
        description="Bearer token of the control API on the status server (GET /status, "
                    "POST /groups/{group}/topics/{topic}/pause|resume|restart; never "
                    "printed); none: the control endpoints are off (404). At least 16 "
                    "characters, no whitespace; a trailing newline (a Secret made from a "
                    "file) is dropped.")
    stall_after_s: float = Field(
        600, gt=0,
        description="/healthz answers 503 when a worker's fetch loop has not run for this long, "
                    "or a partition with lag, neither paused nor retrying, has not committed "
                    "for this long (a consumer alive but stuck: let the orchestrator restart "
                    "it). Longer than a rebalance may take (max_poll_interval_ms).")

    @field_validator("control_token", mode="before")
    @classmethod
    def _bearer_token(cls, value: Any) -> Any:
        """A trailing newline (what a file, and a Secret made from one, ends with) is
        dropped; any other whitespace is refused: a client's Authorization header cannot
        carry it (HTTP strips a value's edges, the inside splits it), so the token could
        never match. Checked before the length: blanks are not characters of a token."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if not isinstance(text, str):
            return value
        text = text.rstrip("\r\n")
        if any(c.isspace() for c in text):
            raise ValueError("a bearer token cannot contain whitespace (spaces, tabs, "
                             "line breaks): an HTTP header cannot carry it as it is")
        return text


class ObservabilitySettings(Model):
    """The ``observability:`` section: OpenTelemetry tracing (docs/operations.md#tracing)."""

    tracing: bool = Field(
        False, description="Export OpenTelemetry spans over OTLP (needs the otel extra: "
        "pip install 'kstage[otel]'). Also on, whatever this says, when the environment "
        "sets OTEL_TRACES_EXPORTER=otlp or OTEL_EXPORTER_OTLP_ENDPOINT or "
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (and not OTEL_SDK_DISABLED=true).")
    endpoint: str | None = Field(
        None, description="The OTLP endpoint: http://HOST:4318 for http/protobuf (/v1/traces "
        "is added), http://HOST:4317 for grpc; none: the OTEL_EXPORTER_OTLP_(TRACES_)"
        "ENDPOINT variable, else the exporter's default on localhost.")
    protocol: Literal["http/protobuf", "grpc"] = Field(
        "http/protobuf", description="OTLP transport: http/protobuf or grpc; the "
        "OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL variable wins when set.")
    service_name: str | None = Field(
        None, description="The service.name resource attribute; none: OTEL_SERVICE_NAME, "
        "else the configuration's name.")
    sample_ratio: float = Field(
        1.0, ge=0, le=1, description="Fraction of traces sampled (parent-based: a message "
        "whose producer sampled its trace is sampled).")

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            scheme, sep, rest = value.partition("://")
            if not sep or scheme not in ("http", "https") or not rest.split("/", 1)[0]:
                raise ValueError("must be http(s)://host[:port][/path]")
        return value

