#!/usr/bin/python3
"""Checks the stand-in Kubernetes API server (kube_apiserver.py) with independent clients:
the `kubernetes` Python client, plain http.client/ssl, and `kubectl`.

    /usr/bin/python3 tests/backends/kube/check_standin.py [--perf-jobs N] [--verbose] [--only SUBSTR]

Starts the stand-in as subprocesses (TLS + token + client CA, and plain HTTP without auth),
prints one line per check ("ok   name" / "FAIL name: why") and exits 0 only if all pass.
"""
import argparse
import base64
import datetime
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "kube_apiserver.py")
PY = sys.executable or "/usr/bin/python3"
T0 = time.monotonic()
BUDGET = 57.0

import warnings  # noqa: E402
warnings.filterwarnings("ignore")
from kubernetes import client as kclient  # noqa: E402
from kubernetes import watch as kwatch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

NODES_YAML = """
- metadata:
    name: node-a
    labels: {tessera.io/pool: a, kubernetes.io/hostname: node-a}
  status:
    allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "4", pods: "110"}
    addresses: [{type: InternalIP, address: 192.168.7.1}]
    conditions: [{type: Ready, status: "True"}]
- metadata:
    name: node-b
    labels: {tessera.io/pool: b}
  spec:
    taints: [{key: tessera.io/dedicated, value: b, effect: NoSchedule}]
  status:
    allocatable: {cpu: 4000m, memory: 16384Mi, nvidia.com/gpu: "2", nvidia.com/mig-1g.10gb: "7"}
- metadata:
    name: node-c
    labels: {tessera.io/pool: c}
  status:
    allocatable: {cpu: "2", memory: 8Gi, amd.com/gpu: "1"}
    conditions: [{type: Ready, status: "False"}]
"""


# ---------------------------------------------------------------------------------------------
class Failure(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Failure(msg)


def wait_for(fn, timeout=10.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = fn()
            if last:
                return last
        except (ApiException, Failure, KeyError, IndexError, TypeError) as e:
            last = e
        if time.monotonic() >= deadline:
            raise Failure("timed out waiting for %s (last: %s)" % (what, str(last)[:300]))
        time.sleep(interval)


class Results:
    def __init__(self, verbose, only):
        self.items, self.verbose, self.only = [], verbose, only

    def run(self, name, fn, *args, setup=False):
        if self.only and self.only not in name and not setup:
            return None
        if time.monotonic() - T0 > BUDGET:
            self.items.append((name, False))
            print("FAIL %s: skipped, time budget exhausted" % name, flush=True)
            return None
        t = time.monotonic()
        try:
            out = fn(*args)
            self.items.append((name, True))
            print("ok   %s%s" % (name, " (%.2fs)" % (time.monotonic() - t) if self.verbose else ""), flush=True)
            return out
        except Exception as e:
            self.items.append((name, False))
            msg = str(e) if isinstance(e, Failure) else "%s: %s" % (type(e).__name__, str(e)[:500])
            print("FAIL %s: %s" % (name, msg), flush=True)
            if self.verbose and not isinstance(e, Failure):
                traceback.print_exc()
            return None


# ---- certificates (cryptography) -------------------------------------------------------------
def make_pki(d):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    import ipaddress

    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    later = now + datetime.timedelta(days=2)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def write(name, k, cert):
        with open(os.path.join(d, name + ".key"), "wb") as f:
            f.write(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption()))
        with open(os.path.join(d, name + ".crt"), "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))

    def build(subject, issuer, pub, sign_key, ca=False, san=None, eku=None):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(pub)
             .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(later)
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            b = b.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                                              key_cert_sign=True, crl_sign=True, encipher_only=False,
                                              decipher_only=False), critical=True)
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        if eku:
            b = b.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
        return b.sign(sign_key, hashes.SHA256())

    ca_key = key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "standin-test-ca")])
    ca = build(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    write("ca", ca_key, ca)
    sk = key()
    srv = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]), ca_name, sk.public_key(),
                ca_key, san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
                eku=[ExtendedKeyUsageOID.SERVER_AUTH])
    write("server", sk, srv)
    ck = key()
    cli = build(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                           x509.NameAttribute(NameOID.COMMON_NAME, "tessera")]), ca_name, ck.public_key(), ca_key,
                eku=[ExtendedKeyUsageOID.CLIENT_AUTH])
    write("client", ck, cli)
    # A client certificate from a CA the server does not trust.
    rk = key()
    rogue_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rogue-ca")])
    ok = key()
    other = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "intruder")]), rogue_name, ok.public_key(), rk,
                  eku=[ExtendedKeyUsageOID.CLIENT_AUTH])
    write("rogue", ok, other)


