"""Datasets: object storage access, staging into a content-addressed node cache, `alchemist data`.

Nothing here imports boto3 at module level: a local run whose data is on the shared file
system (or in a local directory) never loads it.
"""
