"""A small kubelet.  Follows "Pod Lifecycle" (phases, container states, restartPolicy, conditions,
"Termination of Pods"), "Define Environment Variables for a Container" / "Expose Pod Information
to Containers Through Environment Variables" (env value/fieldRef/resourceFieldRef, $(VAR)
expansion in command/args) and "Node-pressure Eviction" (Evicted pods, DisruptionTarget).

Each bound pod gets a worker thread that runs the containers' command+args as local
subprocesses (their own process group, cwd = a temporary directory).  A container without
command and args stands for a long-running image entrypoint: it runs `sleep infinity`.

Test doubles (container env):
  STANDIN_OUTCOME=OOMKilled | Evicted | UnexpectedAdmissionError
  STANDIN_OUTCOME_AFTER=<seconds>  (default 0.3) how long the container runs before OOM/eviction.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from .util import now_ts, parse_quantity

POLL = 0.05
RESTART_BACKOFF = 1.0   # the real kubelet starts at 10 s and doubles (CrashLoopBackOff)


def expand(s, env):
    """$(VAR) references are expanded from the container's environment; $$ escapes."""
    if not isinstance(s, str) or "$" not in s:
        return s
    out, i, n = [], 0, len(s)
    while i < n:
        ch = s[i]
        if ch == "$" and i + 1 < n:
            if s[i + 1] == "$":
                out.append("$")
                i += 2
                continue
            if s[i + 1] == "(":
                j = s.find(")", i + 2)
                if j != -1:
                    name = s[i + 2:j]
                    out.append(env[name] if name in env else s[i:j + 1])
                    i = j + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)


def _field_ref(pod, path):
    md = pod["metadata"]
    simple = {"metadata.name": md.get("name"), "metadata.namespace": md.get("namespace"),
              "metadata.uid": md.get("uid"), "spec.nodeName": pod["spec"].get("nodeName"),
              "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
              "status.hostIP": pod["status"].get("hostIP"), "status.podIP": pod["status"].get("podIP")}
    if path in simple:
        return simple[path] or ""
    for prefix, field in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return (md.get(field) or {}).get(path[len(prefix) + 2:-2], "")
    return ""


