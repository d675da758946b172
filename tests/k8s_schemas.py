"""JSON schemas for kubeconform, offline: Kubernetes' own and those of two CRDs.

kubeconform's default schema location is on GitHub, which the test machines cannot reach.

* The Kubernetes API: the schemas ``kubernetes-validate`` (a dev dependency) bundles, one
  directory per version in the yannh/kubernetes-json-schema layout
  (``v1.37.0-local-strict/deployment-apps-v1.json``). They reference their shared
  definitions as ``/api/_definitions.json`` under an ``$id`` of kubernetes.io, which
  kubeconform would fetch from there: :func:`kubernetes_schemas` copies one version with
  those references made relative to the file, so they resolve on disk.
* CRDs (KEDA's ScaledObject, prometheus-operator's ServiceMonitor: fetched from their Go
  modules by ``make tools`` into ``.tools/crds``): :func:`crd_schemas` turns each served
  version's ``openAPIV3Schema`` into a JSON schema at ``GROUP/KIND_VERSION.json`` (the
  layout of the CRDs catalog kubeconform's docs use), strict as kubectl's validation is:
  an object with ``properties`` refuses any other key unless the CRD keeps unknown fields,
  and ``apiVersion`` and ``kind`` must be the CRD's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

KUBERNETES_VALIDATE = "kubernetes_validate"
# kubeconform's -schema-location templates of the two layouts written here.
KUBERNETES_LOCATION = "{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}/" \
    "{{ .ResourceKind }}{{ .KindSuffix }}.json"
CRD_LOCATION = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"


def bundled_schemas() -> Path:
    """The ``kubernetes-json-schema`` directory of the installed kubernetes-validate."""
    import kubernetes_validate  # the dev dependency: imported only here

    return Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


def bundled_versions() -> list[str]:
    """The Kubernetes versions kubernetes-validate has strict schemas of, oldest first."""
    names = [p.name.removesuffix("-local-strict") for p in bundled_schemas().iterdir()
             if p.name.endswith("-local-strict")]
    return sorted(names, key=lambda v: tuple(int(n) for n in v.lstrip("v").split(".")))


def kubernetes_schemas(dest: Path, version: str) -> Path:
    """Write the strict schemas of Kubernetes ``version`` (``v1.37.0``) under ``dest``,
    their references resolvable on disk; return ``dest`` (the -schema-location root)."""
    source = bundled_schemas() / f"{version}-local-strict"
    if not source.is_dir():
        raise FileNotFoundError(f"kubernetes-validate has no schemas of {version}: "
                                f"{bundled_versions()}")
    target = dest / source.name
    target.mkdir(parents=True, exist_ok=True)
    for path in source.glob("*.json"):
        text = path.read_text(encoding="utf-8")
        schema = json.loads(text.replace('"/api/_definitions.json#', '"_definitions.json#'))
        schema.pop("$id", None)  # its base is then the file
        (target / path.name).write_text(json.dumps(schema), encoding="utf-8")
    return dest


def _strict(node: Any) -> Any:
    """An OpenAPI v3 schema (of a CRD) as a strict JSON schema, recursively."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def crd_schemas(crds: list[Path], dest: Path) -> Path:
    """Write a JSON schema per served version of each CRD file under ``dest``; return it."""
    for crd_path in crds:
        crd = yaml.safe_load(crd_path.read_text(encoding="utf-8"))
        if crd.get("kind") != "CustomResourceDefinition":
            raise ValueError(f"{crd_path}: not a CustomResourceDefinition")
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served", True):
                continue
            schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
            schema["$schema"] = "http://json-schema.org/draft-07/schema#"
            schema.setdefault("properties", {}).update({
                "apiVersion": {"type": "string", "enum": [f"{group}/{version['name']}"]},
                "kind": {"type": "string", "enum": [kind]},
            })
            schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind",
                                         "metadata"})
            out = dest / group / f"{kind.lower()}_{version['name']}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(schema, indent=1), encoding="utf-8")
    return dest
