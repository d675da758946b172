"""The Helm chart (deploy/helm/kstage) and the Grafana dashboard (deploy/grafana/kstage.json).

The chart: ``helm lint``; ``helm template`` with the default values, with every optional
part on, and with the commands of docs/operations.md, each piped through kubeconform
(strict) against the schemas of the oldest Kubernetes version the chart supports and the
newest one kubernetes-validate knows, and the CRDs of KEDA and prometheus-operator
(tests/k8s_schemas.py); then what the objects say: probes, ports, the grace period, the
ConfigMap's config (which ``kstage validate`` must accept with the pod's environment),
secrets as environment variables, the disruption budget, the ServiceMonitor, the KEDA
triggers, and what the chart refuses to render.

The dashboard: every PromQL query names only metrics and labels kstage exports (read from
actors/metrics.py's registry at test time, with the suffixes prometheus_client adds), and
every metric kstage exports is on it.

helm, kubeconform and the CRDs come from the Go module proxy through ``make tools`` (a
prerequisite of ``make test``) into ``.tools/``. The checks are functions returning their
problems; the last tests of each part feed them broken input and see them fail.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import json
import math
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from actors.metrics import Metrics
from service import cli
from settings.models import SupervisorSettings
from tests.k8s_schemas import (
    CRD_LOCATION,
    KUBERNETES_LOCATION,
    bundled_versions,
    crd_schemas,
    kubernetes_schemas,
)
from tests.kafkautil import ROOT
from tests.unit.test_docs import _command_lines, blocks, helm_values_blocks

CHART = ROOT / "deploy" / "helm" / "kstage"
DASHBOARD = ROOT / "deploy" / "grafana" / "kstage.json"
TOOLS = ROOT / ".tools"
HELM = TOOLS / "bin" / "helm"
KUBECONFORM = TOOLS / "bin" / "kubeconform"
CRDS = TOOLS / "crds"
OPERATIONS = ROOT / "docs" / "operations.md"
RELEASE = "kstage"


def _oldest_supported() -> str:
    """The lowest version of Chart.yaml's kubeVersion (``>=1.27.0-0``): ``v1.27.0``."""
    constraint = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    found = re.fullmatch(r">=\s*(\d+\.\d+\.\d+)(-0)?", constraint)
    assert found, f"Chart.yaml kubeVersion {constraint!r}: expected '>=X.Y.Z-0'"
    return f"v{found[1]}"


NEWEST = bundled_versions()[-1]
VERSIONS = [_oldest_supported(), NEWEST]
DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())

# Every optional part on, and a config that uses secrets, two groups, another port.
ALL_ON: dict[str, Any] = {
    "config": {
        "name": "kstage-all",
        "kafka": {"bootstrap": "${KAFKA_BOOTSTRAP}"},
        "service": {"http_port": 9200},
        "supervisor": {"shutdown_grace_s": 20, "abort_grace_s": 5},
        "groups": [
            {"group_id": "api-writer",
             "failure": {"mode": "continue", "dead_letter_path": None,
                         "dead_letter_topic": "kstage.dead-letters"},
             "topics": [{"topic": "events_json", "processor": "json_rows", "format": "json",
                         "sink": {"type": "http", "url": "https://api.example.com/events",
                                  "auth": {"bearer": "${API_TOKEN}"}}}]},
            {"topics": [{"topic": "audit", "processor": "log", "sink": {"type": "null"}}]},
        ],
    },
    "env": {"KAFKA_BOOTSTRAP": "kafka-0.kafka:9092,kafka-1.kafka:9092", "TZ": "UTC"},
    "secretEnv": {"API_TOKEN": "tok-a1b2c3-secret"},
    "existingSecret": "kstage-external",
    "existingSecretVersion": "5d41402abc4b2a76b9719d911017c592",
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "keda": {"enabled": True, "maxReplicaCount": 6, "lagThreshold": "5000",
             "authenticationRef": {"name": "kstage-kafka"},
             "triggerMetadata": {"sasl": "scram_sha512", "tls": "enable"}},
    "serviceAccount": {"create": True, "annotations": {"eks.amazonaws.com/role-arn": "arn:x"}},
    "podDisruptionBudget": {"maxUnavailable": None, "minAvailable": 1},
    "imagePullSecrets": [{"name": "registry"}],
    "podAnnotations": {"example.com/team": "data"},
    "podLabels": {"team": "data"},
    "extraVolumes": [{"name": "ca", "configMap": {"name": "kafka-ca"}}],
    "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/kafka-ca", "readOnly": True}],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "kafka",
                     "effect": "NoSchedule"}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                   "whenUnsatisfiable": "ScheduleAnyway",
                                   "labelSelector": {"matchLabels": {
                                       "app.kubernetes.io/name": "kstage"}}}],
}


