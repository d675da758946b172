"""service.control.ControlApi on a real Master (no broker: nothing is started), and the
helpers of ``kstage ctl``: the token, the routes, the answers, the log lines."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.master import Master
from service.cli import main
from service.control import ControlApi
from service.ops.ctl import base_url, group_of, status_lines
from service.ops.lag import OpsError
from settings import ConfigValidationError, load_settings
from settings.models import Settings

TOKEN = "s3cret-token-0123456789"  # noqa: S105 - a fake secret to look for


def settings(**service: Any) -> Settings:
    return Settings.model_validate({
        "service": service,
        "groups": [{"group_id": "g1", "topics": [{"topic": "clicks", "processor": "json_rows",
                                                  "sink": {"type": "null"}}]},
                   {"group_id": "g/2", "topics": [
                       {"topic": "clicks", "processor": "json_rows", "sink": {"type": "null"}},
                       {"topic": "views", "processor": "json_rows", "sink": {"type": "null"}}]}]})


def now(fn: Callable[[], Any]) -> Any:
    return fn()


@pytest.fixture
def api() -> ControlApi:
    return ControlApi(Master(settings(), "localhost:9"), now, TOKEN)


def test_without_a_token_configured_the_control_endpoints_are_off() -> None:
    off = ControlApi(Master(settings(), "localhost:9"), now, None)
    assert not off.enabled
    assert off.status("127.0.0.1:1", f"Bearer {TOKEN}")[0] == 404
    code, body = off.act("/groups/g1/topics/clicks/pause", "127.0.0.1:1", f"Bearer {TOKEN}")
    assert code == 404 and "service.control_token" in body["error"]
    assert not off.master.controls["g1/clicks"].paused


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {TOKEN}", TOKEN])
def test_a_missing_or_wrong_token_is_refused_and_nothing_is_done(
        api: ControlApi, authorization: str | None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "service.control")
    code, body = api.act("/groups/g1/topics/clicks/pause", "10.0.0.7:5151", authorization)
    assert code == 401 and "Authorization: Bearer" in body["error"]
    assert not api.master.controls["g1/clicks"].paused
    assert api.status("10.0.0.7:5151", authorization)[0] == 401
    logged = [r.getMessage() for r in caplog.records]
    assert logged[0].startswith("control: refused pause of g1/clicks from 10.0.0.7:5151: ")
    assert TOKEN not in " ".join(logged)


def test_pause_and_resume_are_logged_with_the_caller_and_shown_in_status(
        api: ControlApi, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "service.control")
    bearer = f"Bearer {TOKEN}"
    code, body = api.act("/groups/g%2F2/topics/views/pause", "10.0.0.7:5151", bearer)
    assert (code, body) == (200, {"group": "g/2", "topic": "views", "action": "pause",
                                  "changed": True, "paused": True})
    assert api.act("/groups/g%2F2/topics/views/pause", "10.0.0.7:5151", bearer)[1][
        "changed"] is False
    code, status = api.status("10.0.0.7:5151", bearer)
    topics = {(g["group"], t["topic"]): t for g in status["groups"] for t in g["topics"]}
    assert topics[("g/2", "views")]["paused"] and topics[("g/2", "views")]["paused_by"] == (
        "10.0.0.7:5151")
    assert not topics[("g1", "clicks")]["paused"] and status["live"] is True
    assert status_lines(status)[:1] == ["g/2/clicks: starting, restarts 0"]
    assert "g/2/views: paused, restarts 0" in status_lines(status)
    code, body = api.act("/groups/g%2F2/topics/views/resume", "10.0.0.8:1", bearer)
    assert code == 200 and body["changed"] and not body["paused"]
    assert [r.getMessage() for r in caplog.records] == [
        "control: pause of g/2/views by 10.0.0.7:5151",
        "control: pause of g/2/views by 10.0.0.7:5151 (no change: it already was)",
        "control: resume of g/2/views by 10.0.0.8:1"]


def test_an_unknown_topic_or_route_is_404_with_what_exists(api: ControlApi) -> None:
    bearer = f"Bearer {TOKEN}"
    code, body = api.act("/groups/g1/topics/clickz/pause", "h:1", bearer)
    assert code == 404
    assert body["error"] == ("no topic 'clickz' in group 'g1' here; did you mean "
                             "'g1/clicks'?; this process runs g/2/clicks, g/2/views, g1/clicks")
    assert api.act("/groups/g1/topics/clicks/stop", "h:1", bearer)[0] == 404
    assert api.act("/groups/g1/clicks/pause", "h:1", bearer)[0] == 404


def test_ctl_finds_the_group_and_the_url_from_the_config() -> None:
    cfg = settings(http_host="0.0.0.0", http_port=9200)  # noqa: S104 - read, never bound
    assert base_url(cfg, None) == "http://127.0.0.1:9200"
    assert base_url(cfg, "http://h:1/") == "http://h:1"
    assert group_of(cfg, "views", None) == "g/2"
    assert group_of(cfg, "clicks", "g1") == "g1"
    with pytest.raises(OpsError, match="groups g1, g/2: name one with --group"):
        group_of(cfg, "clicks", None)
    with pytest.raises(OpsError, match="group 'g1' of the config does not consume topic "
                                       "'views' \\(groups that do: g/2\\)"):
        group_of(cfg, "views", "g1")
    with pytest.raises(OpsError, match="http_port is 0"):
        base_url(settings(http_port=0), None)


def test_the_token_is_a_secret_of_at_least_16_characters() -> None:
    cfg = settings(control_token=TOKEN)
    assert TOKEN not in repr(cfg) and TOKEN not in str(cfg.model_dump())
    with pytest.raises(ValueError, match="control_token"):
        settings(control_token="short")  # noqa: S106


def test_a_topic_whose_worker_crashed_and_is_not_running_shows_failed(api: ControlApi) -> None:
    """The supervisor keeps each worker's last crash; while no incarnation runs (its
    restart backoff, or given up) /status says failed, with the crash."""
    (slot,) = [s for s in api.master.supervisor._slots if s.name == "g1/clicks"]
    slot.crashed = (1795690000.0, "RuntimeError: the sink's host is gone")
    code, status = api.status("h:1", f"Bearer {TOKEN}")
    topics = {(g["group"], t["topic"]): t for g in status["groups"] for t in g["topics"]}
    assert topics[("g1", "clicks")]["state"] == "failed"
    assert topics[("g1", "clicks")]["last_crash"] == {
        "at": 1795690000.0, "error": "RuntimeError: the sink's host is gone"}
    assert topics[("g/2", "views")]["state"] == "starting"
    assert "g1/clicks: failed, restarts 0; last crash: RuntimeError: the sink's host is " \
           "gone" in status_lines(status)


CONFIG = """\
service:
  control_token: ${KSTAGE_CONTROL_TOKEN}
