"""Rules the API server enforces that a strict schema check misses, checked before any call.

Each rule is the API server's own, from kubernetes/kubernetes (release-1.33):
* pkg/apis/batch/validation/validation.go, validatePodFailurePolicy / ValidateJobSpec:
  a podFailurePolicy needs the pod template's restartPolicy `Never` and, when
  podReplacementPolicy is set, `Failed`; an onExitCodes rule's containerName must name one of
  the template's containers or init containers.
* staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go, IsValidLabelValue (63
  characters, `(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?`) and IsDNS1123Subdomain (253
  characters, lower-case alphanumerics, '-' and '.') for object names.
* pkg/apis/core/validation/validation.go, ValidateConfigMap: data and binaryData together at
  most 1 MiB (corev1.MaxSecretSize).
A JobSet's Job templates are checked as the Jobs JobSet will create from them.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

from alchemist_jobs.errors import UserError

MAX_CONFIG_MAP_BYTES = 1024 * 1024
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class ApiServerWouldRefuse(UserError):
    """A manifest the API server would reject: one line naming the object, field and rule."""


def validate_for_api_server(objs: list[dict]) -> None:
    """Raise ApiServerWouldRefuse for the first object the API server would refuse."""
    for obj in objs:
        what = f"{obj.get('kind', '?')} {obj.get('metadata', {}).get('name', '?')}"
        for problem in _problems(obj):
            raise ApiServerWouldRefuse(f"{what}: {problem}")


def _problems(obj: dict) -> Iterator[str]:
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        yield (
            f"metadata.name: {name!r} is not a DNS-1123 subdomain; accepted: at most 253 "
            "lower-case letters, digits, '-' and '.', starting and ending alphanumeric"
        )
    yield from _labels("metadata.labels", meta.get("labels"))
    if obj.get("kind") == "ConfigMap":
        size = sum(len(v.encode()) for v in (obj.get("data") or {}).values())
        size += sum(len(base64.b64decode(v)) for v in (obj.get("binaryData") or {}).values())
        if size > MAX_CONFIG_MAP_BYTES:
            yield (
                f"data: {size} bytes; accepted: at most {MAX_CONFIG_MAP_BYTES} bytes in a "
                "ConfigMap (make the code snapshot smaller: .alchemistignore)"
            )
    for path, job_spec in _job_specs(obj):
        yield from _job(path, job_spec)


def _labels(path: str, labels: dict | None) -> Iterator[str]:
    for key, value in (labels or {}).items():
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            yield (
                f"{path}.{key}: {value!r} is not a valid label value; accepted: at most 63 "
                "letters, digits, '-', '_' and '.', starting and ending alphanumeric"
            )


def _job_specs(obj: dict) -> Iterator[tuple[str, dict]]:
    if obj.get("kind") == "Job":
        yield "spec", obj.get("spec") or {}
    elif obj.get("kind") == "JobSet":
        for i, rjob in enumerate((obj.get("spec") or {}).get("replicatedJobs") or []):
            yield f"spec.replicatedJobs[{i}].template.spec", (rjob.get("template") or {}).get("spec") or {}


def _job(path: str, spec: dict) -> Iterator[str]:
    template = spec.get("template") or {}
    yield from _labels(f"{path}.template.metadata.labels", (template.get("metadata") or {}).get("labels"))
    policy = spec.get("podFailurePolicy")
    if not policy:
        return
    pod: dict[str, Any] = template.get("spec") or {}
    if pod.get("restartPolicy") != "Never":
        yield (
            f"{path}.template.spec.restartPolicy: {pod.get('restartPolicy')!r}; accepted: "
            "'Never' when podFailurePolicy is set"
        )
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None and replacement != "Failed":
        yield (
            f"{path}.podReplacementPolicy: {replacement!r}; accepted: 'Failed' when podFailurePolicy is set"
        )
    names = {c.get("name") for c in (pod.get("containers") or []) + (pod.get("initContainers") or [])}
    for i, rule in enumerate(policy.get("rules") or []):
        container = (rule.get("onExitCodes") or {}).get("containerName")
        if container is not None and container not in names:
            yield (
                f"{path}.podFailurePolicy.rules[{i}].onExitCodes.containerName: "
                f"{container!r} is not a container of the pod; accepted: one of "
                f"{sorted(n for n in names if n)}"
            )
