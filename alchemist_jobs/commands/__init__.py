"""Subcommands of the `alchemist` CLI, one module per concern."""