groups:
  - group_id: g1
    topics:
      - {topic: clicks, processor: json_rows, sink: {type: "null"}}
"""


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\n\n"])
def test_a_token_from_a_secret_file_with_a_trailing_newline_works(
        tmp_path: Path, ending: str) -> None:
    """A Secret made from a file (``kubectl create secret --from-file``) ends in a newline;
    the client's header never carries it (HTTP strips a header value's edges), so a token
    kept with it could never match: the newline is dropped at load."""
    path = tmp_path / "kstage.yml"
    path.write_text(CONFIG)
    cfg = load_settings(path, {"KSTAGE_CONTROL_TOKEN": TOKEN + ending})
    token = cfg.service.control_token
    assert token is not None and token.get_secret_value() == TOKEN
    api = ControlApi(Master(cfg, "localhost:9"), now, token.get_secret_value())
    code, _ = api.act("/groups/g1/topics/clicks/pause", "127.0.0.1:1", f"Bearer {TOKEN}")
    assert code == 200 and api.master.controls["g1/clicks"].paused


@pytest.mark.parametrize("value", [
    " " * 20, "\t" * 16 + "\n", f"{TOKEN[:8]} {TOKEN[8:]}", f" {TOKEN}", f"{TOKEN}\t",
    f"{TOKEN}\n ", f"{TOKEN[:8]}\n{TOKEN[8:]}"],
    ids=["spaces", "tabs", "inner-space", "leading-space", "trailing-tab",
         "newline-then-space", "inner-newline"])
def test_a_token_with_whitespace_is_refused_with_file_line_and_key(
        tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Whitespace in a bearer token cannot travel in the header as it is (its edges are
    stripped, the inside splits the credentials): refused, without printing the value.
    A token of only whitespace is no token, whatever its length."""
    path = tmp_path / "kstage.yml"
    path.write_text(CONFIG)
    with pytest.raises(ConfigValidationError) as info:
        load_settings(path, {"KSTAGE_CONTROL_TOKEN": value})
    said = str(info.value)
    assert said.startswith(f"{path}: 1 configuration problem(s):"), said
    assert "- service.control_token (line 2): a bearer token cannot contain whitespace" \
        in said, said
    assert TOKEN[:8] not in said and TOKEN[8:] not in said
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KSTAGE_CONTROL_TOKEN", value)
        assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "service.control_token (line 2)" in err and TOKEN[8:] not in err
