"""Names charts derive from the release name, against the names their managers look for, on every stack.

Kueue v0.13.4 (kubernetes-sigs/kueue, Apache-2.0) manages its own webhook certificate: the
manager writes it into the Secret `internalCertManagement.webhookSecretName` (default
`kueue-webhook-server-cert`, apis/config/v1beta1/defaults.go) for the Service
`webhookServiceName` (default `kueue-webhook-service`) and patches the CA into the webhook
configurations `kueue-validating-webhook-configuration` and
`kueue-mutating-webhook-configuration`, names pkg/util/cert/cert.go hard-codes. When it finds
no such Secret the manager exits, and every JobSet, Pod and ClusterQueue create fails on its
`failurePolicy: Fail` webhooks (issue 36.1). The chart names all of these
`<fullname>-<suffix>` (charts/kueue/templates/webhook/service.yaml, internalcert/secret.yaml,
webhook/manifests.yaml; its pod mounts the Secret, manager/manager.yaml). JobSet v0.12.0 does
the same (pkg/util/cert/cert.go; its chart writes the derived names into the manager's config,
charts/jobset/templates/controller/configmap.yaml). The vendored names are in
tests/fixtures/chart_names/, the fullname model in helm_names.py.
"""

from __future__ import annotations

import pytest
from helm_names import Release, fullname, names_data, releases
from kueue_model import manager_config
from system_tier import STACK_NAMES

KUEUE = names_data("kueue-0.13.4.json")
JOBSET = names_data("jobset-0.12.0.json")
WEBHOOK_CONFIGURATIONS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def test_the_fullname_model_is_helms():
    assert fullname("kueue", "kueue", {}) == "kueue"
    assert fullname("kueue", "platform-queueing-kueue", {}) == "platform-queueing-kueue"  # contains the name
    assert fullname("kueue", "queues", {}) == "queues-kueue"
    assert fullname("kueue", "queues", {"nameOverride": "q"}) == "queues"  # "q" is in "queues"
    assert fullname("kueue", "any", {"fullnameOverride": "kueue"}) == "kueue"
    assert fullname("kueue", "r" * 59, {}) == "r" * 59 + "-kue"  # cut to 63
    assert fullname("kueue", "r" * 62, {}) == "r" * 62  # cut to 63 ends in "-", trimmed once


def kueue_expects(release: Release) -> dict[tuple[str, str], str]:
    """(kind, name) the Kueue manager of this release looks for -> where it takes the name from."""
    cfg = manager_config(release.values)
    defaults, certs = KUEUE["manager"]["defaults"], KUEUE["manager"]["webhook_configurations"]
    icm = cfg.get("internalCertManagement") or {}
    assert icm.get("enable", defaults["internalCertManagement.enable"]), "internal certificates off: no cert-manager here"
    out = {("Service", icm.get("webhookServiceName") or defaults["webhookServiceName"]):
           "internalCertManagement.webhookServiceName",
           ("Secret", icm.get("webhookSecretName") or defaults["webhookSecretName"]):
           "internalCertManagement.webhookSecretName"}  # fmt: skip
    out.update({(kind, certs[kind]): certs["file"] for kind in WEBHOOK_CONFIGURATIONS})
    return out


def kueue_mismatches(release: Release) -> list[str]:
    cfg = manager_config(release.values)
    rendered = release.objects(KUEUE)
    bad = [f"the manager looks for {kind} {name} ({source}); the chart names "
           f"{sorted(n for k, n in rendered if k == kind)}"
           for (kind, name), source in kueue_expects(release).items() if (kind, name) not in rendered]
    expects = {kind: name for kind, name in kueue_expects(release)}
    mounted = release.references(KUEUE, "Deployment", "secretName")
    if expects["Secret"] not in mounted:
        bad.append(f"the manager writes Secret {expects['Secret']}, its pod mounts {sorted(mounted)}")
    for kind in WEBHOOK_CONFIGURATIONS:
        called = release.references(KUEUE, kind, "name")
        if called != {expects["Service"]}:
            bad.append(f"the certificate is for Service {expects['Service']}; the {kind} calls {sorted(called)}")
    if cfg.get("namespace", release.namespace) != release.namespace:
        bad.append(f"the manager's namespace {cfg['namespace']} is not the release's {release.namespace}")
    return bad


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_kueue_names_its_webhook_objects_as_its_manager_expects(platforms, stack):
    (release,) = releases(platforms[stack].render, "kueue")
    assert not release.value("enableCertManager")
    bad = kueue_mismatches(release)
    assert not bad, f"{stack}: Kueue release {release.release} ({release.fields['fullname']}):\n" + "\n".join(bad)


def test_the_check_sees_a_release_named_after_the_pulumi_resource(platforms):
    """The defect of issue 36.1: the chart released under its Pulumi resource's name."""
    (release,) = releases(platforms["dev"].render, "kueue")
    renamed = Release(release.chart, release.version, "platform-queueing-kueue", release.namespace,
                      {k: v for k, v in release.values.items() if k != "fullnameOverride"})
    assert any("platform-queueing-kueue-webhook-service" in line for line in kueue_mismatches(renamed))


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_jobset_names_its_webhook_objects_as_its_manager_expects(platforms, stack):
    (release,) = releases(platforms[stack].render, "jobset")
    rendered = release.objects(JOBSET)
    certs = JOBSET["manager"]["webhook_configurations"]
    for kind in WEBHOOK_CONFIGURATIONS:
        assert (kind, certs[kind]) in rendered, (stack, kind, certs[kind], sorted(rendered))
    service = release.references(JOBSET, "ConfigMap", "webhookServiceName")
    secret = release.references(JOBSET, "ConfigMap", "webhookSecretName")
    assert len(service) == 1 and ("Service", *service) in rendered, (stack, service)
    assert len(secret) == 1 and ("Secret", *secret) in rendered, (stack, secret)
    assert secret <= release.references(JOBSET, "Deployment", "secretName")