def _resource_ref(c, ref):
    res = c.get("resources") or {}
    what = ref.get("resource", "")
    kind, _, name = what.partition(".")
    q = (res.get(kind) or {}).get(name)
    if q is None:
        return "0"
    v = parse_quantity(q) / parse_quantity(ref.get("divisor") or "1")
    return str(-(-v.numerator // v.denominator))   # rounded up, as the kubelet does


def container_env(pod, c):
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOSTNAME": pod["metadata"]["name"],
           "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    for e in c.get("env") or []:
        name = e.get("name")
        if "value" in e:
            env[name] = expand(str(e.get("value") or ""), env)
        elif e.get("valueFrom"):
            vf = e["valueFrom"]
            if vf.get("fieldRef"):
                env[name] = _field_ref(pod, vf["fieldRef"].get("fieldPath", ""))
            elif vf.get("resourceFieldRef"):
                env[name] = _resource_ref(c, vf["resourceFieldRef"])
            # secretKeyRef / configMapKeyRef: not supported (the stand-in has no Secrets/ConfigMaps)
        else:
            env[name] = ""
    return env


class Container:
    def __init__(self, spec, pod, workdir):
        self.spec, self.name = spec, spec["name"]
        self.env = container_env(pod, spec)
        self.outcome = self.env.get("STANDIN_OUTCOME", "")
        try:
            self.outcome_after = float(self.env.get("STANDIN_OUTCOME_AFTER", "0.3"))
        except ValueError:
            self.outcome_after = 0.3
        self.workdir = workdir
        self.log_path = os.path.join(workdir, "%s.log" % self.name)
        self.proc = None
        self.started = None
        self.started_ts = None
        self.forced = None           # (exitCode, reason) decided by the stand-in (OOM, kill)
        self.restart_count = 0
        self.restart_at = None
        self.last_state = {}
        self.final = None            # {"exitCode":..., "reason":...} once it will not run again
        self.start_error = None

    def argv(self):
        cmd = [expand(str(x), self.env) for x in self.spec.get("command") or []]
        args = [expand(str(x), self.env) for x in self.spec.get("args") or []]
        return (cmd + args) or ["sleep", "infinity"]

    def start(self):
        self.forced, self.start_error = None, None
        self.started, self.started_ts = time.monotonic(), now_ts()
        try:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self.argv(), cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            self.proc = None
            self.start_error = str(e)

    def signal(self, sig):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except OSError:
                pass

    def poll(self):
        """None while running, else (exitCode, reason)."""
        if self.start_error is not None:
            return (128, "StartError")
        if self.proc is None:
            return None
        rc = self.proc.poll()
        if rc is None:
            if self.outcome == "OOMKilled" and time.monotonic() - self.started >= self.outcome_after:
                self.forced = (137, "OOMKilled")
                self.signal(signal.SIGKILL)
            return None
        if self.forced:
            return self.forced
        if self.outcome == "OOMKilled":
            return (137, "OOMKilled")
        code = rc if rc >= 0 else 128 - rc
        return (code, "Completed" if code == 0 else "Error")

    def kill(self, grace):
        """SIGTERM, then SIGKILL after min(grace, 1 s)."""
        if not self.proc or self.proc.poll() is not None:
            return
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + max(0.0, min(grace, 1.0))
        while time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.02)
        self.signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass

    def status(self, running_ready=True):
        cs = {"name": self.name, "image": self.spec.get("image", ""), "imageID": "",
              "restartCount": self.restart_count, "lastState": self.last_state}
        if self.proc:
            cs["containerID"] = "standin://%d" % self.proc.pid
        res = self.poll() if (self.proc or self.start_error) else None
        if self.final is not None:
            cs.update(ready=False, started=False, state={"terminated": self.final})
        elif self.restart_at is not None:
            cs.update(ready=False, started=False, state={"waiting": {
                "reason": "CrashLoopBackOff",
                "message": "back-off %ds restarting failed container=%s" % (RESTART_BACKOFF, self.name)}})
        elif self.proc is None and self.start_error is None:
            cs.update(ready=False, started=False, state={"waiting": {"reason": "ContainerCreating"}})
        elif res is None:
            cs.update(ready=running_ready, started=True, state={"running": {"startedAt": self.started_ts}})
        else:
            cs.update(ready=False, started=False, state={"terminated": self.terminated(res)})
        return cs

    def terminated(self, res):
        t = {"exitCode": res[0], "reason": res[1], "startedAt": self.started_ts, "finishedAt": now_ts()}
        if self.proc:
            t["containerID"] = "standin://%d" % self.proc.pid
        if self.start_error:
            t["message"] = self.start_error
        return t


class PodWorker(threading.Thread):
    def __init__(self, kubelet, key, pod):
        super().__init__(daemon=True, name="pod-" + key)
        self.kubelet, self.store, self.key = kubelet, kubelet.store, key
        self.uid = pod["metadata"]["uid"]
        self.workdir = tempfile.mkdtemp(prefix=pod["metadata"]["name"][:40] + "-", dir=kubelet.root)
        self.containers = []
        self.init_containers = []

    def get(self):
        p = self.store.get("pods", self.key)
        return p if p is not None and p["metadata"]["uid"] == self.uid else None

    def write(self, fn):
        return self.store.mutate("pods", self.key, fn, self.uid)

    def run(self):
        try:
            self._run()
        except Exception:
            traceback.print_exc(file=sys.stderr)
        finally:
            for c in self.containers + self.init_containers:
                c.kill(0)
            self.kubelet.worker_done(self)

    def _all(self):
        return self.init_containers + self.containers

    def _status(self, p, phase=None, ready=None, reason=None, message=None):
        st = p.setdefault("status", {})
        st["containerStatuses"] = [c.status() for c in self.containers]
        if self.init_containers:
            st["initContainerStatuses"] = [c.status() for c in self.init_containers]
        if phase:
            st["phase"] = phase
        if reason:
            st["reason"] = reason
            st["message"] = message
        conds = st.setdefault("conditions", [])
        from .controllers import set_condition
        inited = all(c.final is not None and c.final["exitCode"] == 0 for c in self.init_containers)
        set_condition(conds, "Initialized", "True" if inited else "False", None if inited else
                      "ContainersNotInitialized", None if inited else "containers with incomplete status: [%s]"
                      % " ".join(c.name for c in self.init_containers if c.final is None))
        all_ready = all(cs.get("ready") for cs in st["containerStatuses"])
        if ready is not None:
            all_ready = ready
        for t in ("Ready", "ContainersReady"):
            if all_ready:
                set_condition(conds, t, "True", None, None)
            else:
                why = "PodCompleted" if st.get("phase") in ("Succeeded", "Failed") else "ContainersNotReady"
                set_condition(conds, t, "False", why, None if why == "PodCompleted" else
                              "containers with unready status: [%s]" % " ".join(
                                  cs["name"] for cs in st["containerStatuses"] if not cs.get("ready")))
        for c in conds:
            for f in ("reason", "message"):
                if c.get(f) is None:
                    c.pop(f, None)
            c["lastProbeTime"] = None
        order = {"PodReadyToStartContainers": 0, "Initialized": 1, "Ready": 2, "ContainersReady": 3,
                 "PodScheduled": 4}
        conds.sort(key=lambda c: order.get(c.get("type"), 9))
        return p

    def _run(self):
        # "Pod Lifecycle": Pending -> Running -> Succeeded/Failed, container states, restartPolicy,
        # init containers, pod conditions; "Device Plugins" admission (UnexpectedAdmissionError).
        pod = self.get()
        if pod is None:
            return
        node = self.store.get("nodes", pod["spec"]["nodeName"]) or {"status": {}}
        host_ip = next((a.get("address") for a in (node["status"].get("addresses") or [])
                        if a.get("type") == "InternalIP"), None) or "10.0.0.%d" % ((hash(pod["spec"]["nodeName"])
                                                                                   & 0xFD) + 1)
        from .controllers import pod_ip, set_condition
        ip = pod_ip(self.uid)

        def accept(p):
            st = p.setdefault("status", {})
            st.update(hostIP=host_ip, hostIPs=[{"ip": host_ip}], podIP=ip, podIPs=[{"ip": ip}], startTime=now_ts())
            set_condition(st.setdefault("conditions", []), "PodReadyToStartContainers", "True", None, None)
            return p
        pod = self.write(accept)
        if pod is None:
            return
        self.init_containers = [Container(c, pod, self.workdir) for c in pod["spec"].get("initContainers") or []]
        self.containers = [Container(c, pod, self.workdir) for c in pod["spec"].get("containers") or []]
        outcomes = [c.outcome for c in self._all()]
        if "UnexpectedAdmissionError" in outcomes:
            # Pod admission failure (device plugin allocation): Failed before any container runs.
            def reject(p):
                st = p["status"]
                st.update(phase="Failed", reason="UnexpectedAdmissionError",
                          message="Allocate failed due to requested number of devices unavailable for "
                                  "nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected")
                st.pop("containerStatuses", None)
                st.pop("initContainerStatuses", None)
                return p
            self.write(reject)
            return
        self.write(lambda p: self._status(p, phase="Pending"))
        policy = pod["spec"].get("restartPolicy", "Always")
        # Init containers run one after another.
        for c in self.init_containers:
            while True:
                c.start()
                self.write(lambda p: self._status(p))
                res = self._wait_one(c)
                if res == "deleted":
                    return self._terminate()
                if res == "gone":
                    return
                if res[0] == 0 or policy == "Never":
                    c.final = c.terminated(res)
                    break
                c.restart_count += 1
                c.last_state = {"terminated": c.terminated(res)}
                time.sleep(RESTART_BACKOFF)
            if c.final["exitCode"] != 0:
                self.write(lambda p: self._status(p, phase="Failed"))
                return
        for c in self.containers:
            c.start()
        running_since = time.monotonic()
        self.write(lambda p: self._status(p, phase="Running"))
        evict_after = min([c.outcome_after for c in self.containers if c.outcome == "Evicted"] or [None],
                          key=lambda x: x if x is not None else 1e9)
        while True:
            time.sleep(POLL)
            cur = self.get()
            if cur is None:
                return
            if cur["metadata"].get("deletionTimestamp"):
                return self._terminate()
            if evict_after is not None and time.monotonic() - running_since >= evict_after:
                return self._evict()
            changed = False
            for c in self.containers:
                if c.final is not None:
                    continue
                if c.restart_at is not None:
                    if time.monotonic() >= c.restart_at:
                        c.restart_at = None
                        c.restart_count += 1
                        c.start()
                        changed = True
                    continue
                res = c.poll()
                if res is None:
                    continue
                changed = True
                if policy == "Always" or (policy == "OnFailure" and res[0] != 0):
                    c.last_state = {"terminated": c.terminated(res)}
                    c.restart_at = time.monotonic() + RESTART_BACKOFF
                else:
                    c.final = c.terminated(res)
            if all(c.final is not None for c in self.containers):
                phase = "Succeeded" if all(c.final["exitCode"] == 0 for c in self.containers) else "Failed"
                self.write(lambda p: self._status(p, phase=phase, ready=False))
                return
            if changed:
                self.write(lambda p: self._status(p, phase="Running"))

    def _wait_one(self, c):
        while True:
            time.sleep(POLL)
            cur = self.get()
            if cur is None:
                c.kill(0)
                return "gone"
            if cur["metadata"].get("deletionTimestamp"):
                return "deleted"
            res = c.poll()
            if res is not None:
                return res

    def _evict(self):
        # "Node-pressure Eviction": phase Failed, reason Evicted, DisruptionTarget condition.
        for c in self._all():
            c.kill(0)
            if c.final is None and (c.proc or c.start_error):
                c.final = c.terminated((137, "Error"))

        def f(p):
            from .controllers import set_condition
            self._status(p, phase="Failed", ready=False, reason="Evicted",
                         message="The node was low on resource: memory. ")
            p["status"]["message"] = "The node was low on resource: memory."
            set_condition(p["status"]["conditions"], "DisruptionTarget", "True", "TerminationByKubelet",
                          "The node was low on resource: memory.")
            return p
        self.write(f)

    def _terminate(self):
        """Pod Lifecycle: "Termination of Pods" (graceful deletion): SIGTERM, SIGKILL after
        min(grace, 1 s), report the containers' end, then finish the deletion (grace 0)."""
        cur = self.get()
        grace = (cur or {}).get("metadata", {}).get("deletionGracePeriodSeconds", 30) or 0
        for c in self._all():
            was_running = c.proc is not None and c.final is None and c.restart_at is None
            c.kill(grace)
            if c.final is None and was_running:
                res = c.poll() or (137, "Error")
                c.final = c.terminated(res)
            elif c.final is None:
                c.restart_at = None
        ran = [c for c in self.containers if c.final is not None]
        phase = "Succeeded" if ran and len(ran) == len(self.containers) and all(
            c.final["exitCode"] == 0 for c in ran) else "Failed"
        self.write(lambda p: self._status(p, phase=phase, ready=False))

        def done(p):
            p["metadata"]["deletionGracePeriodSeconds"] = 0
            return p
        self.write(done)


class Kubelet:
    def __init__(self, store):
        self.store = store
        self.root = tempfile.mkdtemp(prefix="kube-standin-")
        self.workers = {}
        self.workdirs = {}
        self.to_start = set()
        self.lock = threading.Lock()

    def tick(self):
        store = self.store
        with store.lock:
            keys, self.to_start = self.to_start, set()
            starts = []
            for key in keys:
                p = store.get("pods", key)
                if p is None or p["metadata"]["uid"] in self.workers:
                    continue
                st, spec = p.get("status") or {}, p.get("spec") or {}
                if st.get("phase") in ("Succeeded", "Failed") or not spec.get("nodeName"):
                    continue
                if st.get("startTime") and st.get("containerStatuses") is not None and \
                        p["metadata"]["uid"] in self.workdirs:
                    continue
                if store.get("nodes", spec["nodeName"]) is None:
                    continue
                w = PodWorker(self, key, p)
                self.workers[p["metadata"]["uid"]] = w
                self.workdirs[p["metadata"]["uid"]] = w.workdir
                starts.append(w)
        for w in starts:
            w.start()

    def worker_done(self, w):
        with self.store.lock:
            self.workers.pop(w.uid, None)
            if self.store.get("pods", w.key) is None or self.store.get("pods", w.key)["metadata"]["uid"] != w.uid:
                d = self.workdirs.pop(w.uid, None)
                if d:
                    shutil.rmtree(d, ignore_errors=True)

    def on_pod_deleted(self, pod):
        uid = pod["metadata"]["uid"]
        if uid not in self.workers:
            d = self.workdirs.pop(uid, None)
            if d:
                shutil.rmtree(d, ignore_errors=True)

    def log_text(self, pod, container=None):
        d = self.workdirs.get(pod["metadata"]["uid"])
        conts = [c["name"] for c in pod["spec"].get("containers") or []]
        name = container or (conts[0] if conts else "")
        if not d:
            return None, name
        try:
            with open(os.path.join(d, "%s.log" % name), "rb") as f:
                return f.read(), name
        except OSError:
            return b"", name

    def shutdown(self):
        for w in list(self.workers.values()):
            for c in w.containers + w.init_containers:
                c.signal(signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)
