"""The Pulumi policies of the pack: each wraps one plain function of infra/policies.py."""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from infra.policies import POLICIES, Policy, Resource


def _validator(policy: Policy):
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        for message in policy.check(Resource(args.resource_type, args.name, args.props)):
            report_violation(message, None)

    return validate


def build_policies() -> list[ResourceValidationPolicy]:
    """One mandatory ResourceValidationPolicy per plain policy, same name and description."""
    return [
        ResourceValidationPolicy(
            name=p.name,
            description=p.description,
            validate=_validator(p),
            enforcement_level=EnforcementLevel.MANDATORY,
        )
        for p in POLICIES
    ]
