"""The Kubernetes backend: manifests, the scheduler over the `kubernetes` client, presigned tokens,
code assets and interactive sessions. Nothing here imports `kubernetes` or `boto3` at import
time; `pod_setup` runs inside every job pod's init container with the standard library only.
"""
