#!/usr/bin/python3
"""Stand-in Kubernetes API server for Tessera's Kubernetes backend tests.

    kube_apiserver.py --port 0 [--port-file F] [--tls-cert C --tls-key K] [--client-ca CA]
                      [--token-file F] [--state-file F] [--history N] [--continue-ttl SECONDS]
                      [--nodes nodes.yaml] [--tick-ms 100] [--address 127.0.0.1] [--verbose]
                      [--no-exit-with-parent]

A test double: a real API server (with its scheduler and controllers, including Dynamic
Resource Allocation's allocator) cannot run on the machines the tests run on.
The implementation lives in the standin/ package next to this file; see README.md.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from standin.server import main  # noqa: E402

if __name__ == "__main__":
    main()
