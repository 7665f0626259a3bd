"""``deploy/k8s/``: every manifest validated against the Kubernetes API's schemas, and
cross-checked against the code it runs.

The schemas are the Kubernetes OpenAPI definitions as JSON schema, bundled per Kubernetes version by
``kubernetes-validate`` (a dev extra; offline), checked strictly: a misspelt or misplaced field is
an error, not ignored. The code checks: the ``GREENTWIN_*`` names are settings, the command lines
parse as ``greentwin`` subcommands, the probes hit routes the app serves, every Secret, key,
ConfigMap and claim a pod refers to is defined, the owner's Secret reaches the migration and the
purge only, and the key files mounted the way the manifests mount them let the service's start-up
checks pass.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as k8s_schema

from app.cli import build_parser
from app.cli.init import SECRETS_SUBDIR, init_state_dir
from app.core.config import Settings
from app.core.settings_doc import settings_rows

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
DOCKERFILE = K8S.parent / "Dockerfile"
CONTAINER_UID = 10001
TEMPLATES = "secrets.example.yaml"
OLDEST_KUBERNETES = "1.31"
"""The oldest Kubernetes the manifests are written for (deploy/README.md): the retrain's
``podFailurePolicy`` is GA there."""
KUBERNETES_VERSIONS = (OLDEST_KUBERNETES, k8s_schema.latest_version())
APP_DB, OWNER_DB = ("greentwin-db", "app-url"), ("greentwin-db-owner", "owner-url")
"""The restricted role's URL and the owner's, each in a Secret of its own."""


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.fixture(scope="module")
def manifests() -> dict[str, list[dict[str, Any]]]:
    """Relative path -> its documents, every YAML file under deploy/k8s."""
    found = {str(p.relative_to(K8S)): _docs(p) for p in sorted(K8S.rglob("*.yaml"))}
    assert found, "deploy/k8s has no manifests"
    return found


def _objects(manifests: dict[str, list[dict[str, Any]]], *, templates: bool = False) -> list[dict[str, Any]]:
    return [d for name, docs in manifests.items() for d in docs
            if d.get("kind") != "Kustomization" and (templates or name != TEMPLATES)]


def _pod_specs(manifests: dict[str, list[dict[str, Any]]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in _objects(manifests):
        spec = obj.get("spec", {})
        if obj["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        if "template" in spec:
            yield f"{obj['kind']}/{obj['metadata']['name']}", spec["template"]["spec"]


def _containers(manifests: dict[str, list[dict[str, Any]]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for where, pod in _pod_specs(manifests):
        for c in pod.get("initContainers", []) + pod["containers"]:
            yield f"{where}/{c['name']}", c


def _by_kind(manifests: dict[str, list[dict[str, Any]]], kind: str, *, templates: bool = False
             ) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in _objects(manifests, templates=templates) if o["kind"] == kind}


def test_every_manifest_is_a_namespace_free_object(manifests: dict[str, list[dict[str, Any]]]) -> None:
    for name, docs in manifests.items():
        for doc in docs:
            assert doc.get("apiVersion") and doc.get("kind"), name
            if doc["kind"] != "Kustomization":
                assert doc["metadata"]["name"], name
                assert "namespace" not in doc["metadata"], f"{name} names a namespace; apply with -n instead"
    assert not any("namespace" in d for docs in manifests.values() for d in docs
                   if d["kind"] == "Kustomization")


def test_kustomizations_list_every_manifest_and_one_image(manifests: dict[str, list[dict[str, Any]]]) -> None:
    """Nothing is left out of an apply by accident; the Secret templates are left out on purpose
    (applying them would replace real secrets with placeholders)."""
    listed: set[str] = set()
    images = []
    for name, docs in manifests.items():
        for doc in docs:
            if doc["kind"] == "Kustomization":
                folder = Path(name).parent
                listed |= {str(folder / r) for r in doc["resources"]}
                images.append(doc["images"])
    assert listed == set(manifests) - {TEMPLATES} - {n for n in manifests if n.endswith("kustomization.yaml")}
    assert len(images) == 2 and images[0] == images[1], \
        "deploy/k8s and deploy/k8s/migrate name different images"
    for _, c in _containers(manifests):
        assert c["image"] == images[0][0]["name"], "an image the kustomizations do not set"


def test_greentwin_variables_are_settings(manifests: dict[str, list[dict[str, Any]]]) -> None:
    known = {var for var, _, _ in settings_rows()}
    used = set(_by_kind(manifests, "ConfigMap")["greentwin-config"]["data"])
    for _, c in _containers(manifests):
        used |= {e["name"] for e in c.get("env", [])}
    greentwin = {u for u in used if u.startswith("GREENTWIN_")}
    assert greentwin, "no settings found"
    assert greentwin <= known, f"not settings: {sorted(greentwin - known)}"
    # Secret files read through GREENTWIN_SECRETS_DIR are named like settings too.
    for secret in _by_kind(manifests, "Secret", templates=True).values():
        files = {k for k in secret["stringData"] if k.startswith("greentwin_")}
        assert {f.upper() for f in files} <= known, secret["metadata"]["name"]


def _argv(container: dict[str, Any]) -> list[str]:
    return list(container.get("command", [])) + list(container.get("args", []))


def test_command_lines_are_greentwin_subcommands(manifests: dict[str, list[dict[str, Any]]]) -> None:
    parser = build_parser()
    seen = set()
    for where, c in _containers(manifests):
        argv = _argv(c)
        assert argv[:1] == ["greentwin"], f"{where} runs {argv!r}, not a greentwin command"
        seen.add(argv[1])
        try:
            parser.parse_args(argv[1:])
        except SystemExit as exc:
            pytest.fail(f"{where}: `{' '.join(argv)}` is not a valid command line (exit {exc.code})")
    assert {"serve", "retrain", "audit", "db"} <= seen


def test_probes_hit_routes_the_app_serves(manifests: dict[str, list[dict[str, Any]]]) -> None:
    from app.main import create_app

    routes = set(create_app(Settings()).openapi()["paths"])
    serve = _by_kind(manifests, "StatefulSet")["greentwin"]["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in serve["ports"]}
    probes = {k: serve[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    for kind, probe in probes.items():
        assert probe["path"] in routes, f"{kind} {probe['path']} is not a route"
        assert probe["port"] in ports or probe["port"] in ports.values(), kind
    assert probes["readinessProbe"]["path"] == "/readyz" and probes["livenessProbe"]["path"] == "/healthz"
    assert ports["http"] == int(_argv(serve)[_argv(serve).index("--port") + 1])
    service = _by_kind(manifests, "Service")["greentwin"]
    assert service["spec"]["ports"][0]["targetPort"] in ports


def test_references_are_defined(manifests: dict[str, list[dict[str, Any]]]) -> None:
    """Every Secret key, ConfigMap and claim a pod names exists (Secrets: in the templates)."""
    secrets = {name: set(s["stringData"])
               for name, s in _by_kind(manifests, "Secret", templates=True).items()}
    configmaps = set(_by_kind(manifests, "ConfigMap"))
    claims = set(_by_kind(manifests, "PersistentVolumeClaim"))
    refs = 0
    for where, pod in _pod_specs(manifests):
        owner = next(o for o in _objects(manifests) if where == f"{o['kind']}/{o['metadata']['name']}")
        templates = {t["metadata"]["name"] for t in owner["spec"].get("volumeClaimTemplates", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for v in volumes.values():
            sources = [s["secret"] for s in v.get("projected", {}).get("sources", []) if "secret" in s]
            sources += [{"name": v["secret"]["secretName"]}] if "secret" in v else []
            for s in sources:
                assert s["name"] in secrets, f"{where}: volume {v['name']} reads undefined Secret {s['name']}"
                refs += 1
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in claims, where
        for c in pod.get("initContainers", []) + pod["containers"]:
            for e in c.get("envFrom", []):
                assert e["configMapRef"]["name"] in configmaps, where
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets.get(ref["name"], set()), \
                        f"{where}: {ref} is not in the templates"
                    refs += 1
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes or m["name"] in templates, \
                    f"{where}: mount {m['name']} has no volume"
    assert refs >= 8
    placeholders = [v for s in _by_kind(manifests, "Secret", templates=True).values()
                    for v in s["stringData"].values()]
    assert all(v.startswith("REPLACE") for v in placeholders), "a Secret template holds something real"


def test_database_roles_split(manifests: dict[str, list[dict[str, Any]]]) -> None:
    """Migrations and purges as the owner; the service, the retrain and verification as the restricted
    role."""
    roles = {}
    for where, c in _containers(manifests):
        urls = [(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
                for e in c.get("env", []) if e["name"] == "GREENTWIN_DATABASE_URL"]
        assert len(urls) == 1, f"{where} has no database URL from the Secret"
        roles[" ".join(_argv(c)[1:3])] = urls[0]
    assert roles["db upgrade"] == roles["db grant"] == roles["audit purge"] == OWNER_DB
    assert roles["serve --host"] == roles["retrain"] == roles["audit verify"] == APP_DB


def _secrets_named(pod: dict[str, Any]) -> set[str]:
    """Every Secret a pod spec can read: env, envFrom and volumes (projected ones included)."""
    names = set()
    for c in pod.get("initContainers", []) + pod["containers"]:
        names |= {e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", [])
                  if "secretKeyRef" in e.get("valueFrom", {})}
        names |= {e["secretRef"]["name"] for e in c.get("envFrom", []) if "secretRef" in e}
    for v in pod.get("volumes", []):
        names |= {v["secret"]["secretName"]} if "secret" in v else set()
        names |= {s["secret"]["name"] for s in v.get("projected", {}).get("sources", []) if "secret" in s}
    return names


def test_only_the_migration_and_the_purge_read_the_owner_secret(
        manifests: dict[str, list[dict[str, Any]]]) -> None:
    """The owner's URL is a Secret of its own, read by the migration Job and the purge alone: no
    replica of the service holds it, whatever a compromised pod reads from its environment or
    files, and RBAC can grant the service's Secret without it."""
    readers = {where for where, pod in _pod_specs(manifests) if OWNER_DB[0] in _secrets_named(pod)}
    assert readers == {"Job/greentwin-db-upgrade", "CronJob/greentwin-audit-purge"}
    secrets = _by_kind(manifests, "Secret", templates=True)
    assert set(secrets[OWNER_DB[0]]["stringData"]) == {OWNER_DB[1]}
    assert OWNER_DB[1] not in secrets[APP_DB[0]]["stringData"], "the service's Secret carries the owner's URL"
    serve = _by_kind(manifests, "StatefulSet")["greentwin"]["spec"]["template"]["spec"]
    assert "owner" not in yaml.safe_dump(serve).lower()


