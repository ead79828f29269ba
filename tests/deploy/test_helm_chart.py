"""The Helm chart (issue 15), proven by the tools that consume it.

helm-python-sdk (Helm's Go SDK as a shared library) lints and renders the chart with its
defaults and every example under helm/hpcmon/ci/; kubernetes-validate checks each core object
against the oldest and newest Kubernetes the chart claims; the prometheus-operator CRD schemas
check the ServiceMonitor and PrometheusRule objects; promtool checks the rendered rules; the
real exporter and post-job parsers take the rendered command lines.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from packaging.version import Version

from hpcmon.exporter.cli import available_collectors, build_parser
from hpcmon.post_job.cli import build_flush_parser

# Slow (renders the chart with Helm's SDK many times): not in `make check`.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "hpcmon"
CRD_DIR = Path(__file__).parents[1] / "data" / "prometheus-operator-crd"
# The chart's example values: ci/ (one per part of the chart) and examples/ (in docs/helm.md).
EXAMPLES = {
    p.name: p for p in sorted(CHART.glob("*/*-values.yaml")) if p.parent.name in ("ci", "examples")
}
CASES = ["default", *EXAMPLES]
RELEASE = "hpcmon"
NAMESPACE = "monitoring"
ENDPOINTS_DEPRECATED = "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"


def case_values(case: str) -> dict[str, Any] | None:
    """The values of a test case: None for the chart's defaults, else a ci/ file."""
    if case == "default":
        return None
    return yaml.safe_load(EXAMPLES[case].read_text())


@functools.cache
def chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def render(
    values: dict[str, Any] | None = None, source: helm.Chart | None = None
) -> list[dict[str, Any]]:
    """Every object the chart (or ``source``) renders with these values, in template order."""
    manifests = (source or chart()).render(
        values, name=RELEASE, namespace=NAMESPACE, is_install=True
    )
    objects = []
    for template, text in sorted(manifests.items()):
        if template.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


@functools.cache
def rendered(case: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(case_values(case)))


def of_kind(objects, kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def pod_container(pod: dict[str, Any], name: str = "exporter") -> dict[str, Any]:
    """A container of a pod spec by name (the compute pod may also run `flush`)."""
    (found,) = [c for c in pod["containers"] if c["name"] == name]
    return found


def claimed_kube_versions() -> tuple[str, str]:
    """Oldest and newest Kubernetes the chart claims (Chart.yaml kubeVersion), as major.minor.

    The constraint is '>=X.Y.Z-0' optionally followed by '<A.B.C-0'; without an upper bound the
    newest is the newest version kubernetes-validate has schemas for.
    """
    constraint = chart().metadata["kubeVersion"]
    match = re.fullmatch(
        r">=\s*(\d+\.\d+)\.\d+(?:-0)?(?:\s+<\s*(\d+\.\d+)\.\d+(?:-0)?)?", constraint
    )
    assert match, f"unexpected kubeVersion constraint {constraint!r}"
    known = kubernetes_validate.utils.all_versions()
    oldest = match.group(1)
    inside = [v for v in known if Version(v) >= Version(oldest)]
    if match.group(2):
        inside = [v for v in inside if Version(v) < Version(match.group(2))]
    assert inside and Version(inside[0]) == Version(oldest + ".0"), (
        f"kubernetes-validate has no schemas for the oldest claimed version {oldest}"
    )
    return kubernetes_validate.utils.major_minor(inside[0]), kubernetes_validate.utils.major_minor(
        inside[-1]
    )


KUBE_VERSIONS = claimed_kube_versions()


# --- lint and render ---------------------------------------------------------------------


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_helm_lint_passes(case: str, kube_version: str) -> None:
    report = helm.lint(
        CHART, case_values(case), namespace=NAMESPACE, kube_version=f"v{kube_version}.0"
    )
    assert report["errors"] == []
    endpoints = of_kind(rendered(case), "Endpoints")
    problems = [
        message
        for message in report["messages"]
        if message["severity"] >= 2
        # Documented choice (templates/external-hosts.yaml): v1 Endpoints are still served.
        and not (endpoints and message["error"] == ENDPOINTS_DEPRECATED)
    ]
    assert problems == []


def test_kube_version_claim_is_the_lower_bound_of_what_is_tested() -> None:
    oldest, newest = KUBE_VERSIONS
    assert Version(oldest) < Version(newest)
    assert chart().metadata["kubeVersion"].startswith(f">={oldest}.")


@pytest.mark.parametrize("case", CASES)
def test_render_gives_the_expected_objects(case: str) -> None:
    values = chart().merge_values(case_values(case))
    kinds = [obj["kind"] for obj in rendered(case)]
    daemonsets = {obj["metadata"]["name"] for obj in of_kind(rendered(case), "DaemonSet")}
    expected = {f"{RELEASE}-{role}" for role in ("lustre", "compute") if values[role]["enabled"]}
    assert daemonsets == expected
    assert ("ServiceMonitor" in kinds) == values["prometheus"]["monitor"]["enabled"]
    assert ("CronJob" in kinds) == values["postJob"]["flush"]["enabled"]
    external = values["externalHosts"]["enabled"]
    assert ("Endpoints" in kinds or "EndpointSlice" in kinds) == external
    names = [(obj["kind"], obj["metadata"]["name"]) for obj in rendered(case)]
    assert len(names) == len(set(names)), "two objects of one kind share a name"
    for obj in rendered(case):
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_names_fit_kubernetes_limits_with_the_longest_release_name() -> None:
    longest = "r" * 53  # Helm's limit for a release name
    helm.validate_release_name(longest)
    manifests = chart().render(
        case_values("everything-on-values.yaml"), name=longest, namespace=NAMESPACE
    )
    names = [
        (doc["kind"], doc["metadata"]["name"])
        for template, text in manifests.items()
        if not template.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    assert len(names) == len(set(names))
    for kind, name in names:
        assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name), (kind, name)


def test_packaged_chart_renders_the_same_objects(tmp_path: Path) -> None:
    archive = helm.package(CHART, destination=tmp_path)
    with helm.Chart.load(archive) as packaged:
        objects = render(case_values("everything-on-values.yaml"), packaged)
    assert objects == list(rendered("everything-on-values.yaml"))


# --- Kubernetes schemas ------------------------------------------------------------------

CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_core_objects_validate_against_kubernetes_schemas(case: str, kube_version: str) -> None:
    core = [obj for obj in rendered(case) if obj["kind"] not in CRD_KINDS]
    assert core
    for obj in core:
        used = kubernetes_validate.validate(obj, kube_version, strict=True)
        assert used == kube_version, f"no {kube_version} schema for {obj['kind']}"


def strict_schema(schema: Any) -> Any:
    """The CRD schema with unknown fields refused (what kubectl's strict field validation does)."""
    if isinstance(schema, dict):
        schema = {key: strict_schema(value) for key, value in schema.items()}
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict_schema(item) for item in schema]
    return schema