# ---- the stand-in process --------------------------------------------------------------------
class Server:
    def __init__(self, work, name, extra, tls=False, token_file=None, client_ca=False, state=False):
        self.work, self.name, self.extra = work, name, list(extra)
        self.tls, self.token_file, self.client_ca, self.state = tls, token_file, client_ca, state
        self.proc = None
        self.port = None
        self.state_file = os.path.join(work, name + ".state.json")

    def args(self):
        a = [PY, SERVER, "--port", "0", "--port-file", self.port_file] + self.extra
        if self.tls:
            a += ["--tls-cert", os.path.join(self.work, "server.crt"), "--tls-key", os.path.join(self.work, "server.key")]
        if self.client_ca:
            a += ["--client-ca", os.path.join(self.work, "ca.crt")]
        if self.token_file:
            a += ["--token-file", self.token_file]
        if self.state:
            a += ["--state-file", self.state_file]
        return a

    def start(self):
        self.port_file = os.path.join(self.work, "%s.port.%d" % (self.name, int(time.monotonic() * 1000)))
        self.log = open(os.path.join(self.work, self.name + ".log"), "ab")
        self.proc = subprocess.Popen(self.args(), stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        line = [None]

        def read():
            line[0] = self.proc.stdout.readline()
        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(15)
        if not line[0] or not line[0].startswith(b"listening on "):
            self.kill()
            raise Failure("stand-in %s did not start: %r; log: %s" % (self.name, line[0], self.tail()))
        self.port = int(line[0].split()[-1])
        with open(self.port_file) as f:
            expect(int(f.read().strip()) == self.port, "port file disagrees with stdout")
        return self

    def tail(self):
        try:
            with open(os.path.join(self.work, self.name + ".log"), "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.port)

    def term(self, timeout=5):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass


def _die_with_parent():
    """The stand-in gets SIGTERM if this script dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except Exception:
        pass


class Raw:
    """Plain http.client access (an independent client for status codes and headers)."""

    def __init__(self, srv, token=None, cert=None):
        self.srv, self.token, self.cert = srv, token, cert

    def conn(self, timeout=10):
        if self.srv.tls:
            ctx = ssl.create_default_context(cafile=os.path.join(self.srv.work, "ca.crt"))
            if self.cert:
                ctx.load_cert_chain(os.path.join(self.srv.work, self.cert + ".crt"),
                                    os.path.join(self.srv.work, self.cert + ".key"))
            return http.client.HTTPSConnection("127.0.0.1", self.srv.port, context=ctx, timeout=timeout)
        return http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=timeout)

    def req(self, method, path, body=None, ctype="application/json", headers=None, token=True, timeout=10):
        c = self.conn(timeout)
        h = dict(headers or {})
        if body is not None:
            if not isinstance(body, (bytes, str)):
                body = json.dumps(body)
            h["Content-Type"] = ctype
        if token and self.token:
            h["Authorization"] = "Bearer " + (token if isinstance(token, str) else self.token)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            try:
                obj = json.loads(data) if data else None
            except ValueError:
                obj = data
            return r.status, dict(r.getheaders()), obj
        finally:
            c.close()


def k8s_client(srv, token=None, cert=None):
    cfg = kclient.Configuration()
    cfg.host = srv.url
    if srv.tls:
        cfg.ssl_ca_cert = os.path.join(srv.work, "ca.crt")
        cfg.verify_ssl = True
    if token:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    if cert:
        cfg.cert_file = os.path.join(srv.work, cert + ".crt")
        cfg.key_file = os.path.join(srv.work, cert + ".key")
    api = kclient.ApiClient(cfg)
    return api, kclient.BatchV1Api(api), kclient.CoreV1Api(api)


def data(resp):
    """Turn a _preload_content=False response into a dict."""
    return json.loads(resp.data)


def job_body(name, cmd=None, suspend=False, labels=None, env=None, backoff=None, limits=None, node_selector=None,
             ads=None, restart="Never", tolerations=None, grace=None):
    c = {"name": "main", "image": "busybox:1.36"}
    if cmd is not None:
        c["command"] = ["/bin/sh", "-c", cmd]
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if limits:
        c["resources"] = {"limits": limits}
    spec = {"restartPolicy": restart, "containers": [c]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    js = {"template": {"metadata": {"labels": {"app": "check"}}, "spec": spec}, "suspend": suspend}
    if backoff is not None:
        js["backoffLimit"] = backoff
    if ads is not None:
        js["activeDeadlineSeconds"] = ads
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": dict({"tessera.io/job": name}, **(labels or {}))}, "spec": js}


def pod_body(name, cmd=None, limits=None, node_selector=None, tolerations=None, grace=None, env=None, labels=None):
    c = {"name": "main", "image": "busybox:1.36"}
    if cmd is not None:
        c["command"] = ["/bin/sh", "-c", cmd]
    if limits:
        c["resources"] = {"limits": limits}
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec = {"restartPolicy": "Never", "containers": [c]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": "foreign"}},
            "spec": spec}


def cond(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def api_exc(fn, *a, **kw):
    try:
        fn(*a, **kw)
    except ApiException as e:
        try:
            body = json.loads(e.body) if e.body else {}
        except ValueError:
            body = {}
        return e.status, body, e.headers
    raise Failure("expected an API error, the call succeeded")


# ---------------------------------------------------------------------------------------------
class Checks:
    def __init__(self, work, res, opts):
        self.work, self.res, self.opts = work, res, opts
        self.token_file = os.path.join(work, "tokens")
        self.token = "tok-" + base64.b32encode(os.urandom(10)).decode().lower()
        with open(self.token_file, "w") as f:
            f.write("\n" + self.token + "\n")
        with open(os.path.join(work, "nodes.yaml"), "w") as f:
            f.write(NODES_YAML)
        self.servers = []

    def start(self, *a, **kw):
        s = Server(self.work, *a, **kw)
        self.servers.append(s)
        return s.start()

    def stop_all(self):
        for s in self.servers:
            s.kill()

    def bind(self, srv):
        self.srv = srv
        self.raw = Raw(srv, self.token if srv.token_file else None)
        self.api, self.batch, self.core = k8s_client(srv, self.token if srv.token_file else None)

    def get_job(self, ns, name):
        return data(self.batch.read_namespaced_job(name, ns, _preload_content=False, _request_timeout=10))

    def get_pod(self, ns, name):
        return data(self.core.read_namespaced_pod(name, ns, _preload_content=False, _request_timeout=10))

    def pods_of(self, ns, job):
        return data(self.core.list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name=" + job,
                                                  _preload_content=False, _request_timeout=10))["items"]

    def create_job(self, ns, body):
        return data(self.batch.create_namespaced_job(ns, body, _preload_content=False, _request_timeout=10))

    def patch(self, path, body, ctype):
        """PATCH with an explicit Content-Type through the kubernetes client's ApiClient."""
        r = self.api.call_api(path, "PATCH", header_params={"Content-Type": ctype, "Accept": "application/json"},
                              body=body, auth_settings=["BearerToken"], _preload_content=False,
                              _return_http_data_only=True, _request_timeout=10)
        return json.loads(r.data)

    def wait_job_cond(self, ns, name, ctype, timeout=10):
        return wait_for(lambda: (lambda j: j if (cond(j, ctype) or {}).get("status") == "True" else None)(
            self.get_job(ns, name)), timeout, what="job %s condition %s" % (name, ctype))

    # ---- Dynamic Resource Allocation (resource.k8s.io/v1) -------------------------------------
    # The Debian python3-kubernetes (22.6) predates resource.k8s.io/v1: its generic clients do the
    # work: CustomObjectsApi for the verbs and watch, DynamicClient for discovery.
    def dra(self):
        from kubernetes.dynamic import DynamicClient
        G, V = "resource.k8s.io", "v1"
        co = kclient.CustomObjectsApi(self.api)
        dyn = DynamicClient(self.api)
        claims_api = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
        expect(claims_api.namespaced and claims_api.name == "resourceclaims", "discovery of ResourceClaim")
        expect(not dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice").namespaced,
               "ResourceSlice is cluster-scoped")
        T = 10
        sel = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '%s'"
        for name, typ in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
            co.create_cluster_custom_object(G, V, "deviceclasses", {
                "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": sel % typ}}]}}, _request_timeout=T)
        # One partitionable A100 on node-a: the whole card and its MIG devices share one counter set.
        devices = [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "productName": {
            "string": "NVIDIA A100-SXM4-80GB"}}, "consumesCounters": [
            {"counterSet": "gpu-0-counters", "counters": {"multiprocessors": {"value": "98"}}}]}]
        for i in range(7):
            devices.append({"name": "gpu-0-mig-1g10gb-%d" % i, "attributes": {
                "type": {"string": "mig"}, "profile": {"string": "1g.10gb"}}, "consumesCounters": [
                {"counterSet": "gpu-0-counters", "counters": {"multiprocessors": {"value": "14"}}}]})
        co.create_cluster_custom_object(G, V, "resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "node-a-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-a",
                     "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                     "sharedCounters": [{"name": "gpu-0-counters", "counters": {"multiprocessors": {"value": "98"}}}],
                     "devices": devices}}, _request_timeout=T)
        got = co.list_cluster_custom_object(G, V, "resourceslices", field_selector="spec.nodeName=node-a",
                                            _request_timeout=T)
        expect([x["metadata"]["name"] for x in got["items"]] == ["node-a-gpu"], "slices by spec.nodeName")

        def claim(name, cls, profile=None, config=None):
            ex = {"deviceClassName": cls}
            if profile:
                ex["selectors"] = [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '%s'"
                                                          % profile}}]
            spec = {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}
            if config:
                spec["devices"]["config"] = [{"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com",
                                                                              "parameters": config}}]
            return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                    "spec": spec}
        mps = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {
            "strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}}
        made = co.create_namespaced_custom_object(G, V, "dra", "resourceclaims",
                                                  claim("mig", "mig.nvidia.com", "1g.10gb", mps), _request_timeout=T)
        ex = made["spec"]["devices"]["requests"][0]["exactly"]
        expect(ex.get("allocationMode") == "ExactCount" and ex.get("count") == 1, "defaults: %s" % ex)
        # Validation: a request without a class, and a CEL expression that does not compile.
        bad = claim("bad", "")
        st, body, _ = api_exc(co.create_namespaced_custom_object, G, V, "dra", "resourceclaims", bad,
                              _request_timeout=T)
        expect(st == 422 and "spec.devices.requests[0].exactly.deviceClassName" in body.get("message", ""),
               "422 naming the field: %s %s" % (st, body.get("message")))
        bad = claim("bad", "mig.nvidia.com")
        bad["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": "device.("}}]
        st, body, _ = api_exc(co.create_namespaced_custom_object, G, V, "dra", "resourceclaims", bad,
                              _request_timeout=T)
        expect(st == 422 and "compilation failed" in body.get("message", ""), "CEL: %s" % body.get("message"))
        # A watch on claims sees the allocation arrive.
        w = kwatch.Watch()
        seen = []

        def watch_claims():
            for ev in w.stream(co.list_namespaced_custom_object, G, V, "dra", "resourceclaims", timeout_seconds=8,
                               _request_timeout=10):
                if ((ev["object"].get("status") or {}).get("allocation")):
                    seen.append(ev["type"])
                    w.stop()
        t = threading.Thread(target=watch_claims, daemon=True)
        t.start()
        pod = pod_body("dra-mig", "sleep 30")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "mig"}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        self.core.create_namespaced_pod("dra", pod, _request_timeout=T)
        wait_for(lambda: self.get_pod("dra", "dra-mig")["spec"].get("nodeName") == "node-a", what="MIG pod bound")
        c = co.get_namespaced_custom_object(G, V, "dra", "resourceclaims", "mig", _request_timeout=T)
        res = c["status"]["allocation"]["devices"]["results"]
        expect(res == [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a",
                        "device": "gpu-0-mig-1g10gb-0"}], "allocation %s" % res)
        cfg = c["status"]["allocation"]["devices"]["config"]
        expect(cfg[0]["source"] == "FromClaim" and cfg[0]["opaque"]["parameters"]["sharing"]["strategy"] == "MPS",
               "config %s" % cfg)
        expect(c["status"]["reservedFor"][0]["name"] == "dra-mig", "reservedFor %s" % c["status"])
        t.join(10)
        expect(seen == ["MODIFIED"], "watch saw the allocation: %s" % seen)
        # What the stand-in serves has the official shapes: the allocated claim, the slice and the
        # classes through kubernetes-models (tools/k8s-validate, installed by scripts/setup.sh).
        validator = os.path.join(HERE, "..", "..", "..", "tools", "k8s-validate", "validate.mjs")
        if shutil.which("node") and os.path.isdir(os.path.join(os.path.dirname(validator), "node_modules")):
            files = []
            objs = [c, co.get_cluster_custom_object(G, V, "resourceslices", "node-a-gpu", _request_timeout=T)] + \
                co.list_cluster_custom_object(G, V, "deviceclasses", _request_timeout=T)["items"]
            for i, o in enumerate(objs):
                o.setdefault("apiVersion", "resource.k8s.io/v1")
                o.setdefault("kind", ["ResourceClaim", "ResourceSlice"][i] if i < 2 else "DeviceClass")
                files.append(os.path.join(self.work, "dra-%d.json" % i))
                with open(files[-1], "w") as f:
                    json.dump(o, f)
            out = subprocess.run(["node", validator] + files, capture_output=True, text=True, timeout=60)
            expect(out.returncode == 0, "kubernetes-models: %s" % out.stdout[-500:])
        # The whole card shares the counters with the MIG device in use: it cannot be allocated...
        co.create_namespaced_custom_object(G, V, "dra", "resourceclaims", claim("whole", "gpu.nvidia.com"),
                                           _request_timeout=T)
        pod = pod_body("dra-whole", "sleep 30")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "whole"}]
        self.core.create_namespaced_pod("dra", pod, _request_timeout=T)
        wait_for(lambda: "cannot allocate all claims" in (cond(self.get_pod("dra", "dra-whole"), "PodScheduled")
                                                           or {}).get("message", ""), what="whole card unschedulable")
        # ... until the MIG pod is gone: its claim is deallocated and the whole card goes to the other.
        self.core.delete_namespaced_pod("dra-mig", "dra", grace_period_seconds=0, _request_timeout=T)
        wait_for(lambda: self.get_pod("dra", "dra-whole")["spec"].get("nodeName") == "node-a", what="whole bound")
        c = co.get_namespaced_custom_object(G, V, "dra", "resourceclaims", "mig", _request_timeout=T)
        expect("allocation" not in (c.get("status") or {}), "MIG claim deallocated: %s" % c.get("status"))
        # A claim template: the pod gets its own generated claim, owned by it, named in its status.
        co.create_namespaced_custom_object(G, V, "dra", "resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-mig"},
            "spec": {"spec": claim("x", "mig.nvidia.com", "1g.10gb")["spec"]}}, _request_timeout=T)
        self.core.delete_namespaced_pod("dra-whole", "dra", grace_period_seconds=0, _request_timeout=T)
        pod = pod_body("dra-tmpl", "sleep 30")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-mig"}]
        self.core.create_namespaced_pod("dra", pod, _request_timeout=T)
        p = wait_for(lambda: (lambda p: p if p["spec"].get("nodeName") else None)(self.get_pod("dra", "dra-tmpl")),
                     what="template pod bound")
        gen = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        c = co.get_namespaced_custom_object(G, V, "dra", "resourceclaims", gen, _request_timeout=T)
        expect(c["metadata"]["ownerReferences"][0]["name"] == "dra-tmpl" and c["status"]["allocation"],
               "generated claim %s" % c)
        self.core.delete_namespaced_pod("dra-tmpl", "dra", grace_period_seconds=0, _request_timeout=T)
        wait_for(lambda: gen not in [x["metadata"]["name"] for x in co.list_namespaced_custom_object(
            G, V, "dra", "resourceclaims", _request_timeout=T)["items"]], what="generated claim deleted with its pod")

    # ---- checks on the TLS server ----------------------------------------------------------
    def discovery(self):
        v = kclient.VersionApi(self.api).get_code(_request_timeout=10)
        expect(v.major == "1" and v.git_version.startswith("v1."), "version %s" % v)
        rl = self.batch.get_api_resources(_request_timeout=10)
        names = {r.name: r for r in rl.resources}
        expect("jobs" in names and names["jobs"].namespaced and "watch" in names["jobs"].verbs, "batch/v1 jobs")
        rl = self.core.get_api_resources(_request_timeout=10)
        names = {r.name: r for r in rl.resources}
        expect({"pods", "nodes", "namespaces"} <= set(names), "core resources %s" % sorted(names))
        expect(not names["nodes"].namespaced and names["pods"].kind == "Pod", "core flags")
        groups = kclient.ApisApi(self.api).get_api_versions(_request_timeout=10)
        expect(any(g.name == "batch" for g in groups.groups), "batch group")
        st, _, body = self.raw.req("GET", "/openapi/v2")
        expect(st == 404 and body.get("kind") == "Status", "openapi/v2 -> %s" % st)

    def auth(self):
        st, _, body = self.raw.req("GET", "/api/v1/nodes", token=False)
        expect(st == 401 and body["kind"] == "Status" and body["reason"] == "Unauthorized" and body["code"] == 401,
               "no token -> %s %s" % (st, body))
        st, _, _ = self.raw.req("GET", "/api/v1/nodes", token="wrong")
        expect(st == 401, "bad token -> %s" % st)
        st, _, _ = self.raw.req("GET", "/api/v1/nodes")
        expect(st == 200, "good token -> %s" % st)
        # client certificate signed by --client-ca authenticates without a token
        st, _, body = Raw(self.srv, cert="client").req("GET", "/api/v1/nodes", token=False)
        expect(st == 200 and body["kind"] == "NodeList", "client cert -> %s" % st)
        _, b2, c2 = k8s_client(self.srv, cert="client")
        expect(len(c2.list_node(_request_timeout=10).items) == 3, "python client with client cert")
        # a certificate from an unknown CA is refused (TLS handshake or 401)
        try:
            st, _, _ = Raw(self.srv, cert="rogue").req("GET", "/api/v1/nodes", token=False)
            expect(st == 401, "rogue cert -> %s" % st)
        except (ssl.SSLError, ConnectionError, OSError):
            pass
        # token rotation: the file is replaced; the old token stops working at once
        new = "rot-" + base64.b32encode(os.urandom(10)).decode().lower()
        tmp = self.token_file + ".new"
        with open(tmp, "w") as f:
            f.write(new + "\n")
        os.replace(tmp, self.token_file)
        try:
            st, _, _ = self.raw.req("GET", "/api/v1/nodes")
            expect(st == 401, "old token after rotation -> %s" % st)
            st, _, _ = self.raw.req("GET", "/api/v1/nodes", token=new)
            expect(st == 200, "new token -> %s" % st)
            st, _, _ = self.raw.req("GET", "/_standin/stats", token=False)
            expect(st == 200, "control endpoints need no auth")
        finally:
            with open(tmp, "w") as f:
                f.write(self.token + "\n" + new + "\n")
            os.replace(tmp, self.token_file)

    def nodes(self):
        nl = self.core.list_node(_request_timeout=10)
        names = sorted(n.metadata.name for n in nl.items)
        expect(names == ["node-a", "node-b", "node-c"], "nodes %s" % names)
        a = self.core.read_node("node-a", _request_timeout=10)
        expect(a.status.allocatable["nvidia.com/gpu"] == "4" and a.metadata.uid and a.metadata.resource_version,
               "node-a fields")
        expect(self.core.list_node(label_selector="tessera.io/pool in (a,b)", _request_timeout=10).items.__len__()
               == 2, "node label selector")
        expect(len(self.core.list_node(field_selector="metadata.name=node-c", _request_timeout=10).items) == 1,
               "node field selector")

    def create_get(self):
        ns = "crud"
        j = self.create_job(ns, job_body("alpha", "exit 0", suspend=True))
        md = j["metadata"]
        expect(md["uid"] and md["resourceVersion"].isdigit() and md["generation"] == 1 and md["creationTimestamp"],
               "server-set metadata %s" % md)
        sel = j["spec"]["selector"]["matchLabels"]
        expect(sel == {"batch.kubernetes.io/controller-uid": md["uid"]}, "generated selector %s" % sel)
        tl = j["spec"]["template"]["metadata"]["labels"]
        expect(tl["job-name"] == "alpha" and tl["controller-uid"] == md["uid"], "template labels %s" % tl)
        expect(j["spec"]["backoffLimit"] == 6 and j["spec"]["completions"] == 1 and j["spec"]["parallelism"] == 1,
               "defaults")
        got = self.batch.read_namespaced_job("alpha", ns, _request_timeout=10)
        expect(got.metadata.uid == md["uid"] and got.spec.suspend is True, "read back")
        st, body, _ = api_exc(self.batch.create_namespaced_job, ns, job_body("alpha", "exit 0", suspend=True),
                              _request_timeout=10)
        expect(st == 409 and body["reason"] == "AlreadyExists" and
               body["message"] == 'jobs.batch "alpha" already exists', "duplicate -> %s %s" % (st, body))
        b = job_body("x", suspend=True)
        del b["metadata"]["name"]
        b["metadata"]["generateName"] = "gen-"
        g = self.create_job(ns, b)
        expect(g["metadata"]["name"].startswith("gen-") and len(g["metadata"]["name"]) == 9, "generateName")
        st, body, _ = api_exc(self.batch.read_namespaced_job, "nope", ns, _request_timeout=10)
        expect(st == 404 and body["reason"] == "NotFound" and body["details"]["kind"] == "jobs", "404 %s" % body)
        nsl = [n.metadata.name for n in self.core.list_namespace(_request_timeout=10).items]
        expect("crud" in nsl and "default" in nsl, "implicit namespaces %s" % nsl)
        # rv grows across kinds like etcd's revision
        rv1 = int(self.core.list_node(_request_timeout=10).metadata.resource_version)
        self.create_job(ns, job_body("beta", suspend=True))
        rv2 = int(self.core.list_node(_request_timeout=10).metadata.resource_version)
        expect(rv2 > rv1, "list resourceVersion is global")
        # typed list items carry no kind/apiVersion
        items = data(self.batch.list_namespaced_job(ns, _preload_content=False, _request_timeout=10))["items"]
        expect(items and "kind" not in items[0], "list items without kind")

    def validation(self):
        ns = "valid"
        b = job_body("norestart", "exit 0")
        del b["spec"]["template"]["spec"]["restartPolicy"]
        st, body, _ = api_exc(self.batch.create_namespaced_job, ns, b, _request_timeout=10)
        fields = [c["field"] for c in body.get("details", {}).get("causes", [])]
        expect(st == 422 and body["reason"] == "Invalid" and "spec.template.spec.restartPolicy" in fields,
               "no restartPolicy -> %s %s" % (st, body))
        b = job_body("always", "exit 0", restart="Always")
        st, body, _ = api_exc(self.batch.create_namespaced_job, ns, b, _request_timeout=10)
        expect(st == 422, "restartPolicy Always -> %s" % st)
        b = job_body("noconts")
        b["spec"]["template"]["spec"]["containers"] = []
        st, body, _ = api_exc(self.batch.create_namespaced_job, ns, b, _request_timeout=10)
        fields = [c["field"] for c in body["details"]["causes"]]
        expect(st == 422 and "spec.template.spec.containers" in fields, "no containers -> %s" % body)
        b = job_body("noimage")
        del b["spec"]["template"]["spec"]["containers"][0]["image"]
        st, body, _ = api_exc(self.batch.create_namespaced_job, ns, b, _request_timeout=10)
        expect(st == 422 and "spec.template.spec.containers[0].image" in
               [c["field"] for c in body["details"]["causes"]], "no image -> %s" % body)
        # Mutable scheduling directives: allowed while suspended and never started
        self.create_job(ns, job_body("susp", "exit 0", suspend=True))
        p = self.patch("/apis/batch/v1/namespaces/%s/jobs/susp" % ns,
                       {"spec": {"template": {"spec": {"nodeSelector": {"tessera.io/pool": "a"},
                                                       "tolerations": [{"key": "x", "operator": "Exists"}]},
                                              "metadata": {"annotations": {"a": "b"}}}}},
                       "application/merge-patch+json")
        expect(p["spec"]["template"]["spec"]["nodeSelector"] == {"tessera.io/pool": "a"} and
               p["metadata"]["generation"] == 2, "scheduling directives updated, generation bumped")
        st, body, _ = api_exc(self.patch, "/apis/batch/v1/namespaces/%s/jobs/susp" % ns,
                              {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "other"}]}}}},
                              "application/strategic-merge-patch+json")
        expect(st == 422 and "spec.template" in [c["field"] for c in body["details"]["causes"]],
               "image change in template -> %s" % st)
        st, body, _ = api_exc(self.patch, "/apis/batch/v1/namespaces/%s/jobs/susp" % ns,
                              {"spec": {"completions": 3}}, "application/merge-patch+json")
        expect(st == 422 and "spec.completions" in [c["field"] for c in body["details"]["causes"]],
               "completions immutable -> %s" % st)
        st, body, _ = api_exc(self.patch, "/apis/batch/v1/namespaces/%s/jobs/susp" % ns,
                              {"spec": {"selector": {"matchLabels": {"a": "b"}}}}, "application/merge-patch+json")
        expect(st == 422 and "spec.selector" in [c["field"] for c in body["details"]["causes"]], "selector immutable")
        # mutable: parallelism, activeDeadlineSeconds, labels
        p = self.patch("/apis/batch/v1/namespaces/%s/jobs/susp" % ns,
                       {"metadata": {"labels": {"k": "v"}}, "spec": {"parallelism": 2, "activeDeadlineSeconds": 600}},
                       "application/merge-patch+json")
        expect(p["spec"]["parallelism"] == 2 and p["metadata"]["labels"]["k"] == "v", "mutable fields")
        # once started (unsuspended), the template directives are frozen
        self.create_job(ns, job_body("running", "sleep 20"))
        self.wait_job_cond_start(ns, "running")
        st, body, _ = api_exc(self.patch, "/apis/batch/v1/namespaces/%s/jobs/running" % ns,
                              {"spec": {"template": {"spec": {"nodeSelector": {"tessera.io/pool": "b"}}}}},
                              "application/merge-patch+json")
        expect(st == 422 and "field is immutable" in body["message"], "directives frozen after start -> %s" % st)
        # suspended again but startTime was set before -> still immutable?  After suspension the
        # controller clears startTime, so the directives become mutable again.
        self.patch("/apis/batch/v1/namespaces/%s/jobs/running" % ns, {"spec": {"suspend": True}},
                   "application/merge-patch+json")
        wait_for(lambda: not self.get_job(ns, "running")["status"].get("startTime") and
                 (cond(self.get_job(ns, "running"), "Suspended") or {}).get("status") == "True",
                 what="suspension clears startTime")
        self.patch("/apis/batch/v1/namespaces/%s/jobs/running" % ns,
                   {"spec": {"template": {"spec": {"nodeSelector": {"tessera.io/pool": "b"}}}}},
                   "application/merge-patch+json")
        st, body, _ = api_exc(self.batch.patch_namespaced_job_status, "running", ns, {"status": 1},
                              _request_timeout=10)
        expect(st == 400, "status of the wrong type -> %s" % st)

    def wait_job_cond_start(self, ns, name):
        return wait_for(lambda: self.get_job(ns, name)["status"].get("startTime"), what="startTime of " + name)

    def selectors(self):
        ns = "sel"
        specs = [("s1", {"tier": "gold", "gpu": "a100"}), ("s2", {"tier": "silver", "gpu": "h100"}),
                 ("s3", {"tier": "gold"}), ("s4", {})]
        for n, l in specs:
            self.create_job(ns, job_body(n, suspend=True, labels=l))
        q = lambda sel: sorted(j.metadata.name for j in self.batch.list_namespaced_job(
            ns, label_selector=sel, _request_timeout=10).items)
        cases = {"tier=gold": ["s1", "s3"], "tier==gold": ["s1", "s3"], "tier!=gold": ["s2", "s4"],
                 "tier in (gold,silver)": ["s1", "s2", "s3"], "tier notin (gold)": ["s2", "s4"],
                 "gpu": ["s1", "s2"], "!gpu": ["s3", "s4"], "tier=gold,gpu": ["s1"],
                 "tessera.io/job": ["s1", "s2", "s3", "s4"], "tessera.io/job=s4": ["s4"]}
        for sel, want in cases.items():
            got = q(sel)
            expect(got == want, "labelSelector %r -> %s, want %s" % (sel, got, want))
        got = sorted(j.metadata.name for j in self.batch.list_namespaced_job(
            ns, field_selector="metadata.name!=s1", _request_timeout=10).items)
        expect(got == ["s2", "s3", "s4"], "fieldSelector != %s" % got)
        got = [j.metadata.name for j in self.batch.list_job_for_all_namespaces(
            field_selector="metadata.namespace=sel,metadata.name=s2", _request_timeout=10).items]
        expect(got == ["s2"], "all-namespace list with fieldSelector %s" % got)
        st, body, _ = api_exc(self.batch.list_namespaced_job, ns, field_selector="spec.foo=1", _request_timeout=10)
        expect(st == 400 and "field label not supported" in body["message"], "bad field -> %s" % st)
        st, body, _ = api_exc(self.batch.list_namespaced_job, ns, label_selector="a in (", _request_timeout=10)
        expect(st == 400, "bad label selector -> %s" % st)

    def chunks(self):
        ns = "chunk"
        for i in range(25):
            self.create_job(ns, job_body("c%02d" % i, suspend=True))
        p1 = self.batch.list_namespaced_job(ns, limit=10, _request_timeout=10)
        expect(len(p1.items) == 10 and p1.metadata._continue and p1.metadata.remaining_item_count == 15,
               "page 1: %d items, remaining %s" % (len(p1.items), p1.metadata.remaining_item_count))
        self.create_job(ns, job_body("c99-late", suspend=True))   # not in the snapshot
        self.batch.delete_namespaced_job("c24", ns, _request_timeout=10)
        wait_for(lambda: api_exc(self.batch.read_namespaced_job, "c24", ns, _request_timeout=10)[0] == 404,
                 what="c24 deleted (orphan finalizer processed)")
        p2 = self.batch.list_namespaced_job(ns, limit=10, _continue=p1.metadata._continue, _request_timeout=10)
        p3 = self.batch.list_namespaced_job(ns, limit=10, _continue=p2.metadata._continue, _request_timeout=10)
        names = [j.metadata.name for p in (p1, p2, p3) for j in p.items]
        expect(names == ["c%02d" % i for i in range(25)], "consistent snapshot: %s" % names[-3:])
        expect(p2.metadata.remaining_item_count == 5 and not p3.metadata._continue and
               p3.metadata.remaining_item_count is None, "page 3 is the last")
        expect(p1.metadata.resource_version == p2.metadata.resource_version == p3.metadata.resource_version,
               "pages share the list resourceVersion")
        # selector + limit: remainingItemCount is not set (as the real server does)
        ps = self.batch.list_namespaced_job(ns, limit=5, label_selector="app!=x", _request_timeout=10)
        expect(len(ps.items) == 5 and ps.metadata._continue and ps.metadata.remaining_item_count is None,
               "selector page")
        # after a compaction the token is too old: 410 Expired with an inconsistent continue token
        st, _, _ = self.raw.req("POST", "/_standin/compact", {})
        expect(st == 200, "compact")
        st, body, _ = api_exc(self.batch.list_namespaced_job, ns, limit=10, _continue=p1.metadata._continue,
                              _request_timeout=10)
        expect(st == 410 and body["reason"] == "Expired" and
               body["message"].startswith("The provided continue parameter is too old"), "410 -> %s %s" % (st, body))
        inc = body["metadata"]["continue"]
        rest = self.batch.list_namespaced_job(ns, limit=100, _continue=inc, _request_timeout=10)
        got = [j.metadata.name for j in rest.items]
        expect(got == ["c%02d" % i for i in range(10, 24)] + ["c99-late"], "inconsistent continuation %s" % got)
        st, body, _ = api_exc(self.batch.list_namespaced_job, ns, limit=10, _continue="!!garbage",
                              _request_timeout=10)
        expect(st == 400, "garbage continue -> %s" % st)

    def watch(self):
        ns = "watch"
        self.create_job(ns, job_body("w1", suspend=True))
        rv = self.batch.list_namespaced_job(ns, _request_timeout=10).metadata.resource_version

        def writer():
            time.sleep(0.3)
            self.patch("/apis/batch/v1/namespaces/%s/jobs/w1" % ns, {"metadata": {"labels": {"x": "1"}}},
                       "application/merge-patch+json")
            self.create_job(ns, job_body("w2", suspend=True))
            self.create_job("other-ns", job_body("w3", suspend=True))
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        events = []
        w = kwatch.Watch()
        for ev in w.stream(self.batch.list_namespaced_job, ns, resource_version=rv, allow_watch_bookmarks=True,
                           timeout_seconds=3, _request_timeout=10):
            events.append((ev["type"], ev["raw_object"]))
        t.join(5)
        types = [e[0] for e in events]
        expect("MODIFIED" in types and "ADDED" in types, "events %s" % types)
        objs = [o for ty, o in events if ty != "BOOKMARK"]
        expect(all(o["metadata"]["namespace"] == ns for o in objs), "namespace filter")
        expect(any(o["metadata"]["name"] == "w1" and o["metadata"]["labels"].get("x") == "1" for o in objs),
               "label patch event")
        rvs = [int(o["metadata"]["resourceVersion"]) for o in objs]
        expect(rvs == sorted(rvs) and rvs[0] > int(rv), "events after the watch rv, in order %s" % rvs)
        bms = [o for ty, o in events if ty == "BOOKMARK"]
        expect(len(bms) >= 2, "bookmarks during quiet and at the end: %d (%s)" % (len(bms), types))
        last_obj_rv = max(int(o["metadata"]["resourceVersion"]) for o in objs)
        expect(int(bms[-1]["metadata"]["resourceVersion"]) >= last_obj_rv and bms[-1]["kind"] == "Job" and
               bms[-1]["apiVersion"] == "batch/v1", "bookmark object %s" % bms[-1])
        expect(types[-1] == "BOOKMARK", "stream ends with a bookmark")
        # resourceVersion "0": ADDED for every existing object, then live events
        evs = [e["type"] for e in kwatch.Watch().stream(self.batch.list_namespaced_job, ns, resource_version="0",
                                                         timeout_seconds=1, _request_timeout=10)]
        expect(evs == ["ADDED", "ADDED"], "rv=0 initial events %s" % evs)
        # label selector applied to events: an object leaving the selection is sent as DELETED
        rv = self.batch.list_namespaced_job(ns, _request_timeout=10).metadata.resource_version

        def writer2():
            time.sleep(0.2)
            self.patch("/apis/batch/v1/namespaces/%s/jobs/w1" % ns, {"metadata": {"labels": {"x": "2"}}},
                       "application/merge-patch+json")
            self.patch("/apis/batch/v1/namespaces/%s/jobs/w2" % ns, {"metadata": {"labels": {"x": "1"}}},
                       "application/merge-patch+json")
        t = threading.Thread(target=writer2, daemon=True)
        t.start()
        evs = [(e["type"], e["raw_object"]["metadata"]["name"]) for e in kwatch.Watch().stream(
            self.batch.list_namespaced_job, ns, resource_version=rv, label_selector="x=1", timeout_seconds=1,
            _request_timeout=10)]
        t.join(5)
        expect(evs == [("DELETED", "w1"), ("ADDED", "w2")], "selector transitions %s" % evs)

    def watch_expired(self):
        ns = "watch"
        old = self.batch.list_namespaced_job(ns, _request_timeout=10).metadata.resource_version
        self.patch("/apis/batch/v1/namespaces/%s/jobs/w1" % ns, {"metadata": {"labels": {"y": "1"}}},
                   "application/merge-patch+json")
        st, _, _ = self.raw.req("POST", "/_standin/compact", {})
        # Raw: HTTP 200 and a single ERROR event with a 410 Status, then the stream ends
        c = self.raw.conn()
        c.request("GET", "/apis/batch/v1/namespaces/%s/jobs?watch=true&resourceVersion=%s" % (ns, old),
                  headers={"Authorization": "Bearer " + self.token})
        r = c.getresponse()
        body = r.read().decode()
        c.close()
        lines = [json.loads(l) for l in body.splitlines() if l.strip()]
        expect(r.status == 200 and len(lines) == 1 and lines[0]["type"] == "ERROR", "raw %s %s" % (r.status, lines))
        o = lines[0]["object"]
        expect(o["kind"] == "Status" and o["code"] == 410 and o["reason"] == "Expired" and
               o["message"].startswith("too old resource version: %s (" % old), "error object %s" % o)
        # the Python client surfaces it as ApiException(410)
        try:
            for _ in kwatch.Watch().stream(self.batch.list_namespaced_job, ns, resource_version=old,
                                           timeout_seconds=2, _request_timeout=10):
                pass
            raise Failure("no error from the Python client watch")
        except ApiException as e:
            expect(e.status == 410, "python client status %s" % e.status)
        # a current resourceVersion still works after compaction
        cur = self.batch.list_namespaced_job(ns, _request_timeout=10).metadata.resource_version
        evs = list(kwatch.Watch().stream(self.batch.list_namespaced_job, ns, resource_version=cur,
                                         timeout_seconds=1, _request_timeout=10))
        expect(evs == [], "watch from the current rv: %s" % evs)

    def patches(self):
        ns = "patch"
        base = "/apis/batch/v1/namespaces/%s/jobs/p1" % ns
        self.create_job(ns, job_body("p1", "exit 0", suspend=True, labels={"keep": "1", "drop": "1"}))
        self.wait_job_cond(ns, "p1", "Suspended")
        j = self.patch(base, {"metadata": {"labels": {"drop": None, "new": "x"}}, "spec": {"parallelism": 3}},
                       "application/merge-patch+json")
        expect(j["metadata"]["labels"].get("keep") == "1" and "drop" not in j["metadata"]["labels"] and
               j["metadata"]["labels"]["new"] == "x" and j["spec"]["parallelism"] == 3, "merge patch %s" % j["metadata"])
        # strategic: tolerations are replaced (no patch strategy) ...
        j = self.patch(base, {"spec": {"template": {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}}},
                       "application/strategic-merge-patch+json")
        j = self.patch(base, {"spec": {"template": {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}}},
                       "application/strategic-merge-patch+json")
        expect([t["key"] for t in j["spec"]["template"]["spec"]["tolerations"]] == ["b"], "tolerations replaced")
        # ... containers are merged by name (on a Pod, whose image is mutable)
        self.core.create_namespaced_pod(ns, pod_body("sp", "sleep 30", node_selector={"tessera.io/pool": "none"}),
                                        _request_timeout=10)
        pp = self.patch("/api/v1/namespaces/%s/pods/sp" % ns, {"spec": {"containers": [{"name": "main",
                                                                                      "image": "busybox:2"}]}},
                        "application/strategic-merge-patch+json")
        c = pp["spec"]["containers"]
        expect(len(c) == 1 and c[0]["image"] == "busybox:2" and c[0]["command"] == ["/bin/sh", "-c", "sleep 30"],
               "containers merged by name %s" % c)
        # the python client's own patch (strategic merge for a dict body)
        jm = self.batch.patch_namespaced_job("p1", ns, {"metadata": {"annotations": {"via": "client"}}},
                                             _request_timeout=10)
        expect(jm.metadata.annotations["via"] == "client", "client patch")
        # JSON patch, incl. a test operation
        j = self.patch(base, [{"op": "test", "path": "/spec/suspend", "value": True},
                              {"op": "replace", "path": "/spec/parallelism", "value": 1},
                              {"op": "add", "path": "/metadata/labels/jp", "value": "1"},
                              {"op": "copy", "from": "/metadata/labels/jp", "path": "/metadata/labels/jp2"},
                              {"op": "move", "from": "/metadata/labels/jp2", "path": "/metadata/labels/jp3"},
                              {"op": "remove", "path": "/metadata/labels/new"}], "application/json-patch+json")
        lab = j["metadata"]["labels"]
        expect(j["spec"]["parallelism"] == 1 and lab.get("jp") == "1" and lab.get("jp3") == "1" and
               "jp2" not in lab and "new" not in lab, "json patch %s" % lab)
        st, body, _ = api_exc(self.patch, base, [{"op": "test", "path": "/spec/suspend", "value": False}],
                              "application/json-patch+json")
        expect(st == 422, "failed test op -> %s" % st)
        st, body, _ = api_exc(self.patch, base, [{"op": "remove", "path": "/metadata/labels/absent"}],
                              "application/json-patch+json")
        expect(st == 422, "remove of a missing path -> %s" % st)
        # other content types: 415; broken JSON: 400
        for ct in ("application/apply-patch+yaml", "text/plain", "application/json"):
            st, _, body = self.raw.req("PATCH", base, {"spec": {}}, ctype=ct)
            expect(st == 415 and body["reason"] == "UnsupportedMediaType", "%s -> %s" % (ct, st))
        st, _, body = self.raw.req("PATCH", base, "{not json", ctype="application/merge-patch+json")
        expect(st == 400 and body["kind"] == "Status", "invalid JSON -> %s" % st)
        # a no-op patch does not change the resourceVersion
        j1 = self.get_job(ns, "p1")
        j2 = self.patch(base, {"spec": {"suspend": True}}, "application/merge-patch+json")
        expect(j1["metadata"]["resourceVersion"] == j2["metadata"]["resourceVersion"], "no-op patch")
        # status is ignored on the main resource, set through /status
        j3 = self.patch(base, {"status": {"succeeded": 5}}, "application/merge-patch+json")
        expect(not j3.get("status", {}).get("succeeded"), "status ignored on main resource")

    def conflicts(self):
        ns = "conflict"
        self.create_job(ns, job_body("k1", suspend=True))
        # let the Job controller record Suspended=True first (it writes the status, too)
        self.wait_job_cond(ns, "k1", "Suspended")
        old = self.batch.read_namespaced_job("k1", ns, _request_timeout=10)
        self.patch("/apis/batch/v1/namespaces/%s/jobs/k1" % ns, {"metadata": {"labels": {"v": "2"}}},
                   "application/merge-patch+json")
        old.metadata.labels["v"] = "stale"
        st, body, _ = api_exc(self.batch.replace_namespaced_job, "k1", ns, old, _request_timeout=10)
        expect(st == 409 and body["reason"] == "Conflict" and body["message"] ==
               'Operation cannot be fulfilled on jobs.batch "k1": the object has been modified; please apply your '
               'changes to the latest version and try again', "PUT stale -> %s %s" % (st, body.get("message")))
        st, body, _ = api_exc(self.patch, "/apis/batch/v1/namespaces/%s/jobs/k1" % ns,
                              {"metadata": {"resourceVersion": old.metadata.resource_version, "labels": {"v": "3"}}},
                              "application/merge-patch+json")
        expect(st == 409, "PATCH stale -> %s" % st)
        cur = self.batch.read_namespaced_job("k1", ns, _request_timeout=10)
        cur.metadata.labels["v"] = "4"
        new = self.batch.replace_namespaced_job("k1", ns, cur, _request_timeout=10)
        expect(new.metadata.labels["v"] == "4" and int(new.metadata.resource_version) >
               int(cur.metadata.resource_version), "PUT with the current rv")
        # PUT without resourceVersion is an unconditional update
        body = self.get_job(ns, "k1")
        del body["metadata"]["resourceVersion"]
        body["metadata"]["labels"]["v"] = "5"
        out = data(self.batch.replace_namespaced_job("k1", ns, body, _preload_content=False, _request_timeout=10))
        expect(out["metadata"]["labels"]["v"] == "5", "unconditional PUT")
        # injected conflict: the next write fails with 409 and the object moves on
        rv0 = self.get_job(ns, "k1")["metadata"]["resourceVersion"]
        st, _, _ = self.raw.req("POST", "/_standin/conflict", {"count": 1})
        st, body, _ = api_exc(self.patch, "/apis/batch/v1/namespaces/%s/jobs/k1" % ns,
                              {"metadata": {"labels": {"v": "6"}}}, "application/merge-patch+json")
        rv1 = self.get_job(ns, "k1")["metadata"]["resourceVersion"]
        expect(st == 409 and int(rv1) > int(rv0), "injected conflict %s, rv %s -> %s" % (st, rv0, rv1))
        j = self.patch("/apis/batch/v1/namespaces/%s/jobs/k1" % ns, {"metadata": {"labels": {"v": "6"}}},
                       "application/merge-patch+json")
        expect(j["metadata"]["labels"]["v"] == "6", "write after the injected conflict")

    def job_outcomes(self):
        ns = "run"
        self.create_job(ns, job_body("ok", "echo hello $(GREETING) from $HOSTNAME; exit 0",
                                     env={"GREETING": "world"}))
        self.create_job(ns, job_body("bad", "exit 3", backoff=0))
        self.create_job(ns, job_body("oom", "sleep 5", backoff=0, env={"STANDIN_OUTCOME": "OOMKilled"}))
        self.create_job(ns, job_body("evict", "sleep 5", backoff=0, env={"STANDIN_OUTCOME": "Evicted"}))
        self.create_job(ns, job_body("admit", "exit 0", backoff=0, env={"STANDIN_OUTCOME": "UnexpectedAdmissionError"}))
        self.create_job(ns, job_body("deadline", "sleep 30", ads=1))
        self.create_job(ns, job_body("retry", "exit 1", backoff=1))
        j = self.wait_job_cond(ns, "ok", "Complete")
        expect(j["status"].get("succeeded") == 1 and j["status"].get("completionTime") and j["status"]["startTime"],
               "complete status %s" % j["status"])
        p = self.pods_of(ns, "ok")
        expect(len(p) == 1, "one pod")
        p = p[0]
        t = p["status"]["containerStatuses"][0]["state"]["terminated"]
        expect(p["status"]["phase"] == "Succeeded" and t["exitCode"] == 0 and t["reason"] == "Completed",
               "pod outcome %s" % t)
        for lab in ("batch.kubernetes.io/job-name", "job-name", "controller-uid", "batch.kubernetes.io/controller-uid",
                    "app"):
            expect(lab in p["metadata"]["labels"], "pod label %s" % lab)
        ref = p["metadata"]["ownerReferences"][0]
        expect(ref["kind"] == "Job" and ref["controller"] is True and ref["uid"] == j["metadata"]["uid"], "owner ref")
        expect(p["metadata"]["name"].startswith("ok-") and len(p["metadata"]["name"]) == 8, "pod name")
        expect(p["spec"]["nodeName"] == "node-a" and p["status"]["hostIP"] == "192.168.7.1" and
               p["status"]["startTime"], "bound to node-a")
        expect(not p["metadata"].get("finalizers"), "tracking finalizer removed after counting")
        log = self.core.read_namespaced_pod_log(p["metadata"]["name"], ns, _request_timeout=10)
        expect(log.strip() == "hello world from %s" % p["metadata"]["name"], "log %r" % log)

        j = self.wait_job_cond(ns, "bad", "Failed")
        c = cond(j, "Failed")
        expect(c["reason"] == "BackoffLimitExceeded" and not j["status"].get("completionTime") and
               j["status"].get("failed") == 1, "failed job %s" % j["status"])
        expect((cond(j, "FailureTarget") or {}).get("status") == "True", "FailureTarget condition")
        t = self.pods_of(ns, "bad")[0]["status"]["containerStatuses"][0]["state"]["terminated"]
        expect(t["exitCode"] == 3 and t["reason"] == "Error", "exit 3 %s" % t)

        j = self.wait_job_cond(ns, "oom", "Failed")
        p = self.pods_of(ns, "oom")[0]
        t = p["status"]["containerStatuses"][0]["state"]["terminated"]
        expect(t["exitCode"] == 137 and t["reason"] == "OOMKilled" and p["status"]["phase"] == "Failed", "oom %s" % t)

        self.wait_job_cond(ns, "evict", "Failed")
        p = self.pods_of(ns, "evict")[0]
        expect(p["status"]["phase"] == "Failed" and p["status"]["reason"] == "Evicted" and
               p["status"]["message"] == "The node was low on resource: memory.", "evicted %s" % p["status"].get("reason"))

        self.wait_job_cond(ns, "admit", "Failed")
        p = self.pods_of(ns, "admit")[0]
        expect(p["status"]["phase"] == "Failed" and p["status"]["reason"] == "UnexpectedAdmissionError",
               "admission %s" % p["status"])

        j = self.wait_job_cond(ns, "deadline", "Failed", timeout=10)
        expect(cond(j, "Failed")["reason"] == "DeadlineExceeded", "deadline %s" % cond(j, "Failed"))
        wait_for(lambda: all(x["status"]["phase"] == "Failed" for x in self.pods_of(ns, "deadline")),
                 what="deadline pod killed")

        j = self.wait_job_cond(ns, "retry", "Failed")
        expect(j["status"].get("failed") == 2 and len(self.pods_of(ns, "retry")) == 2, "backoffLimit 1 -> 2 pods")

    def suspend_resume(self):
        ns = "susp"
        self.create_job(ns, job_body("sr", "sleep 30", grace=5))
        pod = wait_for(lambda: [p for p in self.pods_of(ns, "sr") if p["status"].get("phase") == "Running"],
                       what="running pod")[0]
        j = wait_for(lambda: (lambda j: j if j["status"].get("ready") == 1 and j["status"].get("active") == 1
                              else None)(self.get_job(ns, "sr")), what="status.active/ready")
        expect(j["status"].get("startTime"), "startTime set")
        cs = pod["status"]["containerStatuses"][0]
        expect(cs["ready"] and cs["state"]["running"]["startedAt"], "running container status")
        self.patch("/apis/batch/v1/namespaces/%s/jobs/sr" % ns, {"spec": {"suspend": True}},
                   "application/merge-patch+json")
        j = self.wait_job_cond(ns, "sr", "Suspended")
        c = cond(j, "Suspended")
        expect(c["reason"] == "JobSuspended" and not j["status"].get("startTime"), "suspended %s" % j["status"])
        wait_for(lambda: self.pods_of(ns, "sr") == [], what="pods of the suspended job deleted")
        j = self.get_job(ns, "sr")
        expect(not j["status"].get("failed") and not j["status"].get("active"), "no failure counted %s" % j["status"])
        self.patch("/apis/batch/v1/namespaces/%s/jobs/sr" % ns, {"spec": {"suspend": False}},
                   "application/merge-patch+json")
        j = wait_for(lambda: (lambda j: j if (cond(j, "Suspended") or {}).get("status") == "False" else None)(
            self.get_job(ns, "sr")), what="resumed")
        expect(cond(j, "Suspended")["reason"] == "JobResumed" and j["status"].get("startTime"), "resumed")
        wait_for(lambda: [p for p in self.pods_of(ns, "sr") if p["status"].get("phase") == "Running"],
                 what="new pod after resume")

    def scheduling(self):
        ns = "sched"
        # a foreign pod holds all 4 GPUs of node-a (no command: runs until deleted)
        self.core.create_namespaced_pod(ns, pod_body("holder", limits={"nvidia.com/gpu": "4"},
                                                     node_selector={"tessera.io/pool": "a"}), _request_timeout=10)
        wait_for(lambda: self.get_pod(ns, "holder")["status"].get("phase") == "Running", what="holder running")
        self.create_job(ns, job_body("wants", "exit 0", limits={"nvidia.com/gpu": "1"},
                                     node_selector={"tessera.io/pool": "a"}))
        p = wait_for(lambda: [x for x in self.pods_of(ns, "wants")
                              if (cond(x, "PodScheduled") or {}).get("reason") == "Unschedulable"],
                     what="unschedulable")[0]
        msg = cond(p, "PodScheduled")["message"]
        expect(msg == "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint "
               "{node.kubernetes.io/not-ready: }, 1 node(s) had untolerated taint {tessera.io/dedicated: b}."
               and p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName"), "message %r" % msg)
        self.create_job(ns, job_body("wants-b", "exit 0", limits={"nvidia.com/gpu": "1"},
                                     node_selector={"tessera.io/pool": "nowhere"},
                                     tolerations=[{"operator": "Exists"}]))
        p = wait_for(lambda: [x for x in self.pods_of(ns, "wants-b")
                              if (cond(x, "PodScheduled") or {}).get("reason") == "Unschedulable"],
                     what="unschedulable")[0]
        msg = cond(p, "PodScheduled")["message"]
        expect(msg == "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
               "selector message %r" % msg)
        # too big for any node
        self.core.create_namespaced_pod(ns, pod_body("huge", limits={"nvidia.com/gpu": "9", "cpu": "500m"}),
                                        _request_timeout=10)
        p = wait_for(lambda: (lambda x: x if (cond(x, "PodScheduled") or {}).get("reason") == "Unschedulable"
                              else None)(self.get_pod(ns, "huge")), what="huge unschedulable")
        msg = cond(p, "PodScheduled")["message"]
        expect("1 Insufficient nvidia.com/gpu" in msg and "untolerated taint" in msg, "huge message %r" % msg)
        # freeing the GPUs lets the job pod run
        self.core.delete_namespaced_pod("holder", ns, grace_period_seconds=0, _request_timeout=10)
        self.wait_job_cond(ns, "wants", "Complete")
        # taints / tolerations and MIG resources on node-b
        self.core.create_namespaced_pod(ns, pod_body("mig", limits={"nvidia.com/mig-1g.10gb": "2"}),
                                        _request_timeout=10)
        p = wait_for(lambda: (lambda x: x if (cond(x, "PodScheduled") or {}).get("status") == "False" else None)(
            self.get_pod(ns, "mig")), what="mig pending")
        expect("{tessera.io/dedicated: b}" in cond(p, "PodScheduled")["message"], "taint message")
        self.core.create_namespaced_pod(ns, pod_body("mig2", "exit 0", limits={"nvidia.com/mig-1g.10gb": "2",
                                                                              "cpu": "1500m", "memory": "1Gi"},
                                                     tolerations=[{"key": "tessera.io/dedicated", "operator": "Equal",
                                                                   "value": "b", "effect": "NoSchedule"}]),
                                        _request_timeout=10)
        p = wait_for(lambda: (lambda x: x if x["spec"].get("nodeName") else None)(self.get_pod(ns, "mig2")),
                     what="mig2 bound")
        expect(p["spec"]["nodeName"] == "node-b", "tolerating pod on node-b")
        # node-c is NotReady: its amd.com/gpu is unusable
        self.core.create_namespaced_pod(ns, pod_body("amd", limits={"amd.com/gpu": "1"}), _request_timeout=10)
        p = wait_for(lambda: (lambda x: x if (cond(x, "PodScheduled") or {}).get("status") == "False" else None)(
            self.get_pod(ns, "amd")), what="amd pending")
        expect("node.kubernetes.io/not-ready" in cond(p, "PodScheduled")["message"], "not-ready message")
        # cordon node-a: spec.unschedulable
        self.core.patch_node("node-a", {"spec": {"unschedulable": True}}, _request_timeout=10)
        self.core.create_namespaced_pod(ns, pod_body("cordoned", "exit 0", node_selector={"tessera.io/pool": "a"}),
                                        _request_timeout=10)
        p = wait_for(lambda: (lambda x: x if (cond(x, "PodScheduled") or {}).get("status") == "False" else None)(
            self.get_pod(ns, "cordoned")), what="cordoned pending")
        expect("1 node(s) were unschedulable" in cond(p, "PodScheduled")["message"], "cordon message")
        self.core.patch_node("node-a", {"spec": {"unschedulable": False}}, _request_timeout=10)
        wait_for(lambda: self.get_pod(ns, "cordoned")["status"].get("phase") == "Succeeded", what="uncordoned run")
        # field selectors on pods
        names = [p.metadata.name for p in self.core.list_namespaced_pod(
            ns, field_selector="spec.nodeName=node-b", _request_timeout=10).items]
        expect(names == ["mig2"], "spec.nodeName selector %s" % names)
        names = sorted(p.metadata.name for p in self.core.list_namespaced_pod(
            ns, field_selector="status.phase=Pending", _request_timeout=10).items)
        expect(names[:3] == ["amd", "huge", "mig"] and len(names) == 4 and names[3].startswith("wants-b-"),
               "status.phase selector %s" % names)

    def graceful_delete(self):
        ns = "grace"
        self.core.create_namespaced_pod(ns, pod_body("g1", "trap 'exit 0' TERM; sleep 30 & wait", grace=10),
                                        _request_timeout=10)
        wait_for(lambda: self.get_pod(ns, "g1")["status"].get("phase") == "Running", what="g1 running")
        time.sleep(0.2)
        rv = self.core.list_namespaced_pod(ns, _request_timeout=10).metadata.resource_version
        done = []

        def deleter():
            time.sleep(0.2)
            done.append(data(self.core.delete_namespaced_pod("g1", ns, _preload_content=False,
                                                             _request_timeout=10)))
        t = threading.Thread(target=deleter, daemon=True)
        t.start()
        evs = []
        t0 = time.monotonic()
        for e in kwatch.Watch().stream(self.core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=5,
                                       _request_timeout=10):
            o = e["raw_object"]
            evs.append((e["type"], bool(o["metadata"].get("deletionTimestamp")), o["status"].get("phase")))
            if e["type"] == "DELETED":
                break
        t.join(5)
        expect(done and done[0]["metadata"].get("deletionTimestamp") and
               done[0]["metadata"]["deletionGracePeriodSeconds"] == 10, "DELETE answers the terminating pod")
        expect(evs and evs[0] == ("MODIFIED", True, "Running") and evs[-1][0] == "DELETED", "events %s" % evs)
        expect(time.monotonic() - t0 < 4, "pod ended within about a second")

    def propagation(self):
        ns = "gc"
        for n in ("bg", "fg", "orph", "dflt"):
            self.create_job(ns, job_body(n, "sleep 30", grace=3))
        for n in ("bg", "fg", "orph", "dflt"):
            wait_for(lambda: [p for p in self.pods_of(ns, n) if p["status"].get("phase") == "Running"],
                     what="pod of %s running" % n)
        self.batch.delete_namespaced_job("bg", ns, propagation_policy="Background", _request_timeout=10)
        st, _, _ = api_exc(self.batch.read_namespaced_job, "bg", ns, _request_timeout=10)
        expect(st == 404, "Background: job gone at once")
        wait_for(lambda: self.pods_of(ns, "bg") == [], what="Background: pods deleted")

        self.batch.delete_namespaced_job("fg", ns, propagation_policy="Foreground", _request_timeout=10)
        j = self.get_job(ns, "fg")
        expect(j["metadata"].get("deletionTimestamp") and "foregroundDeletion" in j["metadata"]["finalizers"],
               "Foreground: job kept with finalizer %s" % j["metadata"])
        wait_for(lambda: api_exc(self.batch.read_namespaced_job, "fg", ns, _request_timeout=10)[0] == 404,
                 what="Foreground: job deleted after its pods")
        expect(self.pods_of(ns, "fg") == [], "Foreground: pods gone first")

        self.batch.delete_namespaced_job("orph", ns, propagation_policy="Orphan", _request_timeout=10)
        # raw DELETE without any policy: batch/v1 Jobs orphan by default
        st, _, _ = self.raw.req("DELETE", "/apis/batch/v1/namespaces/%s/jobs/dflt" % ns)
        expect(st == 200, "DELETE -> %s" % st)
        for n in ("orph", "dflt"):
            wait_for(lambda: api_exc(self.batch.read_namespaced_job, n, ns, _request_timeout=10)[0] == 404,
                     what="%s job deleted" % n)
            pods = wait_for(lambda: [p for p in self.pods_of(ns, n) if not p["metadata"].get("ownerReferences")],
                            what="%s pods orphaned" % n)
            expect(pods[0]["status"]["phase"] == "Running" and not pods[0]["metadata"].get("deletionTimestamp"),
                   "orphaned pod keeps running")
        # deletecollection with a label selector cleans up
        self.core.delete_collection_namespaced_pod(ns, label_selector="app=check", grace_period_seconds=0,
                                                   _request_timeout=10)
        wait_for(lambda: self.core.list_namespaced_pod(ns, _request_timeout=10).items == [], what="pods removed")

    def faults(self):
        st, _, _ = self.raw.req("POST", "/_standin/faults", {"status": 429, "count": 1, "path_prefix": "/apis/batch"})
        st, h, body = self.raw.req("GET", "/apis/batch/v1/namespaces/default/jobs")
        expect(st == 429 and h.get("Retry-After") == "1" and body["reason"] == "TooManyRequests", "429 %s %s" % (st, h))
        st, _, _ = self.raw.req("GET", "/api/v1/nodes")
        expect(st == 200, "other prefix unaffected")
        # urllib3 (under the kubernetes client) honours Retry-After on 429 and retries by itself
        self.raw.req("POST", "/_standin/faults", {"status": 429, "count": 1, "path_prefix": "/apis/batch"})
        t = time.monotonic()
        self.batch.list_namespaced_job("default", _request_timeout=10)
        expect(time.monotonic() - t >= 0.9, "python client retried after Retry-After")
        st, _, _ = self.raw.req("GET", "/apis/batch/v1/namespaces/default/jobs")
        expect(st == 200, "faults used up")
        self.raw.req("POST", "/_standin/faults", {"status": 500, "count": 1, "path_prefix": "/api/v1/nodes"})
        self.raw.req("POST", "/_standin/faults", {"status": 503, "count": 1, "path_prefix": "/api/v1/nodes"})
        st1, _, b1 = self.raw.req("GET", "/api/v1/nodes")
        st2, _, b2 = self.raw.req("GET", "/api/v1/nodes")
        st3, _, _ = self.raw.req("GET", "/api/v1/nodes")
        expect((st1, b1["reason"], st2, b2["reason"], st3) == (500, "InternalError", 503, "ServiceUnavailable", 200),
               "500/503 %s %s %s" % (st1, st2, st3))

    def drop_watches(self):
        c = self.raw.conn(timeout=10)
        c.request("GET", "/api/v1/namespaces/default/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=30",
                  headers={"Authorization": "Bearer " + self.token})
        r = c.getresponse()
        expect(r.status == 200 and r.getheader("Transfer-Encoding") == "chunked", "watch response headers")
        out = {}

        def reader():
            try:
                while True:
                    line = r.read1(65536)     # (readline() would hide a truncated chunked stream)
                    if not line:
                        out["end"] = "eof"
                        return
            except Exception as e:
                out["end"] = type(e).__name__
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        wait_for(lambda: self.raw.req("GET", "/_standin/stats")[2]["watches"] >= 1, what="watch open")
        st, _, body = self.raw.req("POST", "/_standin/drop-watches", {})
        expect(st == 200 and body["dropped"] >= 1, "drop %s" % body)
        t.join(5)
        c.close()
        # abrupt: the chunked stream is cut without its terminating chunk
        expect(out.get("end") in ("IncompleteRead", "ProtocolError", "ConnectionResetError", "RemoteDisconnected"),
               "stream end %s" % out)
        wait_for(lambda: self.raw.req("GET", "/_standin/stats")[2]["watches"] == 0, what="watch closed")

    def stats(self):
        st, _, s = self.raw.req("GET", "/_standin/stats")
        expect(st == 200 and s["requests"]["by_method"]["GET"] > 0 and s["requests"]["by_kind"].get("jobs", 0) > 0
               and int(s["resourceVersion"]) > 0 and s["objects"]["nodes"] == 3 and "watches" in s, "stats %s" % s)

    def table(self):
        acc = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io," \
              "application/json"
        st, _, t = self.raw.req("GET", "/api/v1/nodes", headers={"Accept": acc})
        expect(st == 200 and t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1" and
               [c["name"] for c in t["columnDefinitions"]][:3] == ["Name", "Status", "Roles"] and
               len(t["rows"]) == 3 and t["rows"][0]["object"]["kind"] == "PartialObjectMetadata", "table %s" % t)
        expect([r["cells"][1] for r in t["rows"]] == ["Ready", "Ready", "NotReady"], "node status cells")

    # ---- kubectl -----------------------------------------------------------------------------
    def kubeconfig(self, srv, user):
        path = os.path.join(self.work, "kubeconfig-%s-%d" % (user, srv.port))
        cluster = {"server": srv.url}
        if srv.tls:
            cluster["certificate-authority"] = os.path.join(self.work, "ca.crt")
        u = {}
        if user == "token":
            u["token"] = self.token
        elif user == "badtoken":
            u["token"] = "not-a-valid-token"
        elif user == "cert":
            u = {"client-certificate": os.path.join(self.work, "client.crt"),
                 "client-key": os.path.join(self.work, "client.key")}
        cfg = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "standin", "cluster": cluster}],
               "users": [{"name": user, "user": u}],
               "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": user}}],
               "current-context": "standin"}
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def kubectl(self, kc, *args, ok=True):
        env = dict(os.environ, KUBECONFIG=kc, HOME=self.work)
        p = subprocess.run(["kubectl", "--cache-dir", os.path.join(self.work, "kcache"), "--request-timeout=10s"]
                           + list(args), capture_output=True, text=True, timeout=15, env=env)
        if ok and p.returncode != 0:
            raise Failure("kubectl %s -> rc %d: %s" % (" ".join(args), p.returncode, (p.stderr or p.stdout)[-600:]))
        return p

    def kubectl_checks(self, srv, user="token"):
        kc = self.kubeconfig(srv, user)
        ns = "kctl"
        for n, s in (("k1", True), ("k2", True), ("k3", False)):
            self.create_job(ns, job_body(n, "exit 0" if n == "k3" else "sleep 30", suspend=s, grace=2))
        self.create_job(ns, job_body("unlabelled", suspend=True))
        self.patch("/apis/batch/v1/namespaces/%s/jobs/unlabelled" % ns,
                   {"metadata": {"labels": {"tessera.io/job": None}}}, "application/merge-patch+json")
        self.wait_job_cond(ns, "k3", "Complete")
        out = self.kubectl(kc, "get", "jobs", "-n", ns, "-l", "tessera.io/job").stdout
        lines = out.strip().splitlines()
        expect(lines[0].split()[:5] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"], "header %r" % lines[0])
        rows = {l.split()[0]: l.split() for l in lines[1:]}
        expect(sorted(rows) == ["k1", "k2", "k3"] and rows["k1"][1] == "Suspended" and rows["k3"][1] == "Complete"
               and rows["k3"][2] == "1/1", "rows %s" % rows)
        out = self.kubectl(kc, "get", "jobs", "-n", ns, "-l", "tessera.io/job", "-o", "json").stdout
        expect(sorted(i["metadata"]["name"] for i in json.loads(out)["items"]) == ["k1", "k2", "k3"], "-o json")
        out = self.kubectl(kc, "get", "nodes").stdout
        expect(out.split()[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"] and "node-a" in out and
               "NotReady" in out, "get nodes %r" % out)
        out = self.kubectl(kc, "get", "nodes", "-o", "wide").stdout
        expect("192.168.7.1" in out, "nodes -o wide")
        out = self.kubectl(kc, "patch", "job", "k1", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}').stdout
        expect("job.batch/k1 patched" in out, "patch output %r" % out)
        expect(self.get_job(ns, "k1")["spec"]["suspend"] is False, "patched")
        pod = wait_for(lambda: [p for p in self.pods_of(ns, "k1") if p["status"].get("phase") == "Running"],
                       what="k1 running")[0]
        out = self.kubectl(kc, "get", "pods", "-n", ns).stdout
        expect(pod["metadata"]["name"] in out and "Running" in out and "1/1" in out, "get pods %r" % out)
        out = self.kubectl(kc, "get", "pods", "-n", ns, "-o", "wide").stdout
        expect("node-a" in out, "pods -o wide")
        out = self.kubectl(kc, "patch", "job", "k2", "-n", ns, "-p",
                           '{"metadata":{"annotations":{"via":"kubectl"}}}').stdout
        expect("patched" in out and self.get_job(ns, "k2")["metadata"]["annotations"]["via"] == "kubectl",
               "strategic patch via kubectl")
        out = self.kubectl(kc, "delete", "job", "k1", "-n", ns).stdout
        expect('job.batch "k1" deleted' in out, "delete output %r" % out)
        expect(api_exc(self.batch.read_namespaced_job, "k1", ns, _request_timeout=10)[0] == 404, "k1 gone")
        wait_for(lambda: self.pods_of(ns, "k1") == [], what="k1 pods deleted (kubectl uses Background)")
        p = self.kubectl(kc, "get", "job", "nope", "-n", ns, ok=False)
        expect(p.returncode != 0 and 'jobs.batch "nope" not found' in p.stderr, "not found %r" % p.stderr)
        out = self.kubectl(kc, "get", "pods").stdout + self.kubectl(kc, "get", "pods").stderr
        expect("No resources found in default namespace" in out, "get pods in default %r" % out)
        out = self.kubectl(kc, "get", "jobs", "-A", "--chunk-size=2", "-l", "tessera.io/job in (k2,k3)").stdout
        expect(len(out.strip().splitlines()) == 3, "chunked kubectl list %r" % out)
        if self.srv.tls:
            out = self.kubectl(self.kubeconfig(srv, "cert"), "get", "nodes", "-o", "name").stdout
            expect(out.split() == ["node/node-a", "node/node-b", "node/node-c"], "client cert kubectl %r" % out)
            p = self.kubectl(self.kubeconfig(srv, "badtoken"), "get", "nodes", ok=False)
            expect(p.returncode != 0 and "Unauthorized" in p.stderr, "kubectl with a wrong token %r" % p.stderr)
        cj = os.path.join(self.work, "cj.json")
        with open(cj, "w") as f:
            json.dump(job_body("fromfile", "exit 0", suspend=True), f)
        out = self.kubectl(kc, "create", "-n", ns, "-f", cj, "--validate=false").stdout
        expect("job.batch/fromfile created" in out, "kubectl create %r" % out)

    # ---- persistence ------------------------------------------------------------------------
    def persistence(self, srv):
        ns = "persist"
        self.create_job(ns, job_body("keep", suspend=True))
        self.create_job(ns, job_body("longrun", "sleep 30"))
        wait_for(lambda: [p for p in self.pods_of(ns, "longrun") if p["status"].get("phase") == "Running"],
                 what="longrun running")
        old_rv = self.batch.list_namespaced_job(ns, _request_timeout=10).metadata.resource_version
        uid = self.get_job(ns, "keep")["metadata"]["uid"]
        t = time.monotonic()
        srv.term()
        expect(srv.proc.returncode == 0 and time.monotonic() - t < 3, "SIGTERM exits fast with 0 (rc %s)"
               % srv.proc.returncode)
        expect(os.path.exists(srv.state_file), "state file written")
        srv.start()
        self.bind(srv)
        j = self.get_job(ns, "keep")
        expect(j["metadata"]["uid"] == uid, "object kept across restart")
        rv = self.batch.list_namespaced_job(ns, _request_timeout=10).metadata.resource_version
        expect(int(rv) >= int(old_rv), "resourceVersion counter kept (%s -> %s)" % (old_rv, rv))
        try:
            for _ in kwatch.Watch().stream(self.batch.list_namespaced_job, ns, resource_version=str(int(old_rv) - 1),
                                           timeout_seconds=2, _request_timeout=10):
                pass
            raise Failure("old resourceVersion accepted after restart")
        except ApiException as e:
            expect(e.status == 410, "410 after restart (%s)" % e.status)
        wait_for(lambda: [p for p in self.pods_of(ns, "longrun") if p["status"].get("phase") == "Running"],
                 what="bound pod re-run after restart")
        st, _, _ = self.raw.req("POST", "/_standin/reset", {})
        expect(st == 200, "reset")
        st, _, s = self.raw.req("GET", "/_standin/stats")
        expect(s["objects"]["jobs"] == 0 and s["objects"]["pods"] == 0 and s["objects"]["nodes"] == 0,
               "reset deletes every object %s" % s["objects"])

    # ---- plain HTTP server ------------------------------------------------------------------
    def plain(self, srv):
        st, _, body = self.raw.req("GET", "/api/v1/nodes", token=False)
        expect(st == 200, "no auth configured -> %s" % st)
        ns = "ttl"
        for i in range(6):
            self.create_job(ns, job_body("t%d" % i, suspend=True))
        p1 = self.batch.list_namespaced_job(ns, limit=2, _request_timeout=10)
        p2 = self.batch.list_namespaced_job(ns, limit=2, _continue=p1.metadata._continue, _request_timeout=10)
        expect(len(p2.items) == 2, "second page within the TTL")
        time.sleep(1.3)
        st, body, _ = api_exc(self.batch.list_namespaced_job, ns, limit=2, _continue=p2.metadata._continue,
                              _request_timeout=10)
        expect(st == 410 and body["reason"] == "Expired", "continue after --continue-ttl -> %s" % st)
        # bounded history (--history 20): an old resourceVersion expires without a compaction
        rv = self.batch.list_namespaced_job(ns, _request_timeout=10).metadata.resource_version
        for i in range(25):
            self.patch("/apis/batch/v1/namespaces/%s/jobs/t0" % ns, {"metadata": {"labels": {"n": str(i)}}},
                       "application/merge-patch+json")
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        c.request("GET", "/apis/batch/v1/namespaces/%s/jobs?watch=1&resourceVersion=%s" % (ns, rv))
        lines = [json.loads(l) for l in c.getresponse().read().splitlines() if l.strip()]
        c.close()
        expect(len(lines) == 1 and lines[0]["object"]["code"] == 410, "history bound %s" % lines[:1])
        kc = self.kubeconfig(srv, "none")
        out = self.kubectl(kc, "get", "jobs", "-n", ns, "-l", "tessera.io/job").stdout
        expect(len(out.strip().splitlines()) == 7, "kubectl over plain HTTP %r" % out)

    # ---- performance -------------------------------------------------------------------------
    def perf(self, srv, n):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        body = job_body("x", suspend=True)
        t = time.monotonic()
        for i in range(n):
            body["metadata"]["name"] = "perf-%05d" % i
            c.request("POST", "/apis/batch/v1/namespaces/perf/jobs", json.dumps(body),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            expect(r.status == 201, "create %d -> %s" % (i, r.status))
        t_create = time.monotonic() - t
        t = time.monotonic()
        names, cont, pages = [], "", 0
        while True:
            c.request("GET", "/apis/batch/v1/namespaces/perf/jobs?limit=500" +
                      ("&continue=" + urllib.parse.quote(cont) if cont else ""))
            r = c.getresponse()
            lst = json.loads(r.read())
            expect(r.status == 200, "list -> %s" % r.status)
            names += [i["metadata"]["name"] for i in lst["items"]]
            pages += 1
            cont = lst["metadata"].get("continue")
            if not cont:
                break
        t_raw = time.monotonic() - t
        expect(len(names) == n and len(set(names)) == n, "listed %d of %d" % (len(set(names)), n))
        api, batch, _ = k8s_client(srv)
        t = time.monotonic()
        total, cont = 0, None
        while True:
            kw = {"_continue": cont} if cont else {}
            lst = batch.list_namespaced_job("perf", limit=500, _request_timeout=60, **kw)
            total += len(lst.items)
            cont = lst.metadata._continue
            if not cont:
                break
        t_client = time.monotonic() - t
        expect(total == n, "python client listed %d" % total)
        # the controller must have set Suspended=True on every job (it only looks at changed Jobs)
        wait_for(lambda: all(
            any(x.get("type") == "Suspended" for x in (i.get("status") or {}).get("conditions") or [])
            for i in json.loads(self.raw_get(srv, "/apis/batch/v1/namespaces/perf/jobs?limit=%d" % n))["items"][-50:]),
            timeout=15, what="Suspended condition on the last jobs")
        c.close()
        print("     perf: %d Job creations %.2fs (%.0f/s); chunked list limit=500: %d pages, http.client %.2fs, "
              "kubernetes client %.2fs" % (n, t_create, n / t_create, pages, t_raw, t_client), flush=True)

    @staticmethod
    def raw_get(srv, path):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        try:
            c.request("GET", path)
            return c.getresponse().read()
        finally:
            c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--perf-jobs", type=int, default=2000)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    opts = ap.parse_args()
    global BUDGET
    if opts.perf_jobs > 3000:
        BUDGET += opts.perf_jobs / 200.0
    work = tempfile.mkdtemp(prefix="check-standin-")
    res = Results(opts.verbose, opts.only)
    chk = Checks(work, res, opts)

    def watchdog():
        print("FAIL watchdog: the checks did not finish within %.0fs" % (BUDGET + 2), flush=True)
        for s in chk.servers:
            s.kill()
        shutil.rmtree(work, ignore_errors=True)
        os._exit(1)
    dog = threading.Timer(BUDGET + 2, watchdog)
    dog.daemon = True
    dog.start()
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    try:
        if shutil.which("kubectl") is None:
            res.items.append(("kubectl on PATH", False))
            print("FAIL kubectl on PATH")
        res.run("pki", make_pki, work, setup=True)
        tls = res.run("start TLS stand-in (token + client CA + nodes + state)",
                      lambda: chk.start("tls", ["--nodes", os.path.join(work, "nodes.yaml"), "--tick-ms", "50"],
                                        tls=True, token_file=chk.token_file, client_ca=True, state=True),
                      setup=True)
        plain = res.run("start plain stand-in (no auth, history 20, continue-ttl 1)",
                        lambda: chk.start("plain", ["--history", "20", "--continue-ttl", "1", "--tick-ms", "50",
                                                    "--nodes", os.path.join(work, "nodes.yaml")]), setup=True)
        perf = res.run("start stand-in for the performance check", lambda: chk.start("perf", []), setup=True)
        if tls:
            chk.bind(tls)
            for name, fn in [("discovery", chk.discovery), ("auth: token, rotation, client cert", chk.auth),
                             ("nodes from --nodes", chk.nodes), ("create/get/409/generateName", chk.create_get),
                             ("label and field selectors", chk.selectors), ("list limit/continue/410", chk.chunks),
                             ("watch with bookmarks and selectors", chk.watch),
                             ("watch 410 Expired ERROR event", chk.watch_expired),
                             ("patch merge/strategic/json, 415, 400", chk.patches),
                             ("409 on stale resourceVersion", chk.conflicts),
                             ("validation and mutable scheduling directives", chk.validation),
                             ("job controller outcomes + kubelet", chk.job_outcomes),
                             ("suspend and resume", chk.suspend_resume),
                             ("scheduler: resources, selectors, taints, cordon", chk.scheduling),
                             ("graceful pod deletion seen by a watch", chk.graceful_delete),
                             ("delete propagation Background/Foreground/Orphan", chk.propagation),
                             ("faults 429/500/503", chk.faults), ("drop-watches", chk.drop_watches),
                             ("DRA: claims, templates, slices with counters, allocator", chk.dra),
                             ("server-side Table", chk.table), ("stats", chk.stats)]:
                res.run(name, fn)
            res.run("kubectl (TLS, token and client cert)", chk.kubectl_checks, tls)
            res.run("persistence across SIGTERM/restart, reset", chk.persistence, tls)
        if plain:
            chk.bind(plain)
            res.run("plain HTTP: no auth, continue TTL, bounded history, kubectl", chk.plain, plain)
        if perf and opts.perf_jobs > 0:
            chk.bind(perf)
            res.run("performance: %d suspended Jobs, chunked list" % opts.perf_jobs, chk.perf, perf, opts.perf_jobs)
        for s in chk.servers:
            if s.proc and s.proc.poll() is not None and s.proc.returncode not in (0, None) and s.name != "tls":
                res.items.append(("server %s alive" % s.name, False))
                print("FAIL server %s died: %s" % (s.name, s.tail()))
    finally:
        for s in chk.servers:
            s.term(3)
        errs = []
        for s in chk.servers:
            t = s.tail()
            if "Traceback" in t:
                errs.append("%s:\n%s" % (s.name, t))
        if errs:
            res.items.append(("no tracebacks in stand-in logs", False))
            print("FAIL no tracebacks in stand-in logs:\n" + "\n".join(errs))
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("work directory:", work)
    dog.cancel()
    failed = [n for n, ok in res.items if not ok]
    print("%d checks, %d failed, %.1fs" % (len(res.items), len(failed), time.monotonic() - T0))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
