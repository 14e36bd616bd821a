"""The worker runtime: what runs inside each torchrun worker of a built-in task."""