@functools.cache
def crd_validators() -> dict[str, jsonschema.Draft7Validator]:
    validators = {}
    for path in CRD_DIR.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = strict_schema(version["schema"]["openAPIV3Schema"])
            key = f"{crd['spec']['group']}/{version['name']}:{kind}"
            validators[key] = jsonschema.Draft7Validator(schema)
    return validators


def test_crd_schemas_are_real_and_strict() -> None:
    validator = crd_validators()["monitoring.coreos.com/v1:ServiceMonitor"]
    good = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "x"},
        "spec": {"selector": {}, "endpoints": [{"port": "metrics"}]},
    }
    assert not list(validator.iter_errors(good))
    typo = copy.deepcopy(good)
    typo["spec"]["endpoints"][0]["intervall"] = "30s"
    assert list(validator.iter_errors(typo))


@pytest.mark.parametrize("case", CASES)
def test_monitoring_objects_validate_against_prometheus_operator_crds(case: str) -> None:
    objects = [obj for obj in rendered(case) if obj["kind"] in CRD_KINDS]
    for obj in objects:
        validator = crd_validators()[f"{obj['apiVersion']}:{obj['kind']}"]
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
        assert errors == [], f"{obj['kind']} {obj['metadata']['name']}"
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", obj["metadata"]["name"])
        assert len(obj["metadata"]["name"]) <= 63


# --- wiring: what selects what -----------------------------------------------------------


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if chart().merge_values(case_values(c))["prometheus"]["monitor"]["enabled"]],
)
def test_servicemonitor_selects_every_service_and_port(case: str) -> None:
    objects = rendered(case)
    values = chart().merge_values(case_values(case))
    services = of_kind(objects, "Service")
    (monitor,) = of_kind(objects, "ServiceMonitor")
    for key, value in values["prometheus"]["monitor"]["additionalLabels"].items():
        assert monitor["metadata"]["labels"][key] == value
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert services and all(matches(selector, s["metadata"]["labels"]) for s in services)
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    port = monitor["spec"]["endpoints"][0]["port"]
    job_label = monitor["spec"]["jobLabel"]
    for service in services:
        assert port in [p["name"] for p in service["spec"]["ports"]]
        role = service["metadata"]["labels"]["app.kubernetes.io/component"]
        wanted = values["externalHosts" if role == "external" else role]["job"]
        assert service["metadata"]["labels"][job_label] == wanted
        if "selector" in service["spec"]:  # a DaemonSet's Service
            pods = [
                ds
                for ds in of_kind(objects, "DaemonSet")
                if matches(
                    service["spec"]["selector"], ds["spec"]["template"]["metadata"]["labels"]
                )
            ]
            assert len(pods) == 1
            exporter = pod_container(pods[0]["spec"]["template"]["spec"])
            assert port in [p["name"] for p in exporter["ports"]]


