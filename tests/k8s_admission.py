"""ValidatingAdmissionPolicies evaluated as the API server does, with cel-python, for the tests of both halves.

Semantics of kubernetes v1.35.0 (staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/
validating: plugin.go, dispatcher.go, validator.go; plugin/policy/matching for
matchConstraints; plugin/cel/filter.go): a binding picks namespaces by its namespaceSelector;
the policy judges a request only when its matchConstraints name the operation and resource
and every `matchCondition` is true; `variables` are evaluated in order and reachable as
`variables.<name>`; `object` is null on DELETE and `oldObject` null on CREATE; `namespaceObject`
is the request's Namespace as stored (validating/dispatcher.go fetches it for the validations);
the request is denied with the message of every validation that is false, a validation's
`messageExpression` replacing its `message` when it gives a non-empty string (validator.go). matchConditions and validations
see `authorizer` (plugin.go compilePolicy: HasAuthorizer), whose checks
(staging/src/k8s.io/apiserver/pkg/cel/library/authz.go: group, resource, subresource,
namespace, name, check, allowed) are answered here by RBAC as tests/k8s_authz.py ports it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import celpy
from celpy import celtypes

from tests.k8s_authz import Actor, Rbac

_ENV = celpy.Environment()


@dataclass(frozen=True)
class _Check:
    """A pending authorizer check (authz.go's GroupCheck / ResourceCheck)."""

    actor: Actor
    rbac: Rbac | None
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    verb: str = ""


def _set(key: str):
    return lambda check, value: replace(check, **{key: str(value)})


def _allowed(check: _Check) -> celtypes.BoolType:
    rbac = check.rbac or Rbac([])
    return celtypes.BoolType(rbac.allows(check.actor, check.verb, check.group, check.resource,
                                         check.namespace, check.name, check.subresource))


_FUNCTIONS = {"group": _set("group"), "resource": _set("resource"), "subresource": _set("subresource"),
              "namespace": _set("namespace"), "name": _set("name"), "check": _set("verb"), "allowed": _allowed}


@cache
def _program(expression: str):
    return _ENV.program(_ENV.compile(expression), functions=_FUNCTIONS)


def _eval(expression: str, activation: dict) -> Any:
    result = _program(expression).evaluate(activation)
    if isinstance(result, celpy.CELEvalError):
        raise AssertionError(f"{expression}: {result}")
    return result


def _variables(values: dict[str, Any]) -> celtypes.MapType:
    return celtypes.MapType({celtypes.StringType(k): v for k, v in values.items()})


RESOURCES = {  # kind -> (API group, resource) as matchConstraints name them
    "Pod": ("", "pods"), "Job": ("batch", "jobs"), "JobSet": ("jobset.x-k8s.io", "jobsets"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"), "ConfigMap": ("", "configmaps"),
    "Service": ("", "services"), "Secret": ("", "secrets"), "ServiceAccount": ("", "serviceaccounts"),
    "StatefulSet": ("apps", "statefulsets"), "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
}


def selects(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector (apimachinery pkg/apis/meta/v1 LabelSelectorAsSelector); none selects all."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        present, value = e["key"] in labels, labels.get(e["key"])
        ok = {"In": present and value in e.get("values", []), "NotIn": not present or value not in e.get("values", []),
              "Exists": present, "DoesNotExist": not present}[e["operator"]]  # fmt: skip
        if not ok:
            return False
    return True


def _constrained(policy: dict, group: str, resource: str, operation: str) -> bool:
    for rule in (policy["spec"].get("matchConstraints") or {}).get("resourceRules") or []:
        if (group in rule["apiGroups"] or "*" in rule["apiGroups"]) and \
                (resource in rule["resources"] or "*" in rule["resources"]) and \
                (operation in rule["operations"] or "*" in rule["operations"]):
            return True
    return False


def judge(policy: dict, binding: dict | None, *, actor: Actor, operation: str, namespace: str,
          obj: dict | None = None, old: dict | None = None, namespace_labels: dict | None = None,
          rbac: Rbac | None = None) -> list[str] | None:
    """None when the policy does not judge the request, else its denial messages ([]: admitted)."""
    kind = (obj or old)["kind"]
    group, resource = RESOURCES[kind]
    if binding is not None:
        selector = (binding["spec"].get("matchResources") or {}).get("namespaceSelector")
        labels = {"kubernetes.io/metadata.name": namespace, **(namespace_labels or {})}
        if not selects(selector, labels):
            return None
    if not _constrained(policy, group, resource, operation):
        return None
    request = {"userInfo": actor.user_info(), "namespace": namespace, "operation": operation,
               "name": (obj or old)["metadata"].get("name", ""),
               "resource": {"group": group, "version": "v1", "resource": resource}}
    ns_object = {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace, "labels": {"kubernetes.io/metadata.name": namespace, **(namespace_labels or {})}}}
    base = {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
            "request": celpy.json_to_cel(request), "authorizer": _Check(actor, rbac),
            "namespaceObject": celpy.json_to_cel(ns_object)}
    spec = policy["spec"]
    for cond in spec.get("matchConditions") or []:
        if not _eval(cond["expression"], {**base, "variables": _variables({})}):
            return None
    values: dict[str, Any] = {}
    for var in spec.get("variables") or []:
        values[var["name"]] = _eval(var["expression"], {**base, "variables": _variables(values)})
    act = {**base, "variables": _variables(values)}
    return [_message(v, act) for v in spec["validations"] if not _eval(v["expression"], act)]


def _message(validation: dict, activation: dict) -> str:
    if validation.get("messageExpression"):
        text = _program(validation["messageExpression"]).evaluate(activation)
        if not isinstance(text, celpy.CELEvalError) and str(text).strip():
            return str(text)
    return validation["message"]


def compiles(expression: str) -> None:
    """Raise if `expression` is not CEL cel-python can compile."""
    _ENV.compile(expression)
