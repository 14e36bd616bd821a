"""`alchemist plan`'s parts: the scaling model, the profiler, and where the target's facts come from."""
