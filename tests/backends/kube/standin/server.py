"""HTTP front end of the stand-in: routing, authentication, content negotiation, REST verbs,
watch streams, fault injection and the command line."""
import argparse
import collections
import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from .controllers import Controllers, delete_object
from . import dra
from .kinds import API_GROUPS, KINDS, GROUP_KINDS, api_resource_list
from .kubelet import Kubelet
from .patch import PATCH_TYPES
from .selectors import FieldSelector, LabelSelector
from .store import Expired, Store, obj_key
from .tables import to_table
from .util import ApiError, bad_request, clone, conflict, invalid, not_found, now_ts, rand_suffix, status_obj
from .validation import (check_body_meta, finish_job_create, prepare_job_create, prepare_node_create,
                         prepare_pod_create, validate_job_update, validate_node_update, validate_pod_update)

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-standin", "gitCommit": "0" * 40,
           "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.0",
           "compiler": "gc", "platform": "linux/amd64"}
SERVER_MANAGED = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "selfLink")


class Faults:
    """/_standin/faults and /_standin/conflict."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []
        self.conflicts = 0

    def add(self, status, count, prefix):
        with self.lock:
            self.rules.append({"status": int(status), "count": int(count), "path_prefix": prefix or "/"})

    def check(self, path):
        with self.lock:
            for r in self.rules:
                if r["count"] > 0 and path.startswith(r["path_prefix"]):
                    r["count"] -= 1
                    status = r["status"]
                    self.rules = [x for x in self.rules if x["count"] > 0]
                    break
            else:
                return
        if status == 429:
            raise ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                           {"retryAfterSeconds": 1}, headers={"Retry-After": "1"})
        if status == 500:
            raise ApiError(500, "InternalError", "Internal error occurred: injected fault (stand-in)",
                           {"causes": [{"message": "injected fault (stand-in)"}]})
        if status == 503:
            raise ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request")
        if status == 504:
            raise ApiError(504, "Timeout", "the server was unable to return a response in the time allotted")
        raise ApiError(status, "InternalError", "injected fault %d (stand-in)" % status)

    def take_conflict(self):
        with self.lock:
            if self.conflicts > 0:
                self.conflicts -= 1
                return True
            return False


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_method, self.by_kind, self.by_method_kind = {}, {}, {}
        self.total = 0

    def count(self, method, kind):
        with self.lock:
            self.total += 1
            self.by_method[method] = self.by_method.get(method, 0) + 1
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
            mk = "%s %s" % (method, kind)
            self.by_method_kind[mk] = self.by_method_kind.get(mk, 0) + 1


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, store, controllers, kubelet, opts):
        self.store, self.controllers, self.kubelet, self.opts = store, controllers, kubelet, opts
        self.faults, self.stats = Faults(), Stats()
        self.ssl_ctx = None
        self.watch_streams = set()
        self.watch_lock = threading.Lock()
        self.watch_delay = {}  # plural -> seconds: /_standin/watch-delay
        super().__init__(addr, Handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        if self.ssl_ctx is not None:
            sock = self.ssl_ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, socket.timeout, OSError)):
            return
        super().handle_error(request, client_address)


def parse_resource_path(path):
    """-> (plural, namespace, name, subresource, watch) or None."""
    segs = [s for s in path.split("/") if s]
    if len(segs) >= 2 and segs[0] == "api" and segs[1] == "v1":
        group, rest = "", segs[2:]
    elif len(segs) >= 3 and segs[0] == "apis" and API_GROUPS.get(segs[1]) == segs[2]:
        group, rest = segs[1], segs[3:]
    else:
        return None
    watch = False
    if rest and rest[0] == "watch":          # deprecated /watch/ path prefix
        watch, rest = True, rest[1:]
    if not rest:
        return None
    kinds = GROUP_KINDS[group]
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] in kinds and KINDS[rest[2]].namespaced:
        ns, plural, rest = rest[1], rest[2], rest[3:]
    else:
        ns, plural, rest = None, rest[0], rest[1:]
        if plural not in kinds:
            return None
    if len(rest) > 2:
        return None
    name = rest[0] if rest else None
    sub = rest[1] if len(rest) > 1 else None
    return plural, ns, name, sub, watch


def _strip_tv(o):
    return {k: v for k, v in o.items() if k not in ("kind", "apiVersion")}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "kube-standin/1.32"
    sys_version = ""
    timeout = 600

    def setup(self):
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()

    def log_message(self, fmt, *args):
        if self.server.opts.verbose:
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    # ---- plumbing ----------------------------------------------------------------------------
    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            parts = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
            return b"".join(parts)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def send_bytes(self, code, data, ctype="application/json", headers=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_json(self, code, obj, headers=None):
        self.send_bytes(code, json.dumps(obj, separators=(",", ":")).encode(), headers=headers)

    def json_body(self, body, allow_empty=False):
        if not body.strip():
            if allow_empty:
                return None
            raise bad_request("the body of the request was in an unknown format - no body")
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise bad_request("error decoding request body: json parse error: %s" % e)

    def wants_table(self):
        # API concepts: "Receiving resources as Tables" (Accept: application/json;as=Table;v=v1;g=meta.k8s.io)
        acc = self.headers.get("Accept") or ""
        for part in acc.split(","):
            p = part.replace(" ", "")
            if "as=Table" in p and "g=meta.k8s.io" in p and ("v=v1;" in p + ";" or "v=v1beta1" in p):
                return "v1beta1" if "v=v1beta1" in p and "v=v1;" not in p + ";" else "v1"
        return None

    def authenticated(self):
        # "Authenticating": Static Token File (Bearer tokens) and X509 client certificates.
        srv = self.server
        if not srv.opts.token_file and not srv.opts.client_ca:
            return True
        if srv.opts.client_ca and isinstance(self.connection, ssl.SSLSocket):
            try:
                if self.connection.getpeercert():
                    return True
            except (ValueError, ssl.SSLError):
                pass
        auth = self.headers.get("Authorization") or ""
        if srv.opts.token_file and auth[:7].lower() == "bearer ":
            tok = auth[7:].strip()
            try:
                with open(srv.opts.token_file) as f:   # re-read on every request: token rotation
                    tokens = {l.strip() for l in f if l.strip()}
            except OSError:
                tokens = set()
            return bool(tok) and tok in tokens
        return False

    def dispatch(self, method):
        # API concepts: "Standard API terminology" (URL layout) and "Responses" (Status objects on error).
        url = urlsplit(self.path)
        path = url.path
        q = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        r = parse_resource_path(path)
        kind = "standin" if path.startswith("/_standin/") else (r[0] if r else (
            "discovery" if path.split("/")[1:2] in (["api"], ["apis"], ["version"], ["openapi"]) else "other"))
        self.server.stats.count(method, kind)
        try:
            body = self.read_body()
            if path.startswith("/_standin/"):
                return self.control(method, path, body)
            if not self.authenticated():
                raise ApiError(401, "Unauthorized", "Unauthorized")
            self.server.faults.check(path)
            if r is None:
                return self.discovery(method, path)
            return self.resource(method, r, q, body)
        except ApiError as e:
            self.send_json(e.code, e.body(), e.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            try:
                self.send_json(500, status_obj(500, "InternalError", "Internal error occurred: %s" % e))
            except OSError:
                self.close_connection = True

    # ---- discovery ("API discovery": legacy unaggregated documents) ---------------------------
    def discovery(self, method, path):
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        p = path.rstrip("/") or "/"
        if p == "/version":
            return self.send_json(200, VERSION)
        if p in ("/healthz", "/livez", "/readyz"):
            return self.send_bytes(200, b"ok", "text/plain; charset=utf-8")
        if p == "/api":
            host = "%s:%d" % self.server.server_address[:2]
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": host}]})
        if p == "/api/v1":
            return self.send_json(200, api_resource_list(""))
        groups = {}
        for name, version in API_GROUPS.items():
            gv = {"groupVersion": "%s/%s" % (name, version), "version": version}
            groups[name] = {"name": name, "versions": [gv], "preferredVersion": gv}
        if p == "/apis":
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": list(groups.values())})
        for name, version in API_GROUPS.items():
            if p == "/apis/" + name:
                return self.send_json(200, dict(groups[name], kind="APIGroup", apiVersion="v1"))
            if p == "/apis/%s/%s" % (name, version):
                return self.send_json(200, api_resource_list(name))
        # /openapi/v2, /openapi/v3 and everything else: 404 like an unknown path.
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # ---- control endpoints -------------------------------------------------------------------
    def control(self, method, path, body):
        # Not a Kubernetes API: the stand-in's test controls (faults, compaction, stats, reset).
        # Fault replies follow "API Priority and Fairness" (429 + Retry-After) and "Responses" (500/503).
        srv, store = self.server, self.server.store
        args = self.json_body(body, allow_empty=True) or {}
        what = path[len("/_standin/"):].strip("/")
        if what == "faults" and method == "POST":
            srv.faults.add(args.get("status", 500), args.get("count", 1), args.get("path_prefix", "/"))
            return self.send_json(200, {"ok": True, "faults": srv.faults.rules})
        if what == "faults" and method == "GET":
            return self.send_json(200, {"faults": srv.faults.rules, "conflicts": srv.faults.conflicts})
        if what == "faults" and method == "DELETE":
            with srv.faults.lock:
                srv.faults.rules, srv.faults.conflicts = [], 0
            return self.send_json(200, {"ok": True})
        if what == "conflict" and method == "POST":
            with srv.faults.lock:
                srv.faults.conflicts += int(args.get("count", 1))
            return self.send_json(200, {"ok": True, "conflicts": srv.faults.conflicts})
        if what == "drop-watches" and method == "POST":
            ws = store.all_watchers()
            for w in ws:
                w.dropped = True
                w.wake()
            with srv.watch_lock:
                for conn in list(srv.watch_streams):
                    try:
                        conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
            return self.send_json(200, {"ok": True, "dropped": len(ws)})
        if what == "watch-delay" and method == "POST":
            # A lagging watch (a loaded API server or client): events of `plural` reach watch
            # streams `seconds` late, in order; lists and gets are not delayed.
            try:
                plural, seconds = args.get("plural", "pods"), float(args.get("seconds", 0))
            except (TypeError, ValueError):
                raise bad_request("watch-delay: seconds must be a number")
            if plural not in KINDS:
                raise bad_request("watch-delay: unknown plural %r" % plural)
            srv.watch_delay[plural] = max(0.0, seconds)
            return self.send_json(200, {"ok": True, "watch_delay": srv.watch_delay})
        if what == "compact" and method == "POST":
            store.compact()
            return self.send_json(200, {"ok": True, "resourceVersion": str(store.rv)})
        if what == "stats" and method == "GET":
            with store.lock:
                objs = {p: len(store.objs[p]) for p in KINDS}
                rv = store.rv
                watches = sum(len(s) for s in store.watchers.values())
            with srv.stats.lock:
                return self.send_json(200, {"requests": {"total": srv.stats.total, "by_method": srv.stats.by_method,
                                                         "by_kind": srv.stats.by_kind,
                                                         "by_method_kind": srv.stats.by_method_kind},
                                            "resourceVersion": str(rv), "watches": watches, "objects": objs,
                                            "running_pods": len(srv.kubelet.workers)})
        if what == "reset" and method == "POST":
            self.reset(bool(args.get("keep_nodes")))
            return self.send_json(200, {"ok": True})
        if what == "save" and method == "POST":
            save_state(srv)
            return self.send_json(200, {"ok": True})
        if what == "health":
            return self.send_bytes(200, b"ok", "text/plain")
        raise ApiError(404, "NotFound", "unknown stand-in control endpoint %s %s" % (method, path))

    def reset(self, keep_nodes):
        srv, store = self.server, self.server.store
        with srv.faults.lock:
            srv.faults.rules, srv.faults.conflicts = [], 0
        srv.watch_delay.clear()
        with store.lock:
            for plural in ("jobs", "pods", "resourceclaims", "resourceclaimtemplates", "namespaces", "nodes",
                           "resourceslices", "deviceclasses"):
                if plural in ("nodes", "resourceslices", "deviceclasses") and keep_nodes:
                    continue
                for key in list(store.objs[plural]):
                    store.remove(plural, key)
            srv.controllers.suspend_killed.clear()
            ensure_namespace(store, "default")

    # ---- resources ---------------------------------------------------------------------------
    def resource(self, method, r, q, body):
        # API concepts: "Resource URIs" and "API verbs" (get/list/watch/create/update/patch/delete/
        # deletecollection) incl. the deprecated /watch/ prefix; "Subresources" (status, log, binding).
        plural, ns, name, sub, watch = r
        kinfo = KINDS[plural]
        if sub is not None and sub not in kinfo.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if name is not None and not name:
            raise bad_request("resource name may not be empty")
        key = obj_key(ns, name) if name is not None else None
        if kinfo.namespaced and name is not None and ns is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if method == "GET":
            if name is None or watch:
                if watch or q.get("watch") in ("true", "1", "True"):
                    return self.watch(plural, kinfo, ns, q, name)
                return self.list(plural, kinfo, ns, q)
            if sub == "log":
                return self.pod_log(kinfo, key, name, q)
            if sub == "binding":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                               "resource")
            obj = self.server.store.get(plural, key)
            if obj is None:
                raise not_found(kinfo, name)
            return self.send_object(200, plural, kinfo, obj)
        if method == "POST":
            if name is None:
                return self.create(plural, kinfo, ns, body, q)
            if sub == "binding":
                return self.bind(kinfo, key, ns, name, body)
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if name is None and method == "DELETE":
            return self.delete_collection(plural, kinfo, ns, q, body)
        if name is None or sub in ("log", "binding"):
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if method == "PUT":
            return self.replace(plural, kinfo, key, ns, name, body, sub, q)
        if method == "PATCH":
            return self.patch(plural, kinfo, key, ns, name, body, sub, q)
        if method == "DELETE":
            return self.delete(plural, kinfo, key, name, q, body)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def send_object(self, code, plural, kinfo, obj):
        # API concepts: "Receiving resources as Tables" for single objects too.
        tv = self.wants_table()
        if tv:
            t = to_table(plural, kinfo, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]},
                         self.query_include())
            t["apiVersion"] = "meta.k8s.io/" + tv
            return self.send_json(code, t)
        return self.send_json(code, obj)

    def query_include(self):
        q = parse_qs(urlsplit(self.path).query)
        return (q.get("includeObject") or ["Metadata"])[0]

    def dry_run(self, q):
        return q.get("dryRun") == "All"

    # API concepts: "Retrieving large results sets in chunks" (limit/continue, remainingItemCount),
    # "Resource versions" (list metadata.resourceVersion) and "Labels and Selectors"/"Field Selectors".
    def list(self, plural, kinfo, ns, q):
        lsel = LabelSelector.parse(q.get("labelSelector"))
        fsel = FieldSelector.parse(plural, q.get("fieldSelector"))
        try:
            limit = max(0, int(q.get("limit") or 0))
        except ValueError:
            raise bad_request('invalid value for limit: "%s"' % q.get("limit"))
        cont = q.get("continue") or None
        if cont and q.get("resourceVersion") not in (None, ""):
            raise bad_request("specifying resource version is not allowed when using continue")
        trivial = lsel.empty() and fsel.empty()
        if trivial:
            match = lambda o: True
        else:
            match = lambda o: lsel.matches(o["metadata"].get("labels")) and fsel.matches(o)
        items, rv, token, remaining = self.server.store.list(plural, ns, match, trivial, limit, cont)
        meta = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        tv = self.wants_table()
        if tv:
            t = to_table(plural, kinfo, items, meta, self.query_include(), columns=not cont)
            t["apiVersion"] = "meta.k8s.io/" + tv
            return self.send_json(200, t)
        # Items of a typed list carry no kind/apiVersion, as with the real server.
        return self.send_json(200, {"kind": kinfo.kind + "List", "apiVersion": kinfo.api_version, "metadata": meta,
                                    "items": [_strip_tv(o) for o in items]})

    # API concepts: "Efficient detection of changes" (watch, resourceVersion, 410 Gone ERROR event,
    # "Watch bookmarks", timeoutSeconds) and "Watch" semantics for selectors (objects entering or
    # leaving the selection are sent as ADDED / DELETED).
    def watch(self, plural, kinfo, ns, q, name=None):
        srv, store = self.server, self.server.store
        lsel = LabelSelector.parse(q.get("labelSelector"))
        fs = q.get("fieldSelector") or ""
        if name:
            fs = ("metadata.name=%s," % name) + fs if fs else "metadata.name=%s" % name
        fsel = FieldSelector.parse(plural, fs)
        try:
            timeout = float(q.get("timeoutSeconds") or 1800)
        except ValueError:
            raise bad_request("invalid timeoutSeconds")
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1", "True")
        trivial = lsel.empty() and fsel.empty()
        match = (lambda o: True) if trivial else (
            lambda o: lsel.matches(o["metadata"].get("labels")) and fsel.matches(o))
        tv = self.wants_table()
        include = self.query_include()
        try:
            w, initial = store.start_watch(plural, ns, q.get("resourceVersion"))
            expired = None
        except Expired as e:
            w, initial, expired = None, [], e
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        conn = self.connection
        if expired is not None:
            st = status_obj(410, "Expired", "too old resource version: %d (%d)" % (expired.rv, expired.oldest))
            self._chunk(json.dumps({"type": "ERROR", "object": st}).encode() + b"\n")
            self._chunk(b"")
            return
        with srv.watch_lock:
            srv.watch_streams.add(conn)

        def translate(ev):
            _, etype, obj, prev = ev
            if trivial:
                return etype, obj
            now_m = match(obj)
            if etype == "MODIFIED" and prev is not None:
                was = match(prev)
                if now_m and was:
                    return "MODIFIED", obj
                if now_m:
                    return "ADDED", obj
                if was:
                    return "DELETED", obj
                return None
            return (etype, obj) if now_m else None

        def send_event(etype, obj):
            if tv:
                t = to_table(plural, kinfo, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]}, include,
                             columns=False)
                t["apiVersion"] = "meta.k8s.io/" + tv
                obj = t
            self._chunk(json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() + b"\n")

        held = collections.deque()  # (due, event): /_standin/watch-delay

        def bookmark():
            with store.lock:
                if held or not w.q.empty():
                    return False
                rv = store.rv
            self._chunk(json.dumps({"type": "BOOKMARK", "object": {
                "kind": kinfo.kind, "apiVersion": kinfo.api_version,
                "metadata": {"resourceVersion": str(rv), "creationTimestamp": None}}}).encode() + b"\n")
            return True

        deadline = time.monotonic() + timeout
        clean = True
        try:
            for ev in initial:
                t = translate(ev)
                if t:
                    send_event(*t)
            last_sent = time.monotonic()
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                if w.dropped or w.overflow:
                    clean = not w.dropped
                    break
                if held and held[0][0] <= now:
                    ev = held.popleft()[1]
                else:
                    wait = min(0.25, max(0.01, deadline - now))
                    if held:
                        wait = max(0.01, min(wait, held[0][0] - now))
                    try:
                        ev = w.q.get(timeout=wait)
                    except Exception:
                        ev = None
                    delay = srv.watch_delay.get(plural, 0)
                    if ev is not None and (delay > 0 or held):
                        held.append((time.monotonic() + delay, ev))
                        continue
                if ev is not None:
                    t = translate(ev)
                    if t:
                        send_event(*t)
                        last_sent = time.monotonic()
                    continue
                if w.dropped:
                    clean = False
                    break
                if bookmarks and time.monotonic() - last_sent >= 1.0:
                    if bookmark():
                        last_sent = time.monotonic()
                if self._client_gone(conn):
                    clean = False
                    break
            if clean and bookmarks and not w.overflow:
                bookmark()
        except (BrokenPipeError, ConnectionResetError, OSError):
            clean = False
        finally:
            store.stop_watch(w)
            with srv.watch_lock:
                srv.watch_streams.discard(conn)
        if clean:
            try:
                self._chunk(b"")
            except OSError:
                self.close_connection = True
        else:
            self.close_connection = True
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    @staticmethod
    def _client_gone(conn):
        import select
        try:
            r, _, _ = select.select([conn], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(r)     # a watching client sends nothing; readable means EOF/close_notify

    # "Pod Lifecycle": container logs (pods/log subresource)
    def pod_log(self, kinfo, key, name, q):
        pod = self.server.store.get("pods", key)
        if pod is None:
            raise not_found(kinfo, name)
        conts = [c["name"] for c in pod["spec"].get("containers") or []] + \
                [c["name"] for c in pod["spec"].get("initContainers") or []]
        c = q.get("container")
        if not c and len(pod["spec"].get("containers") or []) > 1:
            raise bad_request("a container name must be specified for pod %s, choose one of: [%s]"
                              % (name, " ".join(conts)))
        if c and c not in conts:
            raise bad_request("container %s is not valid for pod %s" % (c, name))
        data, cname = self.server.kubelet.log_text(pod, c)
        if data is None:
            raise bad_request('container "%s" in pod "%s" is waiting to start: ContainerCreating' % (cname, name))
        if q.get("tailLines"):
            try:
                n = int(q["tailLines"])
                data = b"".join(data.splitlines(True)[-n:]) if n > 0 else b""
            except ValueError:
                pass
        return self.send_bytes(200, data, "text/plain")

    # "Pods": binding subresource (what a scheduler calls)
    def bind(self, kinfo, key, ns, name, body):
        b = self.json_body(body)
        target = (b.get("target") or {}).get("name") if isinstance(b, dict) else None
        if not target:
            raise invalid(KINDS["pods"], name, [("target.name", "FieldValueRequired", "Required value")])
        store = self.server.store
        with store.lock:
            pod = store.get("pods", key)
            if pod is None:
                raise not_found(kinfo, name)
            if pod["spec"].get("nodeName"):
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on pods/binding "%s": pod %s is '
                               'already assigned to node "%s"' % (name, name, pod["spec"]["nodeName"]))

            def f(p):
                p["spec"]["nodeName"] = target
                return p
            store.mutate("pods", key, f)
        return self.send_json(201, status_obj(201, "", "", status="Success"))

    # API concepts: "Create" (POST, generateName, 409 AlreadyExists) + the kinds' validation.
    def create(self, plural, kinfo, ns, body, q):
        store = self.server.store
        obj = check_body_meta(kinfo, self.json_body(body), ns)
        md = obj["metadata"]
        if md.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        for f in SERVER_MANAGED:
            md.pop(f, None)
        md.pop("managedFields", None)
        generated = not md.get("name")
        if generated:
            if not md.get("generateName"):
                raise invalid(kinfo, "", [("metadata.name", "FieldValueRequired",
                                           "Required value: name or generateName is required")])
            md["name"] = md["generateName"] + rand_suffix()
        if plural == "jobs":
            obj.pop("status", None)
            prepare_job_create(obj)
            md["uid"] = str(uuid.uuid4())
            finish_job_create(obj)
        elif plural == "pods":
            prepare_pod_create(obj)
        elif plural == "nodes":
            prepare_node_create(obj)
        elif plural == "namespaces":
            prepare_namespace(obj)
        elif plural in dra.PLURALS:
            obj.pop("status", None)
            dra.validate(kinfo, obj)
        if self.dry_run(q):
            md.setdefault("uid", str(uuid.uuid4()))
            md["creationTimestamp"] = now_ts()
            return self.send_json(201, obj)
        with store.lock:
            if kinfo.namespaced:
                ensure_namespace(store, ns)
            if generated and store.get(plural, obj_key(ns, md["name"])) is not None:
                for _ in range(10):
                    md["name"] = md["generateName"] + rand_suffix()
                    if store.get(plural, obj_key(ns, md["name"])) is None:
                        break
            created = store.create(plural, obj)
        return self.send_object(201, plural, kinfo, created)

    def _conflict_fault(self, plural, kinfo, key, cur):
        """API concepts: "Conflicts" (optimistic concurrency).  /_standin/conflict: behave as if another client wrote the Job first."""
        if plural == "jobs" and self.server.faults.take_conflict():
            self.server.store.update(plural, key, clone(cur))
            raise conflict(kinfo, cur["metadata"]["name"])

    def _merge_update(self, plural, kinfo, cur, new, sub):
        """Apply server-side rules for an update of the main resource or of /status.
        Follows API conventions "Spec and Status" (the main resource ignores status, /status only
        changes status), "Finalizers" (none may be added while deleting) and the kinds' update
        validation (Jobs: immutable fields / "Mutable Scheduling Directives")."""
        if sub == "status":
            out = clone(cur)
            out["status"] = new.get("status") or {}
            if plural == "resourceclaims":
                dra.validate_status_update(kinfo, cur, out)
            return out
        md, cmd = new["metadata"], cur["metadata"]
        for f in SERVER_MANAGED + ("namespace", "name"):
            if f in cmd:
                md[f] = cmd[f]
            else:
                md.pop(f, None)
        if cmd.get("deletionTimestamp"):
            added = [f for f in md.get("finalizers") or [] if f not in (cmd.get("finalizers") or [])]
            if added:
                raise invalid(kinfo, cmd["name"], [("metadata.finalizers", "FieldValueForbidden",
                                                    "Forbidden: no new finalizers can be added if the object is "
                                                    "being deleted, found new finalizers %s" % json.dumps(added))])
        if "status" in cur:
            new["status"] = clone(cur["status"])
        else:
            new.pop("status", None)
        if plural == "jobs":
            validate_job_update(cur, new)
            if new.get("spec") != cur.get("spec"):
                md["generation"] = cmd.get("generation", 1) + 1
        elif plural == "pods":
            validate_pod_update(cur, new)
        elif plural == "nodes":
            validate_node_update(cur, new)
        elif plural == "namespaces":
            new["spec"] = clone(cur.get("spec") or {})
        elif plural in dra.PLURALS:
            dra.validate_update(kinfo, cur, new)
        return new

    def _write(self, plural, kinfo, key, cur, new, q):
        # API concepts: "Resource versions" (a no-op write keeps the resourceVersion) and "Dry-run".
        store = self.server.store
        new["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        if new == cur:       # a no-op update does not change the resourceVersion or emit an event
            return cur
        if self.dry_run(q):
            return new
        return store.update(plural, key, new)

    # API concepts: "Update" (PUT, optimistic concurrency via metadata.resourceVersion → 409 Conflict)
    def replace(self, plural, kinfo, key, ns, name, body, sub, q):
        store = self.server.store
        obj = check_body_meta(kinfo, self.json_body(body), ns, name)
        with store.lock:
            cur = store.get(plural, key)
            if cur is None:
                raise not_found(kinfo, name)
            self._conflict_fault(plural, kinfo, key, cur)
            md = obj["metadata"]
            if md.get("uid") and md["uid"] != cur["metadata"]["uid"]:
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                               % (md["uid"], cur["metadata"]["uid"]), {"name": name, "group": kinfo.group,
                                                                     "kind": plural})
            if md.get("resourceVersion") and md["resourceVersion"] != cur["metadata"]["resourceVersion"]:
                raise conflict(kinfo, name)
            new = self._merge_update(plural, kinfo, cur, obj, sub)
            out = self._write(plural, kinfo, key, cur, new, q)
        return self.send_object(200, plural, kinfo, out)

    # API concepts: "Patch" (merge patch RFC 7386, strategic merge patch, JSON patch RFC 6902);
    # any other Content-Type: 415.  A patch carrying a stale metadata.resourceVersion: 409.
    def patch(self, plural, kinfo, key, ns, name, body, sub, q):
        store = self.server.store
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        fn = PATCH_TYPES.get(ctype)
        if fn is None:
            raise ApiError(415, "UnsupportedMediaType",
                           "the body of the request was in an unknown format - accepted media types include: "
                           "application/json-patch+json, application/merge-patch+json, "
                           "application/strategic-merge-patch+json")
        p = self.json_body(body)
        with store.lock:
            cur = store.get(plural, key)
            if cur is None:
                raise not_found(kinfo, name)
            self._conflict_fault(plural, kinfo, key, cur)
            patched = fn(clone(cur), p)
            if not isinstance(patched, dict):
                raise bad_request("the patch result is not an object")
            prv = (patched.get("metadata") or {}).get("resourceVersion")
            if prv and prv != cur["metadata"]["resourceVersion"]:
                raise conflict(kinfo, name)
            pmd = patched.get("metadata") or {}
            if pmd.get("uid") and pmd["uid"] != cur["metadata"]["uid"]:
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                               % (pmd["uid"], cur["metadata"]["uid"]), {"name": name, "group": kinfo.group,
                                                                      "kind": plural})
            check_body_meta(kinfo, patched, ns, name)
            new = self._merge_update(plural, kinfo, cur, patched, sub)
            out = self._write(plural, kinfo, key, cur, new, q)
        return self.send_object(200, plural, kinfo, out)

    def _delete_options(self, q, body):
        opts = self.json_body(body, allow_empty=True) or {}
        if not isinstance(opts, dict):
            raise bad_request("DeleteOptions must be an object")
        grace = q.get("gracePeriodSeconds", opts.get("gracePeriodSeconds"))
        try:
            grace = int(grace) if grace not in (None, "") else None
        except ValueError:
            raise bad_request("invalid gracePeriodSeconds")
        policy = q.get("propagationPolicy") or opts.get("propagationPolicy")
        orphan = q.get("orphanDependents", opts.get("orphanDependents"))
        if policy is None and orphan is not None:
            policy = "Orphan" if str(orphan).lower() == "true" else "Background"
        dry = self.dry_run(q) or "All" in (opts.get("dryRun") or [])
        return grace, policy, opts.get("preconditions"), dry

    # "Garbage collection" (propagationPolicy) and "Pod Lifecycle: Termination of Pods" (graceful deletion)
    def delete(self, plural, kinfo, key, name, q, body):
        grace, policy, precond, dry = self._delete_options(q, body)
        store = self.server.store
        if plural == "namespaces":
            with store.lock:
                if store.get(plural, key) is None:
                    raise not_found(kinfo, name)
                if not dry:
                    delete_namespace(store, name)
            return self.send_json(200, status_obj(200, "", "", {"name": name, "kind": "namespaces"}, "Success"))
        obj, gone = delete_object(store, plural, key, grace, policy, precond, dry)
        if gone:
            return self.send_json(200, status_obj(200, "", "", {"name": name, "group": kinfo.group, "kind": plural,
                                                               "uid": obj["metadata"]["uid"]}, "Success"))
        return self.send_object(200, plural, kinfo, obj)

    # API concepts: "Delete collection"
    def delete_collection(self, plural, kinfo, ns, q, body):
        grace, policy, precond, dry = self._delete_options(q, body)
        lsel = LabelSelector.parse(q.get("labelSelector"))
        fsel = FieldSelector.parse(plural, q.get("fieldSelector"))
        store = self.server.store
        out = []
        with store.lock:
            items, rv, _, _ = store.list(plural, ns, lambda o: lsel.matches(o["metadata"].get("labels"))
                                         and fsel.matches(o), False)
            for o in items:
                k = obj_key(o["metadata"].get("namespace"), o["metadata"]["name"])
                try:
                    if plural == "namespaces":
                        if not dry:
                            delete_namespace(store, o["metadata"]["name"])
                        out.append(o)
                    else:
                        out.append(delete_object(store, plural, k, grace, policy, None, dry)[0])
                except ApiError:
                    pass
        return self.send_json(200, {"kind": kinfo.kind + "List", "apiVersion": kinfo.api_version,
                                    "metadata": {"resourceVersion": str(store.rv)},
                                    "items": [_strip_tv(o) for o in out]})


def prepare_namespace(obj):
    name = obj["metadata"]["name"]
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    obj["spec"] = {"finalizers": ["kubernetes"]}
    obj["status"] = {"phase": "Active"}


def ensure_namespace(store, ns):
    """Namespaces are implicit: the first object in a namespace creates it."""
    if ns and store.get("namespaces", ns) is None:
        obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        prepare_namespace(obj)
        store.create("namespaces", obj)


def delete_namespace(store, name):
    """Deletes the namespace and everything in it at once (no Terminating phase)."""
    with store.lock:
        for plural in ("jobs", "pods", "resourceclaims", "resourceclaimtemplates"):
            for k in list(store.ns_index[plural].get(name, ())):
                if store.get(plural, k) is not None:
                    store.remove(plural, k)
        if store.get("namespaces", name) is not None:
            store.remove("namespaces", name)


# ---- state and command line -----------------------------------------------------------------------
_save_lock = threading.Lock()


def save_state(srv):
    path = srv.opts.state_file
    if not path:
        return None
    with _save_lock:
        return srv.store.save(path)


def saver_loop(srv):
    store = srv.store
    saved = store.changes
    interval, last = 0.2, 0.0
    while True:
        time.sleep(0.05)
        if store.changes != saved and time.monotonic() - last >= interval:
            t0 = time.monotonic()
            try:
                saved = save_state(srv)
            except Exception:
                traceback.print_exc(file=sys.stderr)
            last = time.monotonic()
            interval = max(0.2, 2 * (last - t0))


def load_nodes(store, path):
    import yaml
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    nodes = []
    for d in docs:
        if isinstance(d, list):
            nodes.extend(d)
        elif isinstance(d, dict) and "items" in d:
            nodes.extend(d["items"] or [])
        elif isinstance(d, dict):
            nodes.append(d)
    for n in nodes:
        n = clone(n)
        n.setdefault("apiVersion", "v1")
        n.setdefault("kind", "Node")
        md = n.setdefault("metadata", {})
        for f in SERVER_MANAGED + ("resourceVersion",):
            md.pop(f, None)
        prepare_node_create(n)
        if store.get("nodes", md["name"]) is None:
            store.create("nodes", n)


def restart_pods(store, kubelet):
    """After a restart the stand-in's kubelet runs again every pod that was bound and not finished,
    from the beginning (the processes of the previous instance are gone)."""
    with store.lock:
        for key, p in list(store.objs["pods"].items()):
            st = p.get("status") or {}
            if p["spec"].get("nodeName") and st.get("phase") not in ("Succeeded", "Failed"):
                def reset(x):
                    x["status"] = {"phase": "Pending", "qosClass": st.get("qosClass", "BestEffort"),
                                   "conditions": [c for c in st.get("conditions") or []
                                                  if c.get("type") == "PodScheduled"]}
                    return x
                store.mutate("pods", key, reset)
                kubelet.to_start.add(key)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Stand-in Kubernetes API server for tests")
    ap.add_argument("--address", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--client-ca")
    ap.add_argument("--token-file")
    ap.add_argument("--state-file")
    ap.add_argument("--history", type=int, default=1000)
    ap.add_argument("--continue-ttl", type=float, default=300.0)
    ap.add_argument("--nodes")
    ap.add_argument("--tick-ms", type=int, default=100)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--no-exit-with-parent", action="store_true",
                    help="keep running when the process that started the stand-in goes away")
    opts = ap.parse_args(argv)
    if bool(opts.tls_cert) != bool(opts.tls_key):
        ap.error("--tls-cert and --tls-key go together")
    if opts.client_ca and not opts.tls_cert:
        ap.error("--client-ca needs --tls-cert/--tls-key")
    return opts


def main(argv=None):
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    store = Store(history=opts.history, continue_ttl=opts.continue_ttl)
    kubelet = Kubelet(store)
    ctrl = Controllers(store, kubelet, opts.tick_ms)
    if opts.state_file and os.path.exists(opts.state_file):
        store.load(opts.state_file)
        restart_pods(store, kubelet)
        with store.lock:          # let the controllers look at everything once
            ctrl.dirty_jobs.update(store.objs["jobs"].keys())
            ctrl.pending_pods.update(k for k, p in store.objs["pods"].items() if not p["spec"].get("nodeName"))
            for k, j in store.objs["jobs"].items():
                if j["metadata"].get("deletionTimestamp"):
                    ctrl.deleting.add(("jobs", k))
    if opts.nodes:
        load_nodes(store, opts.nodes)
    with store.lock:
        ensure_namespace(store, "default")
    srv = StandinServer((opts.address, opts.port), store, ctrl, kubelet, opts)
    if opts.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(opts.tls_cert, opts.tls_key)
        if opts.client_ca:
            ctx.load_verify_locations(opts.client_ca)
            ctx.verify_mode = ssl.CERT_OPTIONAL
        srv.ssl_ctx = ctx
    port = srv.server_address[1]

    def shutdown(signum, frame):
        try:
            if opts.state_file:
                if _save_lock.acquire(timeout=5):
                    try:
                        store.save(opts.state_file)
                    finally:
                        _save_lock.release()
        except Exception:
            traceback.print_exc(file=sys.stderr)
        finally:
            kubelet.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    if not opts.no_exit_with_parent and os.getppid() != 1:
        # A test that crashes cannot send SIGTERM: leave (as at SIGTERM) when re-parented.
        def parent_watch(ppid=os.getppid()):
            while os.getppid() == ppid:
                time.sleep(0.5)
            shutdown(None, None)
        threading.Thread(target=parent_watch, daemon=True, name="parent-watch").start()
    threading.Thread(target=ctrl.run, daemon=True, name="controllers").start()
    if opts.state_file:
        threading.Thread(target=saver_loop, args=(srv,), daemon=True, name="saver").start()
    if opts.port_file:
        tmp = opts.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, opts.port_file)
    print("listening on %d" % port, flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        kubelet.shutdown()
