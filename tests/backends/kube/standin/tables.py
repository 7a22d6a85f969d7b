"""Server-side printing: meta.k8s.io/v1 Table ("API concepts: Receiving resources as Tables"),
with the columns of the real server's printers for Jobs, Pods, Nodes and Namespaces."""
import time

from .util import parse_ts


def human_duration(secs):
    """apimachinery duration.HumanDuration."""
    s = int(max(0, secs))
    if s < 120:
        return "%ds" % s
    m = s // 60
    if m < 10:
        return "%dm%ds" % (m, s % 60) if s % 60 else "%dm" % m
    if m < 180:
        return "%dm" % m
    h = m // 60
    if h < 8:
        return "%dh%dm" % (h, m % 60) if m % 60 else "%dh" % h
    if h < 48:
        return "%dh" % h
    d = h // 24
    if h < 24 * 8:
        return "%dd%dh" % (d, h % 24) if h % 24 else "%dd" % d
    if d < 365 * 2:
        return "%dd" % d
    return "%dy" % (d // 365)


def _age(o):
    t = parse_ts(o["metadata"].get("creationTimestamp"))
    return "<unknown>" if t is None else human_duration(time.time() - t)


def _col(name, typ="string", fmt="", desc="", prio=0):
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": prio}


def _has(conds, t):
    return any(c.get("type") == t and c.get("status") == "True" for c in conds or [])


def _job(o):
    spec, st = o.get("spec") or {}, o.get("status") or {}
    conds = st.get("conditions")
    if _has(conds, "Complete"):
        status = "Complete"
    elif _has(conds, "Failed"):
        status = "Failed"
    elif o["metadata"].get("deletionTimestamp"):
        status = "Terminating"
    elif _has(conds, "Suspended"):
        status = "Suspended"
    elif _has(conds, "FailureTarget"):
        status = "FailureTarget"
    elif _has(conds, "SuccessCriteriaMet"):
        status = "SuccessCriteriaMet"
    else:
        status = "Running"
    succ = st.get("succeeded", 0)
    if spec.get("completions") is not None:
        comp = "%d/%d" % (succ, spec["completions"])
    elif (spec.get("parallelism") or 0) > 1:
        comp = "%d/1 of %d" % (succ, spec["parallelism"])
    else:
        comp = "%d/1" % succ
    start = parse_ts(st.get("startTime"))
    end = parse_ts(st.get("completionTime")) or time.time()
    dur = human_duration(end - start) if start else ""
    tspec = (spec.get("template") or {}).get("spec") or {}
    sel = ",".join("%s=%s" % kv for kv in sorted(((spec.get("selector") or {}).get("matchLabels") or {}).items()))
    return [o["metadata"]["name"], status, comp, dur, _age(o),
            ",".join(c.get("name", "") for c in tspec.get("containers") or []),
            ",".join(c.get("image", "") for c in tspec.get("containers") or []), sel]


def _pod(o):
    spec, st = o.get("spec") or {}, o.get("status") or {}
    css = st.get("containerStatuses") or []
    ready = sum(1 for c in css if c.get("ready"))
    reason = st.get("reason") or st.get("phase") or "Pending"
    restarts = sum(c.get("restartCount", 0) for c in css)
    for c in css:
        state = c.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            t = state["terminated"]
            reason = t.get("reason") or ("Signal:%d" % t.get("signal") if t.get("signal") else
                                         "ExitCode:%d" % t.get("exitCode", 0))
    if not st.get("reason") and st.get("phase") == "Succeeded":
        reason = "Completed"
    if o["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    if not spec.get("nodeName") and st.get("phase", "Pending") == "Pending":
        for c in st.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
                reason = "SchedulingGated"
    return [o["metadata"]["name"], "%d/%d" % (ready, len(spec.get("containers") or [])), reason, str(restarts),
            _age(o), st.get("podIP") or "<none>", spec.get("nodeName") or "<none>", "<none>", "<none>"]


def _node(o):
    spec, st = o.get("spec") or {}, o.get("status") or {}
    conds = st.get("conditions") or []
    ready = [c for c in conds if c.get("type") == "Ready"]
    if not conds:
        status = "Ready"
    elif not ready:
        status = "Unknown"
    else:
        status = "Ready" if ready[0].get("status") == "True" else "NotReady"
    if spec.get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(k.split("/", 1)[1] for k in (o["metadata"].get("labels") or {})
                   if k.startswith("node-role.kubernetes.io/") and "/" in k)
    info = st.get("nodeInfo") or {}
    addr = lambda t: next((a.get("address") for a in st.get("addresses") or [] if a.get("type") == t), "<none>")
    return [o["metadata"]["name"], status, ",".join(roles) or "<none>", _age(o), info.get("kubeletVersion", ""),
            addr("InternalIP"), addr("ExternalIP"), info.get("osImage", "<unknown>"),
            info.get("kernelVersion", "<unknown>"), info.get("containerRuntimeVersion", "<unknown>")]


def _ns(o):
    return [o["metadata"]["name"], (o.get("status") or {}).get("phase", "Active"), _age(o)]


N = "Name must be unique within a namespace."
COLUMNS = {
    "jobs": [_col("Name", fmt="name", desc=N), _col("Status"), _col("Completions"), _col("Duration"), _col("Age"),
             _col("Containers", prio=1), _col("Images", prio=1), _col("Selector", prio=1)],
    "pods": [_col("Name", fmt="name", desc=N), _col("Ready"), _col("Status"), _col("Restarts"),
             _col("Age"), _col("IP", prio=1), _col("Node", prio=1), _col("Nominated Node", prio=1),
             _col("Readiness Gates", prio=1)],
    "nodes": [_col("Name", fmt="name", desc=N), _col("Status"), _col("Roles"), _col("Age"), _col("Version"),
              _col("Internal-IP", prio=1), _col("External-IP", prio=1), _col("OS-Image", prio=1),
              _col("Kernel-Version", prio=1), _col("Container-Runtime", prio=1)],
    "namespaces": [_col("Name", fmt="name", desc=N), _col("Status"), _col("Age")],
}
# resource.k8s.io/v1 (kubectl's printers): claims NAME STATE AGE, the others NAME ... AGE.
def _claim(o):
    st = o.get("status") or {}
    state = "allocated,reserved" if st.get("reservedFor") else ("allocated" if st.get("allocation") else "pending")
    return [o["metadata"]["name"], state, _age(o)]


def _slice(o):
    spec = o.get("spec") or {}
    return [o["metadata"]["name"], spec.get("nodeName", ""), spec.get("driver", ""),
            (spec.get("pool") or {}).get("name", ""), _age(o)]


COLUMNS.update({
    "resourceclaims": [_col("Name", fmt="name", desc=N), _col("State"), _col("Age")],
    "resourceclaimtemplates": [_col("Name", fmt="name", desc=N), _col("Age")],
    "resourceslices": [_col("Name", fmt="name", desc=N), _col("Node"), _col("Driver"), _col("Pool"), _col("Age")],
    "deviceclasses": [_col("Name", fmt="name", desc=N), _col("Age")],
})
ROWS = {"jobs": _job, "pods": _pod, "nodes": _node, "namespaces": _ns, "resourceclaims": _claim,
        "resourceclaimtemplates": lambda o: [o["metadata"]["name"], _age(o)], "resourceslices": _slice,
        "deviceclasses": lambda o: [o["metadata"]["name"], _age(o)]}


def to_table(plural, kinfo, objs, meta, include="Metadata", columns=True):
    rows = []
    for o in objs:
        row = {"cells": ROWS[plural](o)}
        if include == "Object":
            full = dict(o)
            full.setdefault("kind", kinfo.kind)
            full.setdefault("apiVersion", kinfo.api_version)
            row["object"] = full
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": o["metadata"]}
        rows.append(row)
    t = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "rows": rows}
    if columns:
        t["columnDefinitions"] = COLUMNS[plural]
    return t
