"""The Pulumi policy pack (run by the Pulumi CLI) wrapping infra/policies.py."""