def test_kube_prometheus_stack_release_label_is_the_default() -> None:
    objects = rendered("default")
    for kind in ("ServiceMonitor", "PrometheusRule"):
        for obj in of_kind(objects, kind):
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.mark.parametrize(
    "case", [c for c in CASES if (case_values(c) or {}).get("externalHosts", {}).get("enabled")]
)
def test_external_hosts_become_endpoints_of_a_selectorless_service(case: str) -> None:
    objects = rendered(case)
    values = chart().merge_values(case_values(case))
    hosts = values["externalHosts"]["hosts"]
    (service,) = [s for s in of_kind(objects, "Service") if "selector" not in s["spec"]]
    if values["prometheus"]["monitor"]["serviceDiscoveryRole"] == "EndpointSlice":
        slices = of_kind(objects, "EndpointSlice")
        assert all(
            s["metadata"]["labels"]["kubernetes.io/service-name"] == service["metadata"]["name"]
            for s in slices
        )
        listed = [
            (address, endpoint.get("hostname"))
            for s in slices
            for endpoint in s["endpoints"]
            for address in endpoint["addresses"]
        ]
        for s in slices:
            wanted = "IPv6" if ":" in s["endpoints"][0]["addresses"][0] else "IPv4"
            assert s["addressType"] == wanted
        for monitor in of_kind(objects, "ServiceMonitor"):  # none with sharded collection
            assert monitor["spec"]["serviceDiscoveryRole"] == "EndpointSlice"
    else:
        (endpoints,) = of_kind(objects, "Endpoints")
        assert endpoints["metadata"]["name"] == service["metadata"]["name"]
        listed = [
            (address["ip"], address.get("hostname"))
            for subset in endpoints["subsets"]
            for address in subset["addresses"]
        ]
    assert sorted(listed, key=str) == sorted(((h["ip"], h.get("hostname")) for h in hosts), key=str)


# --- security ----------------------------------------------------------------------------


def pod_specs(objects) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for obj in objects:
        if obj["kind"] == "DaemonSet":
            specs.append((obj["metadata"]["name"], obj["spec"]["template"]["spec"]))
        elif obj["kind"] == "CronJob":
            specs.append(
                (obj["metadata"]["name"], obj["spec"]["jobTemplate"]["spec"]["template"]["spec"])
            )
    return specs


