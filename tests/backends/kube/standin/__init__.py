"""Stand-in Kubernetes API server (test double) for Tessera's Kubernetes backend tests.

Entry point: tests/backends/kube/kube_apiserver.py.  See tests/backends/kube/README.md.
"""
