"""No provider is named outside its package (issue 40.1's done-when, as a grep): the product code
(`infra/`, `alchemist_jobs/`, `monitoring/`; docs and tests excluded) outside `infra/providers/`
imports no `pulumi_aws`/`pulumi_eks`, names no provider's services, and compares no provider
name; and no file of the images (`images/`: Dockerfiles, ignore files, build scripts) or of
`scripts/` names one, comments included. A provider's software for an image (its network
fabric's libraries) is an installer in its own package that the image runs through a neutral
build argument (`FABRIC_INSTALL` in images/Dockerfile.train).

The words: the AWS provider's services and hardware (aws, amazon..., eks, efs, fsx, ecr, efa,
irsa) and the on-prem provider's (k3s, onprem), whole words, any case. `kind` and `existing`
are ordinary words (a Kubernetes object's `kind`, "an existing file"), and `s3` is the object
store protocol every provider's S3-compatible service speaks (as `AWS_ACCESS_KEY_ID`, which a
whole-word match leaves alone, is its variable): those are caught where code compares a
provider name with them instead.

Where they still appear is listed below, file by file, with the count as it stands: a file may
only go down (lower its line when it does), a file not listed may name none. The left-over
places are issue 40.1's remaining work. What the job half needs of a provider is data the
provider writes into the contract: how to reach the cluster (`auth`: the request the CLI
presigns, `infra/providers/aws/auth.py`) and the GPU nodes' network fabric (`gpu.fabric`: its
devices, bandwidth and NCCL settings, `infra/providers/aws/fabric.py`). The one word the job
half keeps is `.aws/` in `kubernetes/code_assets.py`: a credential directory a code snapshot
must never ship, listed as `.azure/` and `.config/gcloud/` are.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
WORDS = re.compile(r"\b(aws|amazon\w*|eks|efs|fsx|ecr|efa|irsa|k3s|onprem|pulumi_aws|pulumi_eks)\b", re.I)
COMPARED = re.compile(
    r"""provider\w*\s*(?:==|!=)\s*["'](?:aws|kind|onprem|existing)["']"""
    r"""|["'](?:aws|kind|onprem|existing)["']\s*(?:==|!=)\s*\w*provider"""
)
IMPORTS = re.compile(r"^\s*(?:import|from)\s+pulumi_(?:aws|eks)\b", re.M)

# file -> provider words it still holds (only ever lower)
LEFT = {
    "alchemist_jobs/kubernetes/code_assets.py": 1,
}


def product_files() -> list[Path]:
    files = [f for d in ("infra", "alchemist_jobs", "monitoring") for f in (REPO / d).rglob("*.py")]
    return sorted(f for f in files if not f.relative_to(REPO).as_posix().startswith("infra/providers/"))


def image_and_script_files() -> list[Path]:
    """Every file of `images/` and `scripts/`, whatever its language."""
    files = [f for d in ("images", "scripts") for f in (REPO / d).rglob("*") if f.is_file()]
    return sorted(f for f in files if "__pycache__" not in f.parts)


def test_no_provider_is_named_outside_its_package_but_where_listed():
    grown = {}
    for f in product_files() + image_and_script_files():
        rel = f.relative_to(REPO).as_posix()
        count = len(WORDS.findall(f.read_text(errors="replace")))
        if count > LEFT.get(rel, 0):
            grown[rel] = (LEFT.get(rel, 0), count)
    assert grown == {}, f"provider names outside infra/providers/ (file: (allowed, found)): {grown}"


def test_nothing_outside_the_providers_imports_their_sdks_or_compares_their_names():
    found = {}
    for f in product_files():
        text = f.read_text()
        hits = IMPORTS.findall(text) + [m.group(0) for m in COMPARED.finditer(text)]
        if hits:
            found[f.relative_to(REPO).as_posix()] = hits
    assert found == {}


def test_the_checks_see_what_they_look_for():
    assert WORDS.findall("from pulumi_aws import s3; EKS, efs-csi, k3s, amazonaws.com") == [
        "pulumi_aws", "EKS", "efs", "k3s", "amazonaws"
    ]  # fmt: skip
    assert WORDS.findall('AWS_ACCESS_KEY_ID s3:// kind existing "kind": Job') == []
    assert COMPARED.search('if cfg.provider == "kind":') and COMPARED.search("'onprem' != provider")
    assert IMPORTS.search("    import pulumi_aws as aws\n") and IMPORTS.search(
        "from pulumi_eks import Cluster"
    )
    assert all(LEFT[f] > 0 for f in LEFT) and all((REPO / f).is_file() for f in LEFT)
    seen = {f.relative_to(REPO).as_posix() for f in image_and_script_files()}
    assert {
        "images/Dockerfile.train",
        "images/Dockerfile.train.dockerignore",
        "images/build",
        "scripts/setup",
    } <= seen
