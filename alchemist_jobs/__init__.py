"""Alchemist job library: job specs, backends (local, Kubernetes) and the worker runtime."""

__version__ = "0.1.0"