@pytest.mark.parametrize("case", CASES)
def test_containers_run_with_least_privilege(case: str) -> None:
    values = chart().merge_values(case_values(case))
    for name, spec in pod_specs(rendered(case)):
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        root_allowed = (
            name.endswith("-compute") and values["compute"]["energyAccess"]["mode"] == "root"
        ) or (name.endswith("-lustre") and values["lustre"]["jobstats"]["source"] == "lctl")
        if not root_allowed:
            assert spec["securityContext"]["runAsNonRoot"] is True
            assert spec["securityContext"]["runAsUser"] != 0
        host_paths = {v["name"] for v in spec.get("volumes", []) if "hostPath" in v}
        for container in spec.get("initContainers", []) + spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["privileged"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            added = set(context["capabilities"].get("add", []))
            init = container in spec.get("initContainers", [])
            # Only what a mode needs: chroot into the host for its lctl, chgrp of energy_uj.
            assert added <= ({"CHOWN"} if init else {"SYS_CHROOT"})
            # uid 0 in one container only where the pod is not root: the spool's flush.
            if context.get("runAsUser") == 0 and not root_allowed and not init:
                assert container["name"] == "flush", name
            for mount in container.get("volumeMounts", []):
                # The flush container empties the node's spool: its one writable host path.
                writable = container["name"] == "flush" and mount["name"] == "post-job-spool"
                if mount["name"] in host_paths and not init and not writable:
                    assert mount["readOnly"] is True, f"{name}: {mount['name']} is writable"


def test_energy_uj_is_read_by_uid_0_without_capabilities_by_default() -> None:
    (compute,) = of_kind(rendered("default"), "DaemonSet")
    spec = compute["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsUser"] == 0
    assert "add" not in pod_container(spec)["securityContext"]["capabilities"]
    assert "initContainers" not in spec


def test_group_mode_gives_energy_uj_to_the_group_and_runs_as_nobody() -> None:
    (compute,) = of_kind(rendered("compute-nodes-values.yaml"), "DaemonSet")
    spec = compute["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsUser"] == 65534
    assert spec["securityContext"]["supplementalGroups"] == [2000]
    (init,) = spec["initContainers"]
    assert "chgrp 2000" in init["command"][-1] and "energy_uj" in init["command"][-1]


def test_exporter_as_nobody_gets_the_post_job_spool_s_group() -> None:
    """The hook's spool is 0640 in 0750 directories: nobody reads it with its group."""
    for post_job, groups in (
        ({"spoolGroupId": 3000}, [2000, 3000]),
        ({"spoolGroupId": 3000, "enabled": False}, [2000]),
        ({}, [2000]),
    ):
        compute = {"energyAccess": {"mode": "group", "groupId": 2000}, "postJob": post_job}
        values = {"lustre": {"enabled": False}, "compute": compute}
        (daemonset,) = of_kind(render(values), "DaemonSet")
        spec = daemonset["spec"]["template"]["spec"]
        assert spec["securityContext"]["supplementalGroups"] == groups, post_job


# --- command lines: the real parsers take them ------------------------------------------


def expand_env(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion in container args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]


@pytest.mark.parametrize("case", CASES)
def test_exporter_command_lines_parse_with_the_real_exporter(case: str) -> None:
    collectors = available_collectors()
    for obj in of_kind(rendered(case), "DaemonSet"):
        exporter = pod_container(obj["spec"]["template"]["spec"])
        args = expand_env(exporter["args"], {"HOST_IP": "192.0.2.1"})
        options = build_parser(collectors).parse_args(args)
        enabled = [name for name in collectors if getattr(options, f"collector_{name}")]
        for name in enabled:
            collectors[name](options)  # raises ValueError on flags that are wrong together
        role = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        if role == "lustre":
            assert enabled == ["jobstats"]
        else:
            compute = chart().merge_values(case_values(case))["compute"]
            jobs, postjob = compute["jobs"]["enabled"], compute["postJob"]["enabled"]
            assert enabled == ["geopm"] + ["jobs"] * jobs + ["postjob"] * postjob
        paths = [value for key, value in vars(options).items() if key.startswith("path_") and value]
        if "postjob" in enabled:
            paths.append(options.postjob_spool_dir)
        mounted = [m["mountPath"] for m in exporter["volumeMounts"]]
        for path in paths:
            if role == "lustre" and options.jobstats_source != "procfs":
                continue  # lctl mode reads the host through its chroot wrapper
            if path in ("/proc", "/sys", "/sys/fs/cgroup"):
                continue  # the flag's default: that collector is off
            assert any(path == m or path.startswith(m + "/") for m in mounted), path


def test_compute_daemonset_reads_the_post_job_spool_of_its_node() -> None:
    """Issue 21: the spool the epilog hook writes on the host, read-only, collector on; off
    when compute.postJob.enabled is false."""
    for values, mounted in (({}, True), ({"compute": {"postJob": {"enabled": False}}}, False)):
        values = {**values, "lustre": {"enabled": False}}
        (daemonset,) = of_kind(render(values), "DaemonSet")
        pod = daemonset["spec"]["template"]["spec"]
        (exporter,) = pod["containers"]
        mounts = {m["name"]: m for m in exporter["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert ("--collector.postjob" in exporter["args"]) == mounted
        assert ("post-job-spool" in mounts) == mounted == ("post-job-spool" in volumes)
        if mounted:
            assert mounts["post-job-spool"] == {"name": "post-job-spool", "readOnly": True,
                                                "mountPath": "/host/post-job-spool"}  # fmt: skip
            assert volumes["post-job-spool"]["hostPath"]["path"] == "/var/spool/hpcmon-post-job"
            assert "--postjob.spool-dir=/host/post-job-spool" in exporter["args"]


FLUSH_LINE = re.compile(r"^\s*(hpcmon-post-job flush .*?) & run=\$!$", re.MULTILINE)


def flush_command(flush: dict[str, Any]) -> list[str]:
    """The `hpcmon-post-job flush ...` command line in the flush container's shell loop."""
    assert flush["command"][:2] == ["/bin/sh", "-c"]
    (line,) = FLUSH_LINE.findall(flush["command"][2])
    return shlex.split(line)


def compute_pod(compute: dict[str, Any], **values: Any) -> dict[str, Any]:
    values = {"lustre": {"enabled": False}, "compute": compute, **values}
    (found,) = of_kind(render(values), "DaemonSet")
    return found


def test_compute_flush_container_is_off_by_default() -> None:
    values = chart().merge_values(None)
    assert values["compute"]["postJob"]["flush"]["enabled"] is False
    (compute,) = of_kind(rendered("default"), "DaemonSet")
    assert [c["name"] for c in compute["spec"]["template"]["spec"]["containers"]] == ["exporter"]


@pytest.mark.parametrize("mode", [{"mode": "root"}, {"mode": "group", "groupId": 2000}])
def test_compute_flush_container_replays_the_nodes_spool_with_the_epilog_config(mode) -> None:
    """The node's backlog goes out without waiting for the next job: `flush --config` with the
    epilog's own config, every intervalSeconds, as uid 0 with no capability; the spool is
    writable in this container only, the config directory read-only, both at their host paths
    (so the config's spool_dir and token_file hold in the container)."""
    compute = {"energyAccess": mode, "postJob": {"flush": {"enabled": True}}}
    pod = compute_pod(compute)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["exporter", "flush"]
    flush = pod_container(pod, "flush")
    assert flush["image"] == "hpcmon-post-job:" + chart().metadata["appVersion"]
    command = flush_command(flush)
    assert command == ["hpcmon-post-job", "flush", "--config", "/etc/hpcmon/post-job.yaml"]
    assert build_flush_parser().parse_args(command[2:]).config == "/etc/hpcmon/post-job.yaml"
    assert "sleep 300 &" in flush["command"][2]
    assert "trap " in flush["command"][2]  # SIGTERM ends the loop, not the grace period
    context = flush["securityContext"]
    assert context == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
    }
    assert flush["resources"]["limits"]["memory"] and flush["resources"]["requests"]["cpu"]
    mounts = {m["name"]: m for m in flush["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    spool_dir = "/var/spool/hpcmon-post-job"
    assert mounts["post-job-spool"] == {"name": "post-job-spool", "mountPath": spool_dir,
                                        "readOnly": False}  # fmt: skip
    assert volumes["post-job-spool"]["hostPath"] == {"path": spool_dir, "type": "DirectoryOrCreate"}
    assert mounts["post-job-config"] == {"name": "post-job-config", "mountPath": "/etc/hpcmon",
                                         "readOnly": True}  # fmt: skip
    assert volumes["post-job-config"]["hostPath"] == {"path": "/etc/hpcmon", "type": "Directory"}
    assert volumes[mounts["post-job-flush-tmp"]["name"]]["emptyDir"] == {}
    assert set(mounts) == {"post-job-spool", "post-job-config", "post-job-flush-tmp"}
    assert "env" not in flush
    # The exporter keeps its read-only view of the same spool, and only the exporter probes.
    exporter = pod_container(pod)
    assert {"name": "post-job-spool", "mountPath": "/host/post-job-spool",
            "readOnly": True} in exporter["volumeMounts"]  # fmt: skip
    assert "livenessProbe" in exporter and "readinessProbe" in exporter
    assert pod["securityContext"]["runAsUser"] == (0 if mode["mode"] == "root" else 65534)


def test_compute_flush_container_follows_its_values() -> None:
    post_job = {
        "enabled": False,  # no collector: the flush still gets the spool
        "spoolDir": "/local/hpcmon/spool",
        "flush": {
            "enabled": True,
            "intervalSeconds": 120,
            "configDir": "/opt/site/hpcmon/",
            "configFile": "epilog.yaml",
            "v1CredentialsSecret": "influx-v1",
        },
    }
    image = {"registry": "registry.example.org", "repository": "hpc/post-job", "tag": "1.2.3"}
    daemonset = compute_pod({"postJob": post_job}, postJob={"flush": {"image": image}})
    pod = daemonset["spec"]["template"]["spec"]
    flush = pod_container(pod, "flush")
    assert flush["image"] == "registry.example.org/hpc/post-job:1.2.3"
    assert flush_command(flush)[-1] == "/opt/site/hpcmon/epilog.yaml"
    assert "sleep 120 &" in flush["command"][2]
    mounts = {m["mountPath"]: m for m in flush["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/local/hpcmon/spool"]["name"]]["hostPath"]["path"] == (
        "/local/hpcmon/spool"
    )
    assert volumes[mounts["/opt/site/hpcmon/"]["name"]]["hostPath"]["path"] == "/opt/site/hpcmon/"
    # InfluxDB 1.x credentials as files from the Secret, never as values in the environment.
    assert volumes[mounts["/run/hpcmon/influx-v1"]["name"]]["secret"]["secretName"] == "influx-v1"
    assert flush["env"] == [
        {"name": "INFLUX_USERNAME_FILE", "value": "/run/hpcmon/influx-v1/username"},
        {"name": "INFLUX_PASSWORD_FILE", "value": "/run/hpcmon/influx-v1/password"},
    ]
    exporter = pod_container(pod)
    assert "--collector.postjob" not in exporter["args"]
    assert "post-job-spool" not in {m["name"] for m in exporter["volumeMounts"]}


@pytest.mark.parametrize("case", CASES)
def test_checkov_annotations_name_each_check_once(case: str) -> None:
    """Two containers of one pod may skip the same check: one annotation, both reasons."""
    for obj in rendered(case):
        annotations = obj["metadata"].get("annotations", {})
        checks = [v.split("=", 1)[0] for k, v in annotations.items() if k.startswith("checkov.io/")]
        assert len(checks) == len(set(checks)), (obj["metadata"]["name"], checks)


def test_flush_container_exceptions_join_the_modes_reasons() -> None:
    annotations = compute_pod({"postJob": {"flush": {"enabled": True}}})["metadata"]["annotations"]
    skips = dict(value.split("=", 1) for value in annotations.values())
    assert "energyAccess.mode root" in skips["CKV_K8S_40"]
    assert "compute.postJob.flush" in skips["CKV_K8S_40"]
    assert "compute.postJob.flush" in skips["CKV_K8S_8"] and "CKV_K8S_9" in skips
    digest = "sha256:" + "0" * 64
    pinned = compute_pod(
        {"postJob": {"flush": {"enabled": True}}},
        image={"digest": digest},
        postJob={"flush": {"image": {"digest": digest}}},
    )
    assert "CKV_K8S_43" not in {
        v.split("=", 1)[0] for v in pinned["metadata"]["annotations"].values()
    }


@pytest.mark.parametrize("case", CASES)
def test_flush_command_line_parses_with_the_real_post_job_parser(case: str) -> None:
    for daemonset in of_kind(rendered(case), "DaemonSet"):
        for flush in daemonset["spec"]["template"]["spec"]["containers"][1:]:
            options = build_flush_parser().parse_args(flush_command(flush)[2:])
            assert options.config.endswith(".yaml")
    for cronjob in of_kind(rendered(case), "CronJob"):
        (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        assert container["args"][0] == "flush"
        options = build_flush_parser().parse_args(container["args"][1:])
        assert options.spool_dir == "/spool"
        assert options.influx_v1_url or options.influx_url


# --- generated rules and dashboards: from the chart's files/ folder ------------------------


def chart_rule_files() -> dict[str, Path]:
    return {p.name: p for p in sorted((CHART / "files" / "rules").glob("*.yaml"))}


def test_prometheusrules_are_the_rule_files_in_the_chart() -> None:
    rules = of_kind(rendered("default"), "PrometheusRule")
    files = chart_rule_files()
    assert len(rules) == len(files) > 0
    by_name = {obj["metadata"]["name"]: obj for obj in rules}
    for name, path in files.items():
        obj = by_name[f"{RELEASE}-{path.stem}"]
        assert obj["spec"] == yaml.safe_load(path.read_text()), name


def test_promtool_accepts_the_rendered_rules(tmp_path: Path) -> None:
    rules = of_kind(rendered("default"), "PrometheusRule")
    assert rules
    paths = []
    for obj in rules:
        path = tmp_path / f"{obj['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(obj["spec"]))
        paths.append(str(path))
    result = subprocess.run(
        ["promtool", "check", "rules", *paths], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_is_not_a_rubber_stamp(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "groups:\n  - name: x\n    rules:\n      - record: a:b\n        expr: rate(x[5m]\n"
    )
    result = subprocess.run(["promtool", "check", "rules", str(broken)], capture_output=True)
    assert result.returncode != 0


def test_dashboard_configmaps_hold_the_dashboard_files_byte_for_byte() -> None:
    maps = [
        obj
        for obj in of_kind(rendered("default"), "ConfigMap")
        if obj["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    files = sorted((CHART / "files" / "dashboards").glob("*.json"))
    assert len(maps) == len(files) > 0
    held = {key: value for obj in maps for key, value in obj["data"].items()}
    assert held == {path.name: path.read_text() for path in files}
    for text in held.values():
        json.loads(text)


def test_configmaps_fit_the_kubernetes_size_limit() -> None:
    for obj in of_kind(rendered("everything-on-values.yaml"), "ConfigMap"):
        size = sum(len(key) + len(value.encode()) for key, value in obj["data"].items())
        assert size < 1024 * 1024, f"{obj['metadata']['name']}: {size} bytes"


def test_datasource_configmap_holds_the_provisioning_files() -> None:
    (datasources,) = [
        obj
        for obj in of_kind(rendered("everything-on-values.yaml"), "ConfigMap")
        if obj["metadata"]["labels"].get("grafana_datasource") == "1"
    ]
    files = sorted((CHART / "files" / "provisioning" / "datasources").glob("*.yaml"))
    assert datasources["data"] == {path.name: path.read_text() for path in files}


# --- values.schema.json ------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_shipped_values_pass_the_schema(case: str) -> None:
    chart().validate_schema(chart().merge_values(case_values(case)))


BAD_VALUES = [
    pytest.param({"exporter": {"port": 70000}}, ["/exporter/port", "maximum"], id="port-too-big"),
    pytest.param(
        {"exporter": {"port": "19325"}}, ["/exporter/port", "want integer"], id="port-string"
    ),
    pytest.param(
        {"lustre": {"jobstats": {"source": "sysfs"}}},
        ["/lustre/jobstats/source", "'procfs', 'lctl'"],
        id="jobstats-source",
    ),
    pytest.param(
        {"compute": {"energyAcess": {"mode": "root"}}},
        ["/compute", "energyAcess", "not allowed"],
        id="misspelt-key",
    ),
    pytest.param(
        {"compute": {"energyAccess": {"mode": "group"}}},
        ["/compute/energyAccess/groupId", "minimum"],
        id="group-mode-without-group",
    ),
    pytest.param(
        {"prometheus": {"monitor": {"additionalLabels": {"release": 1}}}},
        ["/prometheus/monitor/additionalLabels/release", "want string"],
        id="label-not-a-string",
    ),
    pytest.param(
        {"prometheus": {"monitor": {"scrapeTimeout": "10 seconds"}}},
        ["/prometheus/monitor/scrapeTimeout", "does not match"],
        id="duration",
    ),
    pytest.param(
        {"externalHosts": {"enabled": True, "hosts": [{"ip": "oss01.example.org"}]}},
        ["/externalHosts/hosts/0/ip"],
        id="host-name-instead-of-ip",
    ),
    pytest.param(
        {"externalHosts": {"enabled": True}}, ["/externalHosts/hosts", "minItems"], id="no-hosts"
    ),
    pytest.param(
        {"image": {"digest": "0123abcd"}}, ["/image/digest", "does not match"], id="digest"
    ),
    pytest.param(
        {"postJob": {"flush": {"influx": {"v1": {"url": "http://influx:8086"}}}}},
        ["/postJob/flush/influx/v1/database", "minLength"],
        id="v1-without-database",
    ),
    pytest.param(
        {"postJob": {"flush": {"schedule": "every hour"}}},
        ["/postJob/flush/schedule", "does not match"],
        id="cron-schedule",
    ),
    pytest.param(
        {"shardedCollection": {"engine": "prometheus"}},
        ["/shardedCollection/engine", "must be one of"],
        id="collection-engine",
    ),
    pytest.param(
        {"lustre": {"jobstats": {"aggregate": "filesystem"}}},
        ["/lustre/jobstats/aggregate", "must be one of"],
        id="jobstats-aggregate",
    ),
    pytest.param(
        {"compute": {"postJob": {"spoolDir": "var/spool/hpcmon-post-job"}}},
        ["/compute/postJob/spoolDir", "does not match"],
        id="relative-spool-dir",
    ),
    pytest.param(
        {"compute": {"postJob": {"flush": {"intervalSeconds": 0}}}},
        ["/compute/postJob/flush/intervalSeconds", "minimum"],
        id="flush-interval",
    ),
    pytest.param(
        {"compute": {"postJob": {"flush": {"configDir": "etc/hpcmon"}}}},
        ["/compute/postJob/flush/configDir", "does not match"],
        id="relative-flush-config-dir",
    ),
    pytest.param(
        {"exporter": {"logLevel": "verbose"}},
        ["/exporter/logLevel", "must be one of"],
        id="log-level",
    ),
]


@pytest.mark.parametrize(("bad", "message"), BAD_VALUES)
def test_schema_rejects_bad_values_with_a_clear_message(bad: dict, message: list[str]) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart().render(bad, name=RELEASE, namespace=NAMESPACE)
    for fragment in message:
        assert fragment in str(caught.value)
    report = helm.lint(CHART, bad, namespace=NAMESPACE)
    assert report["errors"], "helm lint let bad values through"


FAILS = [
    pytest.param(
        {"shardedCollection": {"enabled": True, "remoteWriteUrl": "http://vm:8428/api/v1/write"}},
        "set prometheus.monitor.enabled=false",
        id="shards-and-servicemonitor",
    ),
    pytest.param(
        {"shardedCollection": {"enabled": True}, "prometheus": {"monitor": {"enabled": False}}},
        "shardedCollection.remoteWriteUrl: set the remote write endpoint",
        id="shards-without-store",
    ),
    pytest.param(
        {
            "postJob": {
                "flush": {
                    "enabled": True,
                    "influx": {"v1": {"url": "http://i:8086", "database": "hpc"}},
                }
            }
        },
        "postJob.flush.spool: set existingClaim",
        id="flush-without-spool",
    ),
    pytest.param(
        {"postJob": {"flush": {"enabled": True, "spool": {"existingClaim": "spool"}}}},
        "postJob.flush.influx: set v1.url",
        id="flush-without-writer",
    ),
]


@pytest.mark.parametrize(("bad", "message"), FAILS)
def test_missing_combinations_fail_with_a_clear_message(bad: dict, message: str) -> None:
    with pytest.raises(helm.HelmRenderError) as caught:
        chart().render(bad, name=RELEASE, namespace=NAMESPACE)
    assert message in str(caught.value)


# --- sharded collection (issue 17) --------------------------------------------------------

SHARDED = [c for c in CASES if (case_values(c) or {}).get("shardedCollection", {}).get("enabled")]


def shard_configs(case: str) -> list[dict[str, Any]]:
    maps = [
        obj
        for obj in of_kind(rendered(case), "ConfigMap")
        if obj["metadata"]["labels"].get("app.kubernetes.io/component") == "collector"
    ]
    maps.sort(key=lambda obj: int(obj["metadata"]["labels"]["hpcmon/shard"]))
    return [yaml.safe_load(obj["data"]["scrape.yml"]) for obj in maps]


def test_sharded_collection_is_off_by_default() -> None:
    assert not [
        obj
        for obj in rendered("default")
        if obj["metadata"]["labels"].get("app.kubernetes.io/component") == "collector"
    ]


@pytest.mark.parametrize("case", SHARDED)
def test_one_scraper_per_shard_with_its_queue_and_the_right_engine(case: str) -> None:
    values = chart().merge_values(case_values(case))["shardedCollection"]
    objects = rendered(case)
    deployments = [
        obj
        for obj in of_kind(objects, "Deployment")
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] == "collector"
    ]
    assert len(deployments) == len(shard_configs(case)) == values["shards"]
    claims = of_kind(objects, "PersistentVolumeClaim")
    assert len(claims) == (values["shards"] if values["queue"]["size"] else 0)
    for deployment in deployments:
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        args = container["args"]
        if values["engine"] == "vmagent":
            assert f"-remoteWrite.url={values['remoteWriteUrl']}" in args
            assert "-remoteWrite.tmpDataPath=/queue" in args
        else:
            assert "--enable-feature=agent" in args and "--storage.agent.path=/queue" in args
        (role,) = [r for r in of_kind(objects, "RoleBinding")]
        assert role["subjects"][0]["name"] == spec["serviceAccountName"]


@pytest.mark.parametrize("case", SHARDED)
def test_shard_configs_pass_the_engines_own_checks(case: str, tmp_path: Path) -> None:
    engine = chart().merge_values(case_values(case))["shardedCollection"]["engine"]
    for number, config in enumerate(shard_configs(case)):
        path = tmp_path / f"shard-{number}.yml"
        path.write_text(yaml.safe_dump(config))
        # vmagent checks the scrape part (Debian's promtool is built without
        # kubernetes_sd_configs); promtool --agent checks the Prometheus agent's whole file
        # with the discovery swapped for a static list.
        checked = copy.deepcopy(config)
        checked.pop("remote_write", None)  # a flag of vmagent, not a key
        vm_path = tmp_path / f"vmagent-{number}.yml"
        vm_path.write_text(yaml.safe_dump(checked))
        commands = [["vmagent", f"-promscrape.config={vm_path}", "-promscrape.config.dryRun",
                     "-promscrape.config.strictParse", "-loggerLevel=ERROR"]]  # fmt: skip
        if engine == "prometheus-agent":
            assert config["remote_write"][0]["url"].startswith("http")
            static = copy.deepcopy(config)
            job = static["scrape_configs"][0]
            job["static_configs"] = [{"targets": ["192.0.2.1:19325"]}]
            del job["kubernetes_sd_configs"]
            path.write_text(yaml.safe_dump(static))
            commands.append(["promtool", "check", "config", "--agent", str(path)])
        for command in commands:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, result.stdout + result.stderr
    broken = copy.deepcopy(shard_configs(case)[0])
    broken["scrape_configs"][0]["relabel_configs"][3]["action"] = "hashmodulo"
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump(broken))
    assert (
        subprocess.run(
            [
                "vmagent",
                f"-promscrape.config={path}",
                "-promscrape.config.dryRun",
                "-loggerLevel=ERROR",
            ],
            capture_output=True,
            timeout=60,
        ).returncode
        != 0
    ), "the engine's check is not a rubber stamp"


def discovered(address: str, job: str | None, release: str = RELEASE, port: str = "metrics"):
    """What kubernetes_sd gives for one endpoint, as a static target with its meta labels."""
    labels = {
        "__meta_kubernetes_service_label_app_kubernetes_io_instance": release,
        "__meta_kubernetes_service_label_app_kubernetes_io_name": "hpcmon",
        "__meta_kubernetes_endpoint_port_name": port,
        "__meta_kubernetes_endpointslice_port_name": port,
    }
    if job is not None:
        labels["__meta_kubernetes_service_labelpresent_hpcmon_job"] = "true"
        labels["__meta_kubernetes_service_label_hpcmon_job"] = job
    return {"targets": [address], "labels": labels}


def settled_targets(url: str, total: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Active targets once every static target is either active or dropped."""
    import time

    from devtools.servers import http_get

    deadline = time.monotonic() + timeout
    while True:
        data = json.loads(http_get(f"{url}/api/v1/targets")[1])["data"]
        if len(data["activeTargets"]) + len(data["droppedTargets"]) == total:
            return data["activeTargets"]
        assert time.monotonic() < deadline, f"targets never settled: {data}"
        time.sleep(0.2)


@pytest.mark.integration
@pytest.mark.parametrize("case", SHARDED)
def test_hashmod_shards_scrape_every_exporter_exactly_once(case: str) -> None:
    """Each shard's real scrape configuration, its discovery replaced by the same targets as
    static ones, loaded into a real Prometheus: every exporter is active in exactly one shard,
    with its job label; other releases, ports and Services without a job are dropped."""
    from devtools.servers import run_prometheus

    exporters = [f"192.0.2.{n}:19325" for n in range(1, 41)]
    static = [discovered(a, "hpcmon-jobstats" if n % 2 else "hpcmon-compute")
              for n, a in enumerate(exporters)]  # fmt: skip
    static += [
        discovered("198.51.100.1:19325", "hpcmon-jobstats", release="other"),
        discovered("198.51.100.2:8429", None, port="http"),
        discovered("198.51.100.3:19325", None),
    ]
    owners: dict[str, list[int]] = {}
    for number, config in enumerate(shard_configs(case)):
        (job,) = config["scrape_configs"]
        del job["kubernetes_sd_configs"]
        job["static_configs"] = static
        with run_prometheus([job], scrape_interval="1h") as prometheus:
            for target in settled_targets(prometheus.url, len(static)):
                index = exporters.index(target["labels"]["instance"])
                owners.setdefault(exporters[index], []).append(number)
                wanted = "hpcmon-jobstats" if index % 2 else "hpcmon-compute"
                assert target["labels"]["job"] == wanted
    assert sorted(owners) == sorted(exporters)
    assert all(len(shards) == 1 for shards in owners.values())
    assert len({shards[0] for shards in owners.values()}) == len(shard_configs(case)), (
        "a shard got nothing: the hashmod keeps are not one per shard"
    )