def _api_objects() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Kubernetes object under deploy/k8s (the Secret templates too); kustomize's own files
    are kustomize's configuration, not API objects."""
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in _docs(path):
            if doc["kind"] != "Kustomization":
                yield f"{path.relative_to(K8S)}: {doc['kind']}/{doc['metadata']['name']}", doc


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_match_the_kubernetes_schemas(version: str) -> None:
    checked = []
    for where, obj in _api_objects():
        try:
            k8s_schema.validate(obj, version, strict=True)
        except k8s_schema.ValidationError as exc:
            path = "/".join(str(p) for p in exc.path)
            pytest.fail(f"{where} is not valid Kubernetes {version} at {path or '<root>'}: {exc.message}")
        except k8s_schema.SchemaNotFoundError as exc:
            pytest.fail(f"{where}: {exc.message}")
        checked.append(obj["kind"])
    assert {"StatefulSet", "Service", "ConfigMap", "CronJob", "Job", "Secret",
            "PersistentVolumeClaim"} <= set(checked)


def test_the_schema_check_catches_what_the_parser_would_not() -> None:
    """The validator is live: a misspelt field, a string for a number and a missing container
    name in the StatefulSet are each refused."""
    serve = next(obj for _, obj in _api_objects() if obj["kind"] == "StatefulSet")
    k8s_schema.validate(serve, OLDEST_KUBERNETES, strict=True)
    spelling, kind_of_value, missing = (copy.deepcopy(serve) for _ in range(3))
    spelling["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    kind_of_value["spec"]["replicas"] = "2"
    del missing["spec"]["template"]["spec"]["containers"][0]["name"]
    for broken, expected in ((spelling, "readinesProbe"), (kind_of_value, "'2' is not of type"),
                             (missing, "'name' is a required property")):
        with pytest.raises(k8s_schema.ValidationError, match=expected):
            k8s_schema.validate(broken, OLDEST_KUBERNETES, strict=True)


def test_pods_run_as_the_image_user_with_limits(manifests: dict[str, list[dict[str, Any]]]) -> None:
    dockerfile = DOCKERFILE.read_text()
    assert f"--uid {CONTAINER_UID}" in dockerfile
    home = re.search(r"--home (\S+)", dockerfile)
    assert home, "the Dockerfile no longer names the user's home"
    for where, pod in _pod_specs(manifests):
        ctx = pod["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == ctx["runAsGroup"] == CONTAINER_UID, where
        assert pod.get("automountServiceAccountToken") is False, where
        if any("secret" in v or "projected" in v or "persistentVolumeClaim" in v
               for v in pod.get("volumes", [])):
            assert ctx["fsGroup"] == CONTAINER_UID, \
                f"{where}: mounted files must be readable by the image user"
    for where, c in _containers(manifests):
        assert c["resources"]["requests"] and c["resources"]["limits"], where
        assert c["securityContext"]["allowPrivilegeEscalation"] is False, where
        if c["securityContext"].get("readOnlyRootFilesystem"):
            writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
            assert {"/tmp", home.group(1)} <= writable, \
                f"{where}: a read-only root needs /tmp and a home to write"


def test_schedules_and_replicas(manifests: dict[str, list[dict[str, Any]]]) -> None:
    cron = _by_kind(manifests, "CronJob")
    assert set(cron) == {"greentwin-retrain", "greentwin-audit-verify", "greentwin-audit-purge"}
    for job in cron.values():
        assert job["spec"]["concurrencyPolicy"] == "Forbid" and len(job["spec"]["schedule"].split()) == 5
        assert job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] in {"Never",
                                                                                           "OnFailure"}
    retrain = cron["greentwin-retrain"]["spec"]["jobTemplate"]["spec"]
    # The ensembles it writes are on the claim every replica reads, at the same path.
    serve = _by_kind(manifests, "StatefulSet")["greentwin"]
    claim = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in
             serve["spec"]["template"]["spec"]["volumes"] + retrain["template"]["spec"]["volumes"]}
    mounts = {(m["mountPath"], claim.get(m["name"]))
              for m in retrain["template"]["spec"]["containers"][0]["volumeMounts"]}
    shared = {m["mountPath"] for m in serve["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
              if (m["mountPath"], claim.get(m["name"])) in mounts and claim.get(m["name"])}
    assert shared, "the service does not see the retrain's ensembles"
    assert serve["spec"]["replicas"] == 2
    assert _by_kind(manifests, "Job")["greentwin-db-upgrade"]["spec"]["template"]["spec"]["restartPolicy"] \
        == "Never"


def _mount_like_kubernetes(files: dict[str, bytes], at: Path) -> None:
    """A Secret volume as the kubelet writes it: files in a timestamped folder behind ``..data``,
    each visible name a symlink through ``..data``."""
    real = at / "..2026_01_01_00_00_00.000000001"
    real.mkdir(parents=True)
    for name, data in files.items():
        (real / name).write_bytes(data)
    (at / "..data").symlink_to(real.name)
    for name in files:
        (at / name).symlink_to(f"..data/{name}")


def test_mounted_keys_pass_the_start_checks(manifests: dict[str, list[dict[str, Any]]], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """What `greentwin init` makes, put in the Secret and mounted as the StatefulSet mounts it,
    with the ConfigMap's variables, is what the service's key checks need."""
    from app.cli.preflight import check_keys, load_settings

    made = tmp_path / "site-keys"
    init_state_dir(made)
    files = {p.name: p.read_bytes() for p in (made / SECRETS_SUBDIR).iterdir()}
    secrets = _by_kind(manifests, "Secret", templates=True)
    assert set(secrets["greentwin-keys"]["stringData"]) == set(files), "the template is not what init makes"
    files |= {"greentwin_mqtt_password": b"broker-password-0123456789\n"}

    pod = _by_kind(manifests, "StatefulSet")["greentwin"]["spec"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "keys")["mountPath"]
    volume = next(v for v in pod["volumes"] if v["name"] == "keys")
    mounted = {k for s in volume["projected"]["sources"] for k in secrets[s["secret"]["name"]]["stringData"]}
    assert mounted == set(files)
    root = tmp_path / "root"
    _mount_like_kubernetes(files, root / mount.lstrip("/"))

    for key in [k for k in os.environ if k.startswith("GREENTWIN_")]:
        monkeypatch.delenv(key)
    config = _by_kind(manifests, "ConfigMap")["greentwin-config"]["data"]
    for key, value in config.items():
        monkeypatch.setenv(key, str(root / value.lstrip("/")) if value.startswith(mount) else value)
    monkeypatch.setenv("GREENTWIN_DATABASE_URL", "postgresql://greentwin_app:pw@db/greentwin")
    settings = load_settings()
    check_keys(settings)  # raises StartBlocked with the one line the service would print
    assert settings.environment == "prod" and settings.secret_key is not None
    assert settings.mqtt_password is not None \
        and settings.mqtt_password.get_secret_value() == "broker-password-0123456789"
    assert settings.audit_signing_key is not None \
        and settings.audit_signing_key.read_bytes() == files["audit_signing_key"]
