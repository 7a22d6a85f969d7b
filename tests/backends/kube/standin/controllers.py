"""The in-process controllers: garbage collector, Job controller and scheduler, plus object deletion.

- Deletion follows "Garbage collection" (propagationPolicy Orphan/Background/Foreground, the
  orphan and foregroundDeletion finalizers, ownerReferences) and "Pod lifecycle: Termination of
  Pods" (graceful deletion, deletionGracePeriodSeconds, finalizers).
- The Job controller follows "Jobs" ("Suspending a Job", "Pod backoff failure policy",
  "Job termination and cleanup", "Job tracking with finalizers", "Terminal Job conditions").
- The scheduler follows "Assigning Pods to Nodes" (nodeSelector, node affinity), "Taints and
  Tolerations", "Resource Management for Pods and Containers" and "Pod Scheduling Readiness".
"""
import collections
import sys
import threading
import time
import traceback

from . import dra
from .kinds import KINDS
from .store import obj_key
from .util import ApiError, clone, not_found, now_ts, parse_quantity, parse_ts, rand_suffix
from .validation import prepare_pod_create

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
TERMINAL = ("Succeeded", "Failed")


def _md(o):
    return o["metadata"]


def controller_ref(obj):
    for ref in _md(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


# ---- deletion ("Garbage collection", "Graceful deletion") ---------------------------------------
def delete_object(store, plural, key, grace=None, policy=None, precond=None, dry_run=False):
    """Returns (object, deleted_now)."""
    kinfo = KINDS[plural]
    with store.lock:
        cur = store.get(plural, key)
        if cur is None:
            raise not_found(kinfo, key.split("/")[-1])
        md = cur["metadata"]
        precond = precond or {}
        if precond.get("uid") and precond["uid"] != md["uid"]:
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                           % (precond["uid"], md["uid"]), {"name": md["name"], "group": kinfo.group, "kind": plural})
        if precond.get("resourceVersion") and precond["resourceVersion"] != md["resourceVersion"]:
            raise ApiError(409, "Conflict", "Precondition failed: ResourceVersion in precondition: %s, "
                           "ResourceVersion in object meta: %s" % (precond["resourceVersion"], md["resourceVersion"]),
                           {"name": md["name"], "group": kinfo.group, "kind": plural})
        if policy not in (None, "", "Orphan", "Background", "Foreground"):
            raise ApiError(422, "Invalid", 'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: '
                           'Unsupported value: "%s": supported values: "Foreground", "Background", "Orphan", "nil"'
                           % policy)
        new = clone(cur)
        nmd = new["metadata"]
        fins = list(nmd.get("finalizers") or [])
        if plural == "pods":
            spec, st = cur.get("spec") or {}, cur.get("status") or {}
            g = grace if grace is not None else spec.get("terminationGracePeriodSeconds", 30)
            if g is None or g < 0:
                g = 0
            # An unscheduled or already terminated pod is deleted at once.
            if not spec.get("nodeName") or st.get("phase") in TERMINAL:
                g = 0
            if md.get("deletionTimestamp") and md.get("deletionGracePeriodSeconds", 0) <= g:
                return cur, False      # already terminating with a shorter or equal grace period
            nmd["deletionTimestamp"] = now_ts(g)
            nmd["deletionGracePeriodSeconds"] = g
        else:
            if policy in (None, ""):
                # batch/v1 Jobs default to orphaning their pods (DefaultGarbageCollectionPolicy).
                policy = "Orphan" if plural == "jobs" else "Background"
            if plural == "jobs":
                if policy == "Orphan" and "orphan" not in fins:
                    fins.append("orphan")
                elif policy == "Foreground" and "foregroundDeletion" not in fins:
                    fins.append("foregroundDeletion")
            nmd["finalizers"] = fins
            if not fins:
                nmd.pop("finalizers")
            if md.get("deletionTimestamp") and fins == (md.get("finalizers") or []):
                return cur, False
            nmd.setdefault("deletionTimestamp", now_ts())
            nmd["deletionGracePeriodSeconds"] = 0
        if dry_run:
            return new, not nmd.get("finalizers") and not nmd.get("deletionGracePeriodSeconds")
        if not nmd.get("finalizers") and not nmd.get("deletionGracePeriodSeconds"):
            return store.remove(plural, key, new), True
        return store.update(plural, key, new), False


