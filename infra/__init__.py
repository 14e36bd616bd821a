"""Alchemist Pulumi program: one ComponentResource per concern, run as `main: infra/`."""
