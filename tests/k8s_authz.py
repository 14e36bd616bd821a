"""Who may do what on a cluster: RBAC as the API server evaluates it, for the tests of both halves.

Ported from kubernetes v1.35.0 (no API server runs here):
* plugin/pkg/auth/authorizer/rbac/rbac.go, RuleAllows: a resource request is allowed by a
  rule when the verb, the API group, the resource (`pods/log`: resource plus subresource, or a
  rule's `*/log`) and, when the rule lists resourceNames, the object's name all match.
* pkg/apis/rbac/v1/evaluation_helpers.go: VerbMatches, APIGroupMatches, ResourceMatches,
  ResourceNameMatches (`*` matches anything; a request without a name, like list or a
  create, never matches a rule that lists resourceNames).
* pkg/registry/rbac/validation/rule.go, appliesToUser: a User subject by name, a Group by
  one of the user's groups, a ServiceAccount by `system:serviceaccount:<ns>:<name>`; a
  RoleBinding grants its role in its own namespace only, a ClusterRoleBinding everywhere.
* plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go: the `cluster-admin` ClusterRole
  (every verb on every resource) is bound to the group `system:masters`.
Actors whose rights come from outside RBAC carry them as `grants` (EKS access policies, below).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

ALL = "*"
CLUSTER_ADMIN_RULES = ({"apiGroups": [ALL], "resources": [ALL], "verbs": [ALL]},)
MASTERS = "system:masters"


@dataclass(frozen=True)
class Actor:
    """A request's userInfo, and rights granted outside the cluster's RBAC objects."""

    role: str  # what this actor is to the platform (deployer, member, jobset-controller...)
    username: str
    groups: tuple[str, ...] = ()
    grants: tuple[dict, ...] = field(default=())

    def user_info(self) -> dict[str, Any]:
        return {"username": self.username, "groups": [*self.groups, "system:authenticated"]}


def verb_matches(rule: dict, verb: str) -> bool:
    return any(v in (ALL, verb) for v in rule.get("verbs") or [])


def group_matches(rule: dict, group: str) -> bool:
    return any(g in (ALL, group) for g in rule.get("apiGroups") or [])


def resource_matches(rule: dict, combined: str, subresource: str) -> bool:
    for r in rule.get("resources") or []:
        if r in (ALL, combined):
            return True
        if subresource and len(r) == len(subresource) + 2 and r.startswith("*/") and r.endswith(subresource):
            return True
    return False


def name_matches(rule: dict, name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def rule_allows(rule: dict, verb: str, group: str, resource: str, subresource: str = "", name: str = "") -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    return (verb_matches(rule, verb) and group_matches(rule, group)
            and resource_matches(rule, combined, subresource) and name_matches(rule, name))


def applies_to(subject: dict, actor: Actor) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return subject["name"] == actor.username
    if kind == "Group":
        return subject["name"] in actor.user_info()["groups"]
    if kind == "ServiceAccount":
        return actor.username == f"system:serviceaccount:{subject.get('namespace', '')}:{subject['name']}"
    return False


class Rbac:
    """The rules every actor holds, from a cluster's Roles, ClusterRoles and their bindings
    (plus the bootstrap binding of `system:masters` to cluster-admin)."""

    def __init__(self, objects: Iterable[dict]):
        objs = list(objects)
        self.roles = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o.get("rules") or []
                      for o in objs if o["kind"] == "Role"}
        self.cluster_roles = {o["metadata"]["name"]: o.get("rules") or [] for o in objs if o["kind"] == "ClusterRole"}
        self.cluster_roles.setdefault("cluster-admin", list(CLUSTER_ADMIN_RULES))
        self.bindings = [o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
        self.bindings.append({"kind": "ClusterRoleBinding", "metadata": {"name": "cluster-admin"},
                              "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
                              "subjects": [{"kind": "Group", "name": MASTERS}]})

    def rules(self, actor: Actor, namespace: str) -> list[dict]:
        """Every rule that applies to `actor` for a request in `namespace` ("" = cluster scope)."""
        out = list(actor.grants)
        for b in self.bindings:
            bns = b["metadata"].get("namespace", "")
            if b["kind"] == "RoleBinding" and bns != namespace:
                continue
            if not any(applies_to(s, actor) for s in b.get("subjects") or []):
                continue
            ref = b["roleRef"]
            out += self.roles.get((bns, ref["name"]), []) if ref["kind"] == "Role" else \
                self.cluster_roles.get(ref["name"], [])
        return out

    def allows(self, actor: Actor, verb: str, group: str, resource: str, namespace: str = "",
               name: str = "", subresource: str = "") -> bool:
        return any(rule_allows(r, verb, group, resource, subresource, name) for r in self.rules(actor, namespace))