# ---- quantities and scheduling helpers ------------------------------------------------------------
def _effective(c):
    res = c.get("resources") or {}
    out = {}
    for r, q in (res.get("limits") or {}).items():      # limits count as requests when requests are absent
        out[r] = q
    out.update(res.get("requests") or {})
    return {r: parse_quantity(q) for r, q in out.items()}


def pod_requests(spec):
    total = collections.Counter()
    for c in spec.get("containers") or []:
        for r, q in _effective(c).items():
            total[r] += q
    for c in spec.get("initContainers") or []:
        for r, q in _effective(c).items():
            if q > total.get(r, 0):
                total[r] = q
    for r, q in (spec.get("overhead") or {}).items():
        total[r] += parse_quantity(q)
    return total


def tolerates(tols, taint):
    for t in tols or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if op == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _match_expr(e, value, has):
    op, vals = e.get("operator"), e.get("values") or []
    if op == "In":
        return has and value in vals
    if op == "NotIn":
        return not has or value not in vals
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt") and has and vals:
        try:
            a, b = int(value), int(vals[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def node_affinity_ok(pod_spec, node):
    labels = _md(node).get("labels") or {}
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if req:
        for term in req.get("nodeSelectorTerms") or []:
            exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
            if not exprs and not fields:
                continue
            if all(_match_expr(e, labels.get(e.get("key")), e.get("key") in labels) for e in exprs) and \
                    all(_match_expr(e, _md(node)["name"], True) for e in fields if e.get("key") == "metadata.name"):
                return True
        return False
    return True


def node_ready(node):
    conds = (node.get("status") or {}).get("conditions")
    if not conds:
        return True            # the stand-in counts nodes without conditions as Ready
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def node_allocatable(node):
    st = node.get("status") or {}
    alloc = st.get("allocatable") or st.get("capacity") or {}
    out = {}
    for r, q in alloc.items():
        try:
            out[r] = parse_quantity(q)
        except ValueError:
            pass
    return out


def fit_reasons(pod, req, node, used, used_pods):
    """Scheduler filter plugins in the default order; the first failing plugin gives the reasons."""
    spec = pod.get("spec") or {}
    tols = spec.get("tolerations")
    nspec = node.get("spec") or {}
    if nspec.get("unschedulable") and not tolerates(tols, {"key": "node.kubernetes.io/unschedulable",
                                                           "effect": "NoSchedule"}):
        return ["node(s) were unschedulable"]
    taints = list(nspec.get("taints") or [])
    if not node_ready(node):
        taints.insert(0, {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    for t in taints:
        if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tols, t):
            return ["node(s) had untolerated taint {%s: %s}" % (t.get("key"), t.get("value") or "")]
    if not node_affinity_ok(spec, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    alloc = node_allocatable(node)
    out = []
    if "pods" in alloc and used_pods + 1 > alloc["pods"]:
        out.append("Too many pods")
    for r, q in sorted(req.items()):
        if q <= 0:
            continue
        if q > alloc.get(r, 0) - used.get(r, 0):
            out.append("Insufficient %s" % r)
    return out


def pod_ip(uid):
    h = hash(uid) & 0xFFFF
    return "10.244.%d.%d" % (h >> 8, (h & 0xFF) or 1)


# ---- controllers ---------------------------------------------------------------------------------
def set_condition(conds, ctype, status, reason, message):
    """Only a status change moves lastTransitionTime (API conventions: conditions)."""
    now = now_ts()
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") != status:
                c["lastTransitionTime"] = now
            if (c.get("status"), c.get("reason"), c.get("message")) != (status, reason, message):
                c.update(status=status, reason=reason, message=message, lastProbeTime=now)
            return
    conds.append({"type": ctype, "status": status, "lastProbeTime": now, "lastTransitionTime": now,
                  "reason": reason, "message": message})


def get_condition(conds, ctype):
    for c in conds or []:
        if c.get("type") == ctype:
            return c
    return None


def cond_true(conds, ctype):
    c = get_condition(conds, ctype)
    return bool(c and c.get("status") == "True")


def _parse_indexes(s):
    out = set()
    for part in (s or "").split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    return out


def _fmt_indexes(idx):
    out, run = [], []
    for i in sorted(idx):
        if run and i == run[-1] + 1:
            run.append(i)
        else:
            if run:
                out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
            run = [i]
    if run:
        out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
    return ",".join(out)


class Controllers:
    def __init__(self, store, kubelet, tick_ms=100, log=None):
        self.store, self.kubelet = store, kubelet
        self.tick_s = max(tick_ms, 5) / 1000.0
        self.dirty_jobs, self.active_jobs = set(), set()
        self.pending_pods, self.unschedulable = set(), set()
        self.cluster_changed = False
        self.last_full_retry = time.monotonic()
        self.deleting = set()
        self.gc_owner_uids = set()
        self.suspend_killed = set()
        self.log = log or (lambda *a: None)
        store.hooks.append(self.on_event)
        self._stop = threading.Event()

    def on_event(self, plural, etype, obj, prev):
        # (informer-style event handler, as controllers use watch events: "API concepts: Efficient
        # detection of changes")
        """Called under the store lock on every write: mark what the controllers must look at."""
        md = obj["metadata"]
        key = obj_key(md.get("namespace"), md["name"])
        if plural == "jobs":
            if etype == "DELETED":
                self.dirty_jobs.discard(key)
                self.active_jobs.discard(key)
                self.gc_owner_uids.add(md["uid"])
            else:
                self.dirty_jobs.add(key)
                if md.get("deletionTimestamp"):
                    self.deleting.add(("jobs", key))
        elif plural == "pods":
            ref = controller_ref(obj)
            if ref and ref.get("kind") == "Job":
                self.dirty_jobs.add(obj_key(md.get("namespace"), ref.get("name")))
            spec, phase = obj.get("spec") or {}, (obj.get("status") or {}).get("phase")
            if etype != "DELETED" and not spec.get("nodeName") and not md.get("deletionTimestamp") \
                    and phase not in TERMINAL:
                self.pending_pods.add(key)
            else:
                self.pending_pods.discard(key)
                self.unschedulable.discard(key)
            if prev is not None and (prev.get("spec") or {}).get("nodeName") and (
                    etype == "DELETED" or phase in TERMINAL):
                self.cluster_changed = True
            if etype != "DELETED" and spec.get("nodeName") and phase not in TERMINAL:
                self.kubelet.to_start.add(key)
            if etype == "DELETED":
                self.kubelet.on_pod_deleted(obj)
        elif plural == "nodes":
            self.cluster_changed = True
            if etype == "ADDED":
                self.kubelet.to_start.update(self.store.pods_by_node.get(md["name"], ()))
        elif plural in ("resourceslices", "deviceclasses") or (plural == "resourceclaims" and etype != "ADDED"):
            self.cluster_changed = True          # devices added or freed: pending pods are tried again
        elif plural == "namespaces" and etype != "DELETED" and md.get("deletionTimestamp"):
            self.deleting.add(("namespaces", key))

    # ---- loop --------------------------------------------------------------------------------
    def run(self):
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.tick()
            except Exception:
                traceback.print_exc(file=sys.stderr)
            self._stop.wait(max(0.0, self.tick_s - (time.monotonic() - t0)))

    def stop(self):
        self._stop.set()

    def tick(self):
        self.gc()
        self.sync_jobs()
        dra.sync_claims(self.store)
        self.schedule()
        self.kubelet.tick()

    # ---- garbage collector ---------------------------------------------------------------------
    def gc(self):
        # "Garbage collection": orphan / foregroundDeletion finalizers, Background deletion of
        # dependents whose owners are gone, and the pod GC for terminating pods on missing nodes.
        store = self.store
        with store.lock:
            items, self.deleting = self.deleting, set()
            uids, self.gc_owner_uids = self.gc_owner_uids, set()
        for plural, key in items:
            with store.lock:
                obj = store.get(plural, key)
                if obj is None or not obj["metadata"].get("deletionTimestamp"):
                    continue
                if plural == "namespaces":
                    self._gc_namespace(obj, key)
                    continue
                uid = obj["metadata"]["uid"]
                fins = list(obj["metadata"].get("finalizers") or [])
                deps = [k for k in list(store.pods_by_owner.get(uid, ()))]
                if "orphan" in fins:
                    for k in deps:
                        def strip(p, uid=uid):
                            p["metadata"]["ownerReferences"] = [r for r in p["metadata"].get("ownerReferences") or []
                                                                if r.get("uid") != uid]
                            if not p["metadata"]["ownerReferences"]:
                                del p["metadata"]["ownerReferences"]
                            self._drop_tracking(p)
                            return p
                        store.mutate("pods", k, strip)
                    fins.remove("orphan")
                    self._set_finalizers(plural, key, fins)
                elif "foregroundDeletion" in fins:
                    live = [store.get("pods", k) for k in deps]
                    live = [p for p in live if p is not None]
                    for p in live:
                        if not p["metadata"].get("deletionTimestamp"):
                            try:
                                delete_object(store, "pods", obj_key(p["metadata"]["namespace"],
                                                                     p["metadata"]["name"]))
                            except ApiError:
                                pass
                    if live:
                        self.deleting.add((plural, key))
                    else:
                        fins.remove("foregroundDeletion")
                        self._set_finalizers(plural, key, fins)
        for uid in uids:               # Background: the owner is gone, delete its dependents
            with store.lock:
                for k in list(store.pods_by_owner.get(uid, ())):
                    p = store.get("pods", k)
                    if p is None:
                        continue
                    owners = [r.get("uid") for r in p["metadata"].get("ownerReferences") or []]
                    if any(store.by_uid(u) is not None for u in owners):
                        continue
                    p = store.mutate("pods", k, lambda x: self._drop_tracking(x) or x)
                    if p is not None and store.get("pods", k) is not None:
                        try:
                            delete_object(store, "pods", k)
                        except ApiError:
                            pass
        # Pods terminating on a node that does not exist have no kubelet: the pod GC removes them.
        with store.lock:
            for node, keys in list(store.pods_by_node.items()):
                if store.get("nodes", node) is not None:
                    continue
                for k in list(keys):
                    p = store.get("pods", k)
                    if p and p["metadata"].get("deletionTimestamp") and \
                            (parse_ts(p["metadata"]["deletionTimestamp"]) or 0) <= time.time():
                        store.mutate("pods", k, lambda x: (x["metadata"].update(deletionGracePeriodSeconds=0), x)[1])

    def _gc_namespace(self, ns_obj, key):
        store = self.store
        name = ns_obj["metadata"]["name"]
        for plural in ("jobs", "pods", "resourceclaims", "resourceclaimtemplates"):
            for k in list(store.ns_index[plural].get(name, ())):
                o = store.get(plural, k)
                if o is None:
                    continue
                if o["metadata"].get("finalizers"):
                    o = store.mutate(plural, k, lambda x: (x["metadata"].pop("finalizers", None), x)[1])
                if store.get(plural, k) is not None:
                    store.remove(plural, k)
        store.mutate("namespaces", key, lambda x: (x["metadata"].pop("finalizers", None),
                                                   x["spec"].pop("finalizers", None), x)[2])
        if store.get("namespaces", key) is not None:
            store.remove("namespaces", key)

    def _set_finalizers(self, plural, key, fins):
        def f(o):
            if fins:
                o["metadata"]["finalizers"] = fins
            else:
                o["metadata"].pop("finalizers", None)
            return o
        self.store.mutate(plural, key, f)

    @staticmethod
    def _drop_tracking(p):
        fins = [f for f in p["metadata"].get("finalizers") or [] if f != TRACKING_FINALIZER]
        if fins:
            p["metadata"]["finalizers"] = fins
        else:
            p["metadata"].pop("finalizers", None)
        return p

    # ---- Job controller ------------------------------------------------------------------------
    def sync_jobs(self):
        with self.store.lock:
            keys = self.dirty_jobs | self.active_jobs
            self.dirty_jobs = set()
        for key in keys:
            with self.store.lock:
                try:
                    self.sync_job(key)
                except Exception:
                    traceback.print_exc(file=sys.stderr)

    def _delete_pod(self, p):
        try:
            delete_object(self.store, "pods", obj_key(p["metadata"]["namespace"], p["metadata"]["name"]))
        except ApiError:
            pass

    def sync_job(self, key):
        # "Jobs": "Suspending a Job", "Pod backoff failure policy", "Job termination and cleanup"
        # (activeDeadlineSeconds), "Job tracking with finalizers", "Terminal Job conditions"
        # (FailureTarget/SuccessCriteriaMet, then Failed/Complete once no pod is left running).
        store = self.store
        job = store.get("jobs", key)
        if job is None:
            self.active_jobs.discard(key)
            return
        md, spec = job["metadata"], job["spec"]
        uid = md["uid"]
        pods = []
        for k in list(store.pods_by_owner.get(uid, ())):
            p = store.get("pods", k)
            ref = p and controller_ref(p)
            if ref and ref.get("uid") == uid:
                pods.append(p)
        if md.get("deletionTimestamp"):
            # A Job being deleted releases its pods' tracking finalizers.
            for p in pods:
                if TRACKING_FINALIZER in (p["metadata"].get("finalizers") or []):
                    store.mutate("pods", obj_key(p["metadata"]["namespace"], p["metadata"]["name"]),
                                 self._drop_tracking, p["metadata"]["uid"])
            self.active_jobs.discard(key)
            self.deleting.add(("jobs", key))
            return
        status = clone(job.get("status") or {})
        conds = status.get("conditions") or []
        indexed = spec.get("completionMode") == "Indexed"
        succeeded, failed = status.get("succeeded", 0), status.get("failed", 0)
        done_idx = _parse_indexes(status.get("completedIndexes")) if indexed else set()
        # "Job tracking with finalizers": count finished pods once, then release them.
        nonterminal = []
        for p in pods:
            pmd, pst = p["metadata"], p.get("status") or {}
            phase = pst.get("phase")
            gone = pmd.get("deletionTimestamp") and not (p.get("spec") or {}).get("nodeName")
            if phase not in TERMINAL and not gone:
                nonterminal.append(p)
                continue
            if TRACKING_FINALIZER in (pmd.get("finalizers") or []):
                if pmd["uid"] in self.suspend_killed:
                    self.suspend_killed.discard(pmd["uid"])
                elif phase == "Succeeded":
                    succeeded += 1
                    if indexed:
                        try:
                            done_idx.add(int((pmd.get("annotations") or {}).get(
                                "batch.kubernetes.io/job-completion-index")))
                        except (TypeError, ValueError):
                            pass
                else:
                    failed += 1
                store.mutate("pods", obj_key(pmd["namespace"], pmd["name"]), self._drop_tracking, pmd["uid"])
        active = [p for p in nonterminal if not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in nonterminal if p["metadata"].get("deletionTimestamp")]
        ready = sum(1 for p in active if cond_true((p.get("status") or {}).get("conditions"), "Ready"))
        finished = cond_true(conds, "Complete") or cond_true(conds, "Failed")
        tmpl_spec = spec.get("template", {}).get("spec") or {}
        if finished:
            for p in active:
                self._delete_pod(p)
            self.active_jobs.discard(key)
        elif spec.get("suspend"):
            # "Suspending a Job": active pods are terminated, startTime is cleared.
            for p in active:
                self.suspend_killed.add(p["metadata"]["uid"])
                self._delete_pod(p)
            terminating, active = terminating + active, []
            status.pop("startTime", None)
            set_condition(conds, "Suspended", "True", "JobSuspended", "Job suspended")
            self.active_jobs.discard(key)
        else:
            c = get_condition(conds, "Suspended")
            if c and c.get("status") == "True":
                set_condition(conds, "Suspended", "False", "JobResumed", "Job resumed")
            if not status.get("startTime"):
                status["startTime"] = now_ts()
            ft, sc = get_condition(conds, "FailureTarget"), cond_true(conds, "SuccessCriteriaMet")
            ft = ft if ft and ft.get("status") == "True" else None
            if not ft and not sc:
                backoff = spec.get("backoffLimit", 6)
                restarts = 0
                if tmpl_spec.get("restartPolicy") == "OnFailure":
                    for p in active:
                        for cs in ((p.get("status") or {}).get("containerStatuses") or []) + \
                                ((p.get("status") or {}).get("initContainerStatuses") or []):
                            restarts += cs.get("restartCount", 0)
                reason = None
                if failed > backoff or (restarts > 0 and restarts >= max(backoff, 1)):
                    reason = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
                elif spec.get("activeDeadlineSeconds") is not None and \
                        time.time() - (parse_ts(status["startTime"]) or time.time()) >= spec["activeDeadlineSeconds"]:
                    reason = ("DeadlineExceeded", "Job was active longer than specified deadline")
                if reason:
                    set_condition(conds, "FailureTarget", "True", reason[0], reason[1])
                    ft = get_condition(conds, "FailureTarget")
                else:
                    comp = spec.get("completions")
                    if (comp is not None and succeeded >= comp) or (comp is None and succeeded > 0 and not active):
                        set_condition(conds, "SuccessCriteriaMet", "True", "CompletionsReached",
                                      "Reached expected number of succeeded pods")
                        sc = True
            if ft or sc:
                for p in active:
                    self._delete_pod(p)
                if not active and not terminating:
                    if ft:
                        set_condition(conds, "Failed", "True", ft.get("reason"), ft.get("message"))
                    else:
                        set_condition(conds, "Complete", "True", "CompletionsReached",
                                      "Reached expected number of succeeded pods")
                        status["completionTime"] = now_ts()
                    self.active_jobs.discard(key)
                else:
                    self.active_jobs.add(key)
                terminating, active = terminating + active, []
            else:
                self.active_jobs.add(key)
                active = self._manage_pods(job, spec, active, terminating, succeeded, done_idx)
        status["conditions"] = conds
        if not conds:
            status.pop("conditions")
        for f, v in (("active", len(active)), ("succeeded", succeeded), ("failed", failed)):
            if v:
                status[f] = v
            else:
                status.pop(f, None)
        status["ready"] = ready
        status["terminating"] = len(terminating)
        status["uncountedTerminatedPods"] = {}
        if indexed:
            if done_idx:
                status["completedIndexes"] = _fmt_indexes(done_idx)
            else:
                status.pop("completedIndexes", None)
        if status != (job.get("status") or {}):
            new = clone(job)
            new["status"] = status
            store.update("jobs", key, new)

    def _manage_pods(self, job, spec, active, terminating, succeeded, done_idx):
        par = spec.get("parallelism", 1) or 0
        comp = spec.get("completions")
        if comp is None:
            want = par if succeeded == 0 else 0
        else:
            want = max(0, min(par, comp - succeeded))
        have = len(active) + (len(terminating) if spec.get("podReplacementPolicy") == "Failed" else 0)
        if len(active) > want:
            for p in active[want:]:
                self._delete_pod(p)
            return active[:want]
        indexed = spec.get("completionMode") == "Indexed"
        used_idx = set(done_idx)
        for p in active + terminating:
            try:
                used_idx.add(int((p["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")))
            except (TypeError, ValueError):
                pass
        free_idx = [i for i in range(comp or 0) if i not in used_idx] if indexed else []
        out = list(active)
        for n in range(want - have):
            idx = None
            if indexed:
                if not free_idx:
                    break
                idx = free_idx.pop(0)
            out.append(self._create_pod(job, idx))
        return out

    def _create_pod(self, job, index):
        md, tmpl = job["metadata"], clone(job["spec"].get("template") or {})
        tmd = tmpl.get("metadata") or {}
        labels = dict(tmd.get("labels") or {})
        labels.update({"batch.kubernetes.io/controller-uid": md["uid"], "controller-uid": md["uid"],
                       "batch.kubernetes.io/job-name": md["name"], "job-name": md["name"]})
        ann = dict(tmd.get("annotations") or {})
        spec = tmpl.get("spec") or {}
        prefix = md["name"] + "-"
        if index is not None:
            ann["batch.kubernetes.io/job-completion-index"] = str(index)
            labels["batch.kubernetes.io/job-completion-index"] = str(index)
            prefix = "%s-%d-" % (md["name"], index)
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                c.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
        for _ in range(20):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": prefix + rand_suffix(), "generateName": prefix, "namespace": md["namespace"],
                                "labels": labels, "ownerReferences": [{
                                    "apiVersion": "batch/v1", "kind": "Job", "name": md["name"], "uid": md["uid"],
                                    "controller": True, "blockOwnerDeletion": True}],
                                "finalizers": [TRACKING_FINALIZER]},
                   "spec": clone(spec)}
            if ann:
                pod["metadata"]["annotations"] = ann
            if self.store.get("pods", obj_key(md["namespace"], pod["metadata"]["name"])) is None:
                break
        prepare_pod_create(pod)
        return self.store.create("pods", pod)

    # ---- scheduler ------------------------------------------------------------------------------
    def schedule(self):
        # "Scheduling Framework" filter plugins (NodeUnschedulable, TaintToleration, NodeAffinity,
        # NodeResourcesFit), "Pod Scheduling Readiness" (schedulingGates) and the PodScheduled
        # condition with reason Unschedulable ("Pod Lifecycle: Pod conditions").
        store = self.store
        with store.lock:
            now = time.monotonic()
            if self.cluster_changed or now - self.last_full_retry > 10:
                self.pending_pods |= self.unschedulable
                self.unschedulable.clear()
                self.cluster_changed = False
                self.last_full_retry = now
            if not self.pending_pods:
                return
            keys = sorted(self.pending_pods)
            self.pending_pods = set()
            nodes = [store.objs["nodes"][k] for k in store.sorted_keys("nodes", None)]
            usage = {}
            inv = None

            def used(name):
                if name not in usage:
                    tot, n = collections.Counter(), 0
                    for k in store.pods_by_node.get(name, ()):
                        p = store.get("pods", k)
                        if p and (p.get("status") or {}).get("phase") not in TERMINAL:
                            tot.update(pod_requests(p.get("spec") or {}))
                            n += 1
                    usage[name] = [tot, n]
                return usage[name]
            for key in keys:
                pod = store.get("pods", key)
                if pod is None:
                    continue
                spec = pod.get("spec") or {}
                if spec.get("nodeName") or pod["metadata"].get("deletionTimestamp") or \
                        (pod.get("status") or {}).get("phase") in TERMINAL:
                    continue
                if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
                    continue
                if spec.get("schedulingGates"):
                    self._pod_condition(key, "False", "SchedulingGated",
                                        "Scheduling is blocked due to non-empty scheduling gates")
                    continue
                req = pod_requests(spec)
                reasons = collections.Counter()
                chosen = None
                # Dynamic Resource Allocation (dra.py): the pod's claims, generated from templates if
                # need be; a missing claim keeps the pod pending with the reason.
                claims = dra.pod_claims(store, pod) if spec.get("resourceClaims") else []
                missing = [why for _, _, why in claims if why]
                if missing:
                    self._pod_condition(key, "False", "Unschedulable", missing[0])
                    self.unschedulable.add(key)
                    continue
                allocs = {}
                for n in nodes:
                    u = used(n["metadata"]["name"])
                    r = fit_reasons(pod, req, n, u[0], u[1])
                    if not r and claims:
                        if inv is None:
                            inv = dra.Inventory(store)
                        allocs = self._allocate_claims(claims, n["metadata"]["name"], inv)
                        if allocs is None:
                            inv = dra.Inventory(store)       # what this node's attempt took is given back
                            r = ["cannot allocate all claims"]
                    if not r:
                        chosen = n
                        break
                    reasons.update(r)
                if chosen is None:
                    if nodes:
                        msg = "0/%d nodes are available: %s." % (
                            len(nodes), ", ".join("%d %s" % (c, r) for r, c in sorted(reasons.items())))
                    else:
                        msg = "no nodes available to schedule pods"
                    self._pod_condition(key, "False", "Unschedulable", msg)
                    self.unschedulable.add(key)
                    continue
                name = chosen["metadata"]["name"]

                def bind(p, name=name):
                    p["spec"]["nodeName"] = name
                    conds = p.setdefault("status", {}).setdefault("conditions", [])
                    set_condition(conds, "PodScheduled", "True", None, None)
                    c = get_condition(conds, "PodScheduled")
                    c.pop("reason", None)
                    c.pop("message", None)
                    c["lastProbeTime"] = None
                    return p
                store.mutate("pods", key, bind)
                for ckey, alloc in allocs.items():
                    dra.reserve(store, ckey, pod, alloc)
                u = used(name)
                u[0].update(req)
                u[1] += 1

    def _allocate_claims(self, claims, node, inv):
        """{claim key: new allocation or None (already allocated here)} for a pod on `node`, or None."""
        out = {}
        for _, ckey, _ in claims:
            c = self.store.get("resourceclaims", ckey)
            if (c.get("status") or {}).get("allocation"):
                if dra.allocated_node(c) not in ("", node):
                    return None
                out[ckey] = None
                continue
            a = dra.allocate(self.store, inv, c, node)
            if a is None:
                return None
            out[ckey] = a
        return out

    def _pod_condition(self, key, status, reason, msg):
        def f(p):
            conds = p.setdefault("status", {}).setdefault("conditions", [])
            c = get_condition(conds, "PodScheduled")
            if c and (c.get("status"), c.get("reason"), c.get("message")) == (status, reason, msg):
                return None
            set_condition(conds, "PodScheduled", status, reason, msg)
            get_condition(conds, "PodScheduled")["lastProbeTime"] = None
            return p
        self.store.mutate("pods", key, f)