# ------------------------------------------------------------------------ tools


def _tool(path: Path) -> str:
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: `make tools` installs it (a "
                    "prerequisite of `make test`)", pytrace=False)
    return str(path)


def helm(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_tool(HELM), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def template(tmp_path: Path, values: dict[str, Any] | None = None, *args: str) -> str:
    """``helm template`` of the chart with ``values`` (a file) and ``args``: the manifest."""
    flags: list[str] = []
    if values is not None:
        path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.yaml"
        path.write_text(yaml.safe_dump(values), encoding="utf-8")
        flags = ["-f", str(path)]
    result = helm("template", RELEASE, str(CHART), "--kube-version", NEWEST, *flags, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def template_error(tmp_path: Path, values: dict[str, Any]) -> str:
    """The error of a ``helm template`` that must fail."""
    path = tmp_path / "refused.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    result = helm("template", RELEASE, str(CHART), "--kube-version", NEWEST, "-f", str(path))
    assert result.returncode != 0, f"rendered, though it should not:\n{result.stdout}"
    return result.stderr


def objects(manifest: str) -> dict[str, dict[str, Any]]:
    """The objects of a manifest by ``Kind/name``."""
    found: dict[str, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(manifest):
        if doc:
            key = f"{doc['kind']}/{doc['metadata']['name']}"
            assert key not in found, f"{key} twice"
            found[key] = doc
    return found


def one(found: dict[str, dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [o for key, o in found.items() if key.startswith(f"{kind}/")]
    return obj


def container(found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (main,) = one(found, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert isinstance(main, dict)
    return main


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """kubeconform's -schema-location arguments: Kubernetes' schemas, then the CRDs'."""
    root = tmp_path_factory.mktemp("schemas")
    for version in VERSIONS:
        kubernetes_schemas(root / "kubernetes", version)
    crds = sorted(CRDS.glob("*.yaml"))
    if len(crds) < 2:
        pytest.fail(f"{CRDS.relative_to(ROOT)} lacks the CRDs: `make tools` fetches them",
                    pytrace=False)
    crd_schemas(crds, root / "crds")
    return [str(root / "kubernetes" / KUBERNETES_LOCATION), str(root / "crds" / CRD_LOCATION)]


def check_manifest(manifest: str, schema_locations: list[str],
                   versions: list[str] = VERSIONS) -> list[str]:
    """Problems kubeconform (strict) finds in ``manifest`` for each of ``versions``: an
    invalid object, an error (no schema), a skipped one, or a count that is off."""
    count = sum(1 for doc in yaml.safe_load_all(manifest) if doc)
    problems: list[str] = []
    for version in versions:
        locations = [arg for loc in schema_locations for arg in ("-schema-location", loc)]
        result = subprocess.run(
            [_tool(KUBECONFORM), "-strict", "-summary", "-output", "json",
             "-kubernetes-version", version.lstrip("v"), *locations, "-"],
            input=manifest, capture_output=True, text=True, timeout=120, check=False)
        try:
            report = json.loads(result.stdout)
        except json.JSONDecodeError:
            problems.append(f"{version}: kubeconform said {result.stdout!r} {result.stderr!r}")
            continue
        summary = report["summary"]
        problems += [f"{version}: {r['kind']} {r['name']}: {r['status']}: {r.get('msg')}"
                     for r in report["resources"]]
        if (summary["invalid"], summary["errors"], summary["skipped"]) != (0, 0, 0) \
                or summary["valid"] != count:
            problems.append(f"{version}: {summary} for {count} objects")
    return problems


# ----------------------------------------------------------------- lint, schemas


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
def test_helm_lint(values: dict[str, Any] | None, tmp_path: Path) -> None:
    flags: list[str] = []
    if values is not None:
        (tmp_path / "values.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
        flags = ["-f", str(tmp_path / "values.yaml")]
    for version in VERSIONS:
        result = helm("lint", "--strict", "--kube-version", version.lstrip("v"), str(CHART),
                      *flags)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_defaults_render_valid_objects(tmp_path: Path, schemas: list[str]) -> None:
    manifest = template(tmp_path)
    assert set(objects(manifest)) == {"ConfigMap/kstage", "Deployment/kstage",
                                      "Service/kstage-metrics", "PodDisruptionBudget/kstage"}
    assert check_manifest(manifest, schemas) == []


def test_every_optional_part_renders_valid_objects(tmp_path: Path,
                                                   schemas: list[str]) -> None:
    manifest = template(tmp_path, ALL_ON)
    assert set(objects(manifest)) == {
        "ConfigMap/kstage", "Deployment/kstage", "Service/kstage-metrics",
        "PodDisruptionBudget/kstage", "Secret/kstage-env", "ServiceAccount/kstage",
        "ServiceMonitor/kstage", "ScaledObject/kstage"}
    assert check_manifest(manifest, schemas) == []


def test_kubeconform_finds_a_broken_object(tmp_path: Path, schemas: list[str]) -> None:
    """The schemas are used, strictly: a misspelt field or a wrong type of each kind is
    caught, and a kind without a schema is an error (one kubeconform run for all)."""
    found = objects(template(tmp_path, ALL_ON))

    def pod(doc: dict[str, Any]) -> dict[str, Any]:
        spec: dict[str, Any] = doc["spec"]["template"]["spec"]["containers"][0]
        return spec

    broken: list[str] = []
    for kind, breaks in (
            ("Deployment", lambda d: pod(d).update(readinesProbe=pod(d).pop("readinessProbe"))),
            ("Deployment", lambda d: pod(d)["ports"][0].update(containerPort="metrics")),
            ("ScaledObject", lambda d: d["spec"].update(maxReplicas=d["spec"].pop(
                "maxReplicaCount"))),
            ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(scrapeTimout="9s")),
            ("PodDisruptionBudget", lambda d: d["spec"].update(minAvailabel=1)),
            ("ConfigMap", lambda d: d["data"].update({"kstage.yml": 12})),  # strings only
            ("Secret", lambda d: d.update(stringdata={}))):
        doc = copy.deepcopy(one(found, kind))
        breaks(doc)
        doc["metadata"]["name"] = f"broken-{len(broken)}"
        broken.append(yaml.safe_dump(doc, sort_keys=False))
    unknown = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"
    problems = check_manifest("---\n".join([*broken, unknown]), schemas, [NEWEST])
    invalid = {p.split(": ")[1].split()[1] for p in problems if "statusInvalid" in p}
    assert invalid == {f"broken-{i}" for i in range(len(broken))}, problems
    assert any("Widget w: statusError: could not find schema" in p for p in problems)


# ---------------------------------------------------------- what the objects say


def test_probes_and_ports_follow_the_status_server(tmp_path: Path) -> None:
    for values, port in ((None, 9108), (ALL_ON, 9200)):
        found = objects(template(tmp_path, values))
        main = container(found)
        assert main["command"] == ["kstage"]
        assert main["args"] == ["run", "-c", "/etc/kstage/kstage.yml"]
        assert main["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
        for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                            ("readinessProbe", "/readyz")):
            assert main[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe
        config = yaml.safe_load(one(found, "ConfigMap")["data"]["kstage.yml"])
        assert config["service"]["http_host"] == "0.0.0.0"  # noqa: S104 - a pod's address
        assert config["service"]["http_port"] == port
        mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
        assert mounts["/etc/kstage"] == "config"
        volumes = {v["name"]: v for v in
                   one(found, "Deployment")["spec"]["template"]["spec"]["volumes"]}
        assert volumes["config"]["configMap"]["name"] == one(found, "ConfigMap")["metadata"][
            "name"]
        service = one(found, "Service")
        assert service["spec"]["ports"] == [{"name": "metrics", "port": port,
                                             "targetPort": "metrics", "protocol": "TCP"}]
        assert service["spec"]["publishNotReadyAddresses"] is True
        pod_labels = one(found, "Deployment")["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()


def _expected_grace(config: dict[str, Any], margin: int) -> int:
    """What terminationGracePeriodSeconds must be for ``config`` (the ConfigMap's)."""
    supervisor = config.get("supervisor") or {}
    fields = SupervisorSettings.model_fields
    shutdown = float(supervisor.get("shutdown_grace_s", fields["shutdown_grace_s"].default))
    abort = float(supervisor.get("abort_grace_s", fields["abort_grace_s"].default))
    return math.ceil(shutdown + abort) + margin


@pytest.mark.parametrize("supervisor, margin, expected", [
    ("defaults", None, 30 + 10 + 15),
    ({"shutdown_grace_s": 12.5, "abort_grace_s": 7}, 20, 20 + 20),
    ({"shutdown_grace_s": 0, "abort_grace_s": 0}, 6, 6),
    ({"shutdown_grace_s": 120}, None, 120 + 10 + 15),
    (None, None, 30 + 10 + 15),  # no supervisor section: kstage's own defaults
], ids=["defaults", "fraction", "zero", "one-given", "no-section"])
def test_the_grace_period_is_derived_from_the_config(
        supervisor: Any, margin: int | None, expected: int, tmp_path: Path) -> None:
    values: dict[str, Any] = {}
    if supervisor != "defaults":
        # a map merges into the chart's defaults: null them first where one key is given
        values["config"] = {"supervisor": None if supervisor is None else
                            {"shutdown_grace_s": None, "abort_grace_s": None, **supervisor}}
    if margin is not None:
        values["terminationGraceMarginSeconds"] = margin
    found = objects(template(tmp_path, values))
    config = yaml.safe_load(one(found, "ConfigMap")["data"]["kstage.yml"])
    grace = one(found, "Deployment")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]
    assert grace == expected == _expected_grace(config, 15 if margin is None else margin)


def _helm_merge(defaults: Any, given: Any) -> Any:
    """Helm's coalescing of values: maps merge key by key, null deletes, the rest replaces."""
    if not (isinstance(defaults, dict) and isinstance(given, dict)):
        return copy.deepcopy(given)
    merged = copy.deepcopy(defaults)
    for key, value in given.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _helm_merge(merged.get(key), value)
    return merged


def test_the_configmap_holds_the_config_of_the_values(tmp_path: Path) -> None:
    for values in (None, ALL_ON, {"config": {"name": "other", "kafka": {"bootstrap": "k:9092"},
                                             "supervisor": None}}):
        found = objects(template(tmp_path, values))
        config = yaml.safe_load(one(found, "ConfigMap")["data"]["kstage.yml"])
        assert config == _helm_merge(DEFAULTS["config"], (values or {}).get("config", {}))
    # A config naming every key of the defaults' config is rendered exactly as given.
    whole = copy.deepcopy(ALL_ON["config"])
    whole["service"] = {"http_host": "0.0.0.0",  # noqa: S104 - a pod's address
                        "http_port": 9200, "log_format": "text"}
    found = objects(template(tmp_path, {"config": whole}))
    assert yaml.safe_load(one(found, "ConfigMap")["data"]["kstage.yml"]) == whole


def _pod_environment(found: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The variables the container gets: its env, and every key of the chart's Secrets it
    takes (envFrom); a Secret the chart does not render (existingSecret) is left out."""
    main = container(found)
    env = {e["name"]: e["value"] for e in main.get("env", [])}
    secrets = {o["metadata"]["name"]: o for o in found.values() if o["kind"] == "Secret"}
    for source in main.get("envFrom", []):
        secret = secrets.get(source["secretRef"]["name"])
        for name, value in (secret or {}).get("data", {}).items():
            env[name] = base64.b64decode(value).decode()
    return env


def test_secrets_reach_the_container_as_variables(tmp_path: Path) -> None:
    found = objects(template(tmp_path, ALL_ON))
    secret = one(found, "Secret")
    assert secret["type"] == "Opaque"
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == \
        ALL_ON["secretEnv"]
    main = container(found)
    assert main["envFrom"] == [{"secretRef": {"name": secret["metadata"]["name"]}},
                               {"secretRef": {"name": "kstage-external"}}]
    assert main["env"] == [{"name": k, "value": v} for k, v in sorted(ALL_ON["env"].items())]
    environment = _pod_environment(found)
    assert environment["API_TOKEN"] == ALL_ON["secretEnv"]["API_TOKEN"]
    config_text = one(found, "ConfigMap")["data"]["kstage.yml"]
    assert "${API_TOKEN}" in config_text  # kstage expands it from the environment
    for key in ("ConfigMap", "Deployment"):
        assert "tok-a1b2c3-secret" not in yaml.safe_dump(one(found, key)), key
    # Only an existing Secret: no Secret of the chart, its keys still come in.
    only = objects(template(tmp_path, {"existingSecret": "mine"}))
    assert not [k for k in only if k.startswith("Secret/")]
    assert container(only)["envFrom"] == [{"secretRef": {"name": "mine"}}]
    # A changed secret value changes the pod template, so the pods roll.
    changed = objects(template(tmp_path, {**ALL_ON, "secretEnv": {"API_TOKEN": "rotated"}}))
    annotations = [one(f, "Deployment")["spec"]["template"]["metadata"]["annotations"]
                   for f in (found, changed)]
    assert annotations[0]["checksum/secret"] != annotations[1]["checksum/secret"]
    assert annotations[0]["checksum/config"] == annotations[1]["checksum/config"]


def _image_writes() -> set[str]:
    """Where the image's kstage writes: its working directory and home (the Dockerfile's
    last WORKDIR and the kstage user's --home-dir), and the temporary directory (Python's
    tempfile and the JVM's java.io.tmpdir, which is also Spark's spark.local.dir)."""
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    workdir = re.findall(r"^WORKDIR\s+(\S+)", dockerfile, re.MULTILINE)[-1]
    (home,) = re.findall(r"--home-dir\s+(\S+)", dockerfile)
    return {workdir, home, "/tmp"}


def test_the_root_filesystem_is_read_only_and_what_kstage_writes_is_an_empty_dir(
        tmp_path: Path) -> None:
    for values in (None, ALL_ON):
        found = objects(template(tmp_path, values))
        main = container(found)
        assert main["securityContext"]["readOnlyRootFilesystem"] is True
        assert main["securityContext"]["allowPrivilegeEscalation"] is False
        volumes = {v["name"]: v for v in
                   one(found, "Deployment")["spec"]["template"]["spec"]["volumes"]}
        writable = {m["mountPath"] for m in main["volumeMounts"]
                    if not m.get("readOnly") and "emptyDir" in volumes[m["name"]]}
        assert _image_writes() <= writable, _image_writes() - writable


def test_a_new_version_of_the_existing_secret_rolls_the_pods(tmp_path: Path) -> None:
    """kstage reads its environment once, at start, and the chart cannot read a Secret
    it does not own: existingSecretVersion (any text that changes with the Secret's
    content, e.g. its hash) goes into the pod template, so a new one rolls the pods."""
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        found = objects(template(tmp_path, values))
        meta: dict[str, str] = one(found, "Deployment")["spec"]["template"]["metadata"][
            "annotations"]
        return meta

    base = {"existingSecret": "mine", "existingSecretVersion": "3f2a"}
    first, again = annotations(base), annotations(base)
    rotated = annotations({**base, "existingSecretVersion": "9c1e"})
    other = annotations({**base, "existingSecret": "theirs"})
    key = "checksum/existing-secret"
    assert first[key] == again[key]  # the same values: no roll
    assert rotated[key] != first[key] and other[key] != first[key]
    assert rotated["checksum/config"] == first["checksum/config"]
    assert key not in annotations({})  # no existing Secret: nothing to follow
    assert key in annotations({"existingSecret": "mine"})  # unversioned: still rendered
    assert key in annotations(ALL_ON)


def test_the_disruption_budget(tmp_path: Path) -> None:
    found = objects(template(tmp_path))
    pdb = one(found, "PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1 and "minAvailable" not in pdb
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    deployment = one(found, "Deployment")["spec"]
    assert pdb["selector"] == deployment["selector"]
    assert pdb["selector"]["matchLabels"].items() <= deployment["template"]["metadata"][
        "labels"].items()
    assert deployment["replicas"] == 1
    pdb = one(objects(template(tmp_path, ALL_ON)), "PodDisruptionBudget")["spec"]
    assert pdb["minAvailable"] == 1 and "maxUnavailable" not in pdb
    off = objects(template(tmp_path, {"podDisruptionBudget": {"enabled": False}}))
    assert not [k for k in off if k.startswith("PodDisruptionBudget/")]


def test_the_service_monitor_scrapes_the_metrics_service(tmp_path: Path) -> None:
    found = objects(template(tmp_path, ALL_ON))
    monitor, service = one(found, "ServiceMonitor"), one(found, "Service")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"


def keda_metadata_names() -> set[str]:
    """The trigger metadata KEDA's kafka scaler reads (from its source, by `make tools`):
    its ``keda:"name=..."`` tags read from triggerMetadata, and NAMEFromEnv for those it
    also resolves from the container's environment."""
    source = CRDS / "keda_kafka_scaler.go"
    if not source.exists():
        pytest.fail(f"{source.relative_to(ROOT)} is missing: `make tools` fetches it",
                    pytrace=False)
    names: set[str] = set()
    for name, order in re.findall(r'keda:"name=(\w+),order=([\w;]+)', source.read_text()):
        if "triggerMetadata" in order.split(";"):
            names.add(name)
        if "resolvedEnv" in order.split(";"):
            names.add(f"{name}FromEnv")
    assert {"bootstrapServers", "consumerGroup", "lagThreshold"} <= names, names
    return names


def test_keda_scales_on_each_groups_lag(tmp_path: Path) -> None:
    found = objects(template(tmp_path, ALL_ON))
    deployment = one(found, "Deployment")
    assert "replicas" not in deployment["spec"]  # the autoscaler's
    scaled = one(found, "ScaledObject")["spec"]
    assert scaled["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": deployment["metadata"]["name"]}
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (1, 6)
    known = keda_metadata_names()
    groups = []
    for trigger in scaled["triggers"]:
        assert trigger["type"] == "kafka"
        assert trigger["authenticationRef"] == {"name": "kstage-kafka"}
        metadata = trigger["metadata"]
        assert set(metadata) <= known, set(metadata) - known
        assert all(isinstance(v, str) for v in metadata.values())
        assert metadata["lagThreshold"] == "5000"
        assert (metadata["sasl"], metadata["tls"]) == ("scram_sha512", "enable")
        # the brokers: the variable the config's bootstrap names, which the container has
        assert metadata["bootstrapServersFromEnv"] == "KAFKA_BOOTSTRAP"
        assert "KAFKA_BOOTSTRAP" in _pod_environment(found)
        groups.append(metadata["consumerGroup"])
    assert groups == ["api-writer", "kstage-all"]  # group_id, else the config's name
    for bootstrap, keda, expected in (
            ("b1:9092,b2:9092", {}, {"bootstrapServers": "b1:9092,b2:9092"}),
            ("${BROKERS:-b:9092}", {}, {"bootstrapServersFromEnv": "BROKERS"}),
            ("${BROKERS}", {"bootstrapServers": "x:9092"}, {"bootstrapServers": "x:9092"})):
        values = {"config": {"kafka": {"bootstrap": bootstrap}},
                  "keda": {"enabled": True, **keda}}
        (trigger,) = one(objects(template(tmp_path, values)), "ScaledObject")["spec"][
            "triggers"]
        assert {k: v for k, v in trigger["metadata"].items() if "ootstrap" in k} == expected


@pytest.mark.parametrize("values, says", [
    ({"config": {"service": {"http_host": "127.0.0.1"}}}, "http_host must be 0.0.0.0"),
    ({"config": {"service": {"http_host": None}}}, "http_host must be 0.0.0.0"),
    ({"config": {"service": {"http_port": 0}}}, "http_port is 0"),
    ({"config": {"supervisor": {"shutdown_grace_s": "${GRACE}"}}},
     "config.supervisor.shutdown_grace_s must be a number"),
    ({"env": {"KSTAGE_SUPERVISOR__ABORT_GRACE_S": "1"}}, "KSTAGE_SUPERVISOR__ABORT_GRACE_S"),
    ({"secretEnv": {"kstage_service__http_port": "1"}}, "kstage_service__http_port"),
    ({"terminationGraceMarginSeconds": 5}, "terminationGraceMarginSeconds"),
    ({"podDisruptionBudget": {"minAvailable": 1}}, "set one of maxUnavailable"),
    ({"keda": {"enabled": True}, "config": {"kafka": {"bootstrap": "embedded"}}},
     "set keda.bootstrapServers"),
    ({"keda": {"enabled": True}, "config": {"kafka": {"bootstrap": "${HOST}:9092"}}},
     "set keda.bootstrapServers"),
    ({"serviceMonitor": {"enable": True}}, "additional properties 'enable' not allowed"),
    ({"existingSecretVersion": "3f2a"}, "existingSecretVersion is set but existingSecret"),
], ids=["loopback", "no-host", "no-port", "grace-variable", "env-override",
        "secret-override", "margin", "pdb-both", "keda-embedded", "keda-composite",
        "typo", "version-without-secret"])
def test_the_chart_refuses_what_cannot_work(values: dict[str, Any], says: str,
                                            tmp_path: Path) -> None:
    assert says in template_error(tmp_path, values)


# ------------------------------------------- the rendered config passes kstage validate


def validate_rendered(found: dict[str, dict[str, Any]], tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``kstage validate`` (in-process) of the ConfigMap's config, with the environment the
    container gets and nothing else of this process's: (exit code, what it printed)."""
    text = one(found, "ConfigMap")["data"]["kstage.yml"]
    path = tmp_path / "kstage.yml"
    path.write_text(text, encoding="utf-8")
    for name in [n for n in os.environ if n.upper().startswith("KSTAGE_")]:
        monkeypatch.delenv(name)
    for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text):
        monkeypatch.delenv(name, raising=False)
    for name, value in _pod_environment(found).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # the pod's working directory, /data
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["validate", "-c", str(path)])
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
def test_the_rendered_config_passes_kstage_validate(
        values: dict[str, Any] | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, said = validate_rendered(objects(template(tmp_path, values)), tmp_path, monkeypatch)
    assert code == 0, said


def test_a_config_kstage_refuses_fails_validation(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    broken = copy.deepcopy(ALL_ON)
    broken["config"]["groups"][0]["topics"][0]["processor"] = "json_rowz"
    code, said = validate_rendered(objects(template(tmp_path, broken)), tmp_path, monkeypatch)
    assert code == 2 and "json_rowz" in said
    # a variable the pod does not get (the Secret left out)
    missing = {**ALL_ON, "secretEnv": {}}
    code, said = validate_rendered(objects(template(tmp_path, missing)), tmp_path, monkeypatch)
    assert code == 2 and "API_TOKEN" in said


# ------------------------------------------------------- the commands of the docs


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def docs_helm_commands() -> list[list[str]]:
    """The ``helm`` command lines of docs/operations.md's Kubernetes section."""
    section = _section(OPERATIONS.read_text(encoding="utf-8"), "## Kubernetes")
    commands = []
    for block in blocks(OPERATIONS, section):
        if block.lang in ("bash", "sh", "shell", "console"):
            commands += [shlex.split(line) for line in _command_lines(block)
                         if line.startswith("helm ")]
    return commands


def as_template(argv: list[str]) -> list[str]:
    """A documented ``helm install`` / ``helm upgrade --install`` as ``helm template``."""
    assert argv[0] == "helm", argv
    if argv[1] == "install":
        rest = argv[2:]
    elif argv[1:3] == ["upgrade", "--install"]:
        rest = argv[3:]
    else:
        raise AssertionError(f"the test cannot check `{shlex.join(argv)}`: teach it")
    return ["template", *rest, "--kube-version", NEWEST]


def test_the_documented_commands_render_valid_objects(
        tmp_path: Path, schemas: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    values = {b.text.split("\n", 1)[0].split()[-1]: b for b in helm_values_blocks()
              if b.path == OPERATIONS}
    commands = docs_helm_commands()
    assert len(commands) >= 2 and len(values) >= 2, (commands, values)
    for name, block in values.items():
        (tmp_path / name).write_text(block.text, encoding="utf-8")
    (tmp_path / "deploy").symlink_to(ROOT / "deploy")  # the chart's path as the docs give it
    used: set[str] = set()
    for argv in commands:
        used |= {argv[i + 1] for i, arg in enumerate(argv) if arg in ("-f", "--values")}
        result = helm(*as_template(argv), cwd=tmp_path)
        assert result.returncode == 0, f"{shlex.join(argv)}:\n{result.stderr}"
        found = objects(result.stdout)
        assert check_manifest(result.stdout, schemas, [NEWEST]) == [], shlex.join(argv)
        code, said = validate_rendered(found, tmp_path, monkeypatch)
        assert code == 0, f"{shlex.join(argv)}: kstage validate: {said}"
    assert used == set(values), f"values blocks no command uses: {set(values) - used}"


def test_a_documented_command_the_test_does_not_know_fails() -> None:
    assert as_template(["helm", "install", "k", "deploy/helm/kstage"])[0] == "template"
    with pytest.raises(AssertionError, match="teach it"):
        as_template(["helm", "rollback", "k", "1"])


# -------------------------------------------------------------------- the dashboard

# Labels Prometheus adds to every series it scrapes (the ServiceMonitor's targets).
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "container", "endpoint"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
             "or", "unless", "offset", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{?\w+(?::\w+)?\}?")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_NUMBER = re.compile(r"(?<![\w:])\d[\w.]*")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def exported_metrics() -> dict[str, set[str]]:
    """Every sample name kstage's /metrics can show, with its labels: the registry of
    actors/metrics.py, each labelled metric given a child, the scrape-time collector fed a
    worker with a partition (prometheus_client adds _total, _bucket, _sum, _count, _created)."""
    metrics = Metrics()
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase) and metric._labelnames:
            metric.labels(*["x"] * len(metric._labelnames))
    metrics.watch(lambda: [{
        "group": "g", "topic": "t", "stats": {}, "restarts": 0, "paused_partitions": 0,
        "in_flight": 0, "partitions": [{"partition": 0, "committed": 1, "high_water": 2,
                                        "lag": 1, "state": "running"}]}])
    names: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        assert family.samples, f"{family.name}: no sample (give it one above)"
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) of a PromQL expression with Grafana's variables."""
    labels: set[str] = set()
    text = _GRAFANA_VARIABLE.sub("", _STRING.sub('""', expr))
    for matchers in _MATCHERS.findall(text):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers))
    text = _RANGE.sub(" ", _MATCHERS.sub(" ", text))
    for names in _LABEL_LIST.findall(text):
        labels |= {n.strip() for n in names.split(",") if n.strip()}
    text = _NUMBER.sub(" ", _LABEL_LIST.sub(" ", text))
    metrics = {m.group() for m in _IDENTIFIER.finditer(text)
               if m.group().lower() not in _KEYWORDS
               and not re.match(r"\s*\(", text[m.end():])}  # a function or aggregation
    return metrics, labels


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(where, PromQL, legend) of every panel target and variable query."""
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"], \
                target.get("legendFormat", "")
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            query = query["query"] if isinstance(query, dict) else query
            found = re.fullmatch(r"label_values\((?:(?P<expr>.+),\s*)?(?P<label>\w+)\)", query)
            assert found and found["expr"], f"variable {variable['name']}: {query}"
            yield f"variable {variable['name']}", found["expr"], "{{" + found["label"] + "}}"


def _balanced(expr: str) -> bool:
    """Whether the brackets of ``expr`` (outside strings) pair up."""
    stack: list[str] = []
    for char in _STRING.sub('""', expr):
        if char in "([{":
            stack.append(")]}"["([{".index(char)])
        elif char in ")]}" and (not stack or stack.pop() != char):
            return False
    return not stack


def check_dashboard(dashboard: dict[str, Any], exported: dict[str, set[str]]) -> list[str]:
    """Problems of the dashboard: unbalanced brackets, a query naming no metric, a metric
    kstage does not export, a label (in a matcher, a by/without list or the legend) none
    of the query's metrics has, a metric kstage exports that no query shows."""
    problems: list[str] = []
    shown: set[str] = set()
    for where, expr, legend in dashboard_queries(dashboard):
        if not _balanced(expr):
            problems.append(f"{where}: unbalanced brackets: {expr}")
        metrics, labels = promql_names(expr)
        labels |= set(_LEGEND_LABEL.findall(legend))
        if not metrics:
            problems.append(f"{where}: names no metric: {expr}")
        unknown = metrics - set(exported)
        problems += [f"{where}: {name} is not a metric kstage exports" for name in unknown]
        known = set().union(*(exported[m] for m in metrics - unknown)) | TARGET_LABELS
        problems += [f"{where}: no metric of {expr!r} has the label {label!r}"
                     for label in sorted(labels - known)]
        shown |= metrics
    families = {re.sub(r"_(total|bucket|sum|count|created)$", "", n) for n in exported}
    problems += [f"no query shows {family}" for family in sorted(families)
                 if not any(re.sub(r"_(total|bucket|sum|count)$", "", n) == family
                            for n in shown)]
    return problems


def test_every_dashboard_query_names_what_kstage_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["title"] == "kstage" and dashboard["uid"] == "kstage"
    assert check_dashboard(dashboard, exported_metrics()) == []


def test_the_dashboard_panels_are_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", \
                panel["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


def test_the_promql_names_are_read_right() -> None:
    assert promql_names(
        'histogram_quantile(0.99, sum by (le, group) (rate(kstage_commit_seconds_bucket'
        '{namespace=~"$namespace", topic!="a,b"}[$__rate_interval] offset 5m)))') == \
        ({"kstage_commit_seconds_bucket"}, {"le", "group", "namespace", "topic"})
    assert promql_names("time() - max by (table) (kstage_merge_final_rows) > 1e3") == \
        ({"kstage_merge_final_rows"}, {"table"})
    assert promql_names("sum(rate(a_total[5m])) / ignoring(x) sum(b:rate5m)")[0] == \
        {"a_total", "b:rate5m"}


def test_a_broken_dashboard_fails() -> None:
    exported = exported_metrics()
    good = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert check_dashboard(good, exported) == []
    (target, *_) = (t for p in good["panels"] for t in p.get("targets", []))
    original = target["expr"]
    for broken in ('sum(rate(kstage_messages_consumd_total[5m]))',       # misspelt
                   'sum(rate(kstage_messages_consumed[5m]))',            # no _total
                   'sum by (partitionn) (kstage_lag)',                   # no such label
                   'sum by (table) (kstage_lag)',                        # another metric's
                   'kstage_lag{topik="x"}',                              # a matcher's label
                   'sum(rate(up[5m]))',                                   # not kstage's
                   'sum(rate(kstage_commits_total[5m])'):                 # a ')' missing
        target["expr"] = broken
        assert check_dashboard(good, exported), broken
    target["expr"], target["legendFormat"] = original, "{{sinc}}"
    assert any("'sinc'" in p for p in check_dashboard(good, exported))
    target["legendFormat"] = ""
    without = json.loads(json.dumps(good))
    for panel in without["panels"]:
        panel["targets"] = [t for t in panel.get("targets", [])
                            if "kstage_merge_final_rows" not in t["expr"]]
    assert "no query shows kstage_merge_final_rows" in check_dashboard(without, exported)
