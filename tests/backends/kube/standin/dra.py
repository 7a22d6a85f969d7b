"""Dynamic Resource Allocation (resource.k8s.io/v1) in the stand-in: a TEST DOUBLE for what a real
API server, kube-scheduler and kube-controller-manager do with DRA objects, which cannot run on the
machines the tests run on. Written from the Kubernetes documentation ("Dynamic Resource
Allocation", "Allocate Devices to Workloads with DRA", the resource.k8s.io/v1 API reference), not
from what Tessera's client expects.

- ResourceClaim, ResourceClaimTemplate, ResourceSlice, DeviceClass: create/get/list/watch/update/
  patch/delete like the other kinds, with the defaulting and validation below.
- The allocator (the scheduler's DynamicResources plugin, "structured parameters"): a pending pod's
  claims (spec.resourceClaims: resourceClaimName, or resourceClaimTemplateName, from which a claim
  `<pod>-<entry>-<5 chars>` owned by the pod is generated, as the resourceclaim controller does)
  are allocated on the node the pod is placed on. Devices come from the node's ResourceSlices
  (spec.nodeName or spec.allNodes); a device matches when the DeviceClass's and the request's CEL
  selectors hold; a device is used by at most one claim; partitionable devices' consumesCounters
  must fit their counter set (spec.sharedCounters, per driver and pool) beside the devices already
  allocated. The result is written to the claim's status.allocation (devices.results, the class's
  and the claim's opaque config, a nodeSelector pinning the node) and the pod is added to
  status.reservedFor. A pod whose claims cannot be allocated anywhere stays Pending/Unschedulable
  ("N cannot allocate all claims").
- The claim controller: reservations of pods that are gone or ended are removed; a claim reserved
  for nobody is deallocated; generated claims go with their pod; claims whose owners are all gone
  are deleted (garbage collection).

Known differences from the real thing: CEL is a subset: `&&`, `||`, `!`, parentheses, `==`/`!=`
between `device.driver`, `device.attributes['DOMAIN'].NAME` and string/int/bool literals; other
expressions are refused at create with 422. DeviceRequest `constraints`, `adminAccess`, device
taints, consumable capacity and binding conditions are stored but not used. Allocation picks the
first fitting devices in (driver, pool, name) order: no scoring.
"""
import collections
import re

from .store import obj_key
from .util import clone, invalid, now_ts, parse_quantity, rand_suffix

PLURALS = ("resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses")
MAX_REQUESTS = 32
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# ---- a small CEL subset ----------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(&&|\|\||==|!=|[()!.\[\]])|('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")|"
                    r"(-?[0-9]+)|([A-Za-z_][A-Za-z0-9_]*))")


class CelError(Exception):
    pass


def _tokens(expr):
    out, pos = [], 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise CelError("unexpected character at position %d" % pos)
        pos = m.end()
        if m.group(1):
            out.append(("op", m.group(1)))
        elif m.group(2):
            out.append(("lit", m.group(2)[1:-1]))
        elif m.group(3):
            out.append(("lit", int(m.group(3))))
        else:
            word = m.group(4)
            out.append(("lit", word == "true") if word in ("true", "false") else ("id", word))
    return out


class _Parser:
    """or := and ('||' and)*; and := not ('&&' not)*; not := '!' not | cmp; cmp := value (('=='|'!=') value)?
    value := '(' or ')' | literal | 'device' '.' ('driver' | 'attributes' '[' string ']' '.' name)"""

    def __init__(self, expr):
        self.t, self.i = _tokens(expr), 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else (None, None)

    def take(self, kind=None, value=None):
        k, v = self.peek()
        if k is None or (kind and k != kind) or (value is not None and v != value):
            raise CelError("expected %s" % (value or kind or "more"))
        self.i += 1
        return v

    def parse(self):
        e = self.or_()
        if self.i != len(self.t):
            raise CelError("unexpected %r" % (self.peek()[1],))
        return e

    def or_(self):
        e = self.and_()
        while self.peek() == ("op", "||"):
            self.i += 1
            e = ("or", e, self.and_())
        return e

    def and_(self):
        e = self.not_()
        while self.peek() == ("op", "&&"):
            self.i += 1
            e = ("and", e, self.not_())
        return e

    def not_(self):
        if self.peek() == ("op", "!"):
            self.i += 1
            return ("not", self.not_())
        e = self.value()
        if self.peek() in (("op", "=="), ("op", "!=")):
            op = self.take("op")
            e = (op, e, self.value())
        return e

    def value(self):
        k, v = self.peek()
        if (k, v) == ("op", "("):
            self.i += 1
            e = self.or_()
            self.take("op", ")")
            return e
        if k == "lit":
            self.i += 1
            return ("lit", v)
        if (k, v) == ("id", "device"):
            self.i += 1
            self.take("op", ".")
            what = self.take("id")
            if what == "driver":
                return ("driver",)
            if what == "attributes":
                self.take("op", "[")
                domain = self.take("lit")
                self.take("op", "]")
                self.take("op", ".")
                return ("attr", str(domain), self.take("id"))
            raise CelError("device.%s is not supported by the stand-in" % what)
        raise CelError("unexpected %r" % (v,))


def compile_cel(expr):
    if not isinstance(expr, str) or not expr.strip():
        raise CelError("expression is empty")
    return _Parser(expr).parse()


def _attr(device, driver, domain, name):
    attrs = device.get("attributes") or {}
    v = attrs.get(domain + "/" + name)
    if v is None and domain == driver:
        v = attrs.get(name)      # short names are in the driver's own domain
    if not isinstance(v, dict):
        return None
    for k in ("string", "int", "bool", "version"):
        if k in v:
            return v[k]
    return None


def _eval(e, device, driver):
    op = e[0]
    if op == "lit":
        return e[1]
    if op == "driver":
        return driver
    if op == "attr":
        return _attr(device, driver, e[1], e[2])
    if op == "not":
        return not _eval(e[1], device, driver)
    if op == "and":
        return bool(_eval(e[1], device, driver)) and bool(_eval(e[2], device, driver))
    if op == "or":
        return bool(_eval(e[1], device, driver)) or bool(_eval(e[2], device, driver))
    a, b = _eval(e[1], device, driver), _eval(e[2], device, driver)
    if a is None or b is None:       # a missing attribute: the selector does not match
        return False
    return (a == b) if op == "==" else (a != b)


def _selectors_ok(selectors, device, driver):
    for s in selectors or []:
        expr = ((s or {}).get("cel") or {}).get("expression")
        try:
            if not _eval(compile_cel(expr), device, driver):
                return False
        except CelError:
            return False
    return True


# ---- defaulting and validation ----------------------------------------------------------------------
def _selector_errors(selectors, path, causes):
    if selectors is None:
        return
    if not isinstance(selectors, list):
        causes.append((path, "FieldValueInvalid", "Invalid value: must be a list"))
        return
    for i, s in enumerate(selectors):
        p = "%s[%d].cel.expression" % (path, i)
        expr = ((s or {}).get("cel") or {}).get("expression") if isinstance(s, dict) else None
        if expr is None:
            causes.append((p, "FieldValueRequired", "Required value"))
            continue
        try:
            compile_cel(expr)
        except CelError as e:
            causes.append((p, "FieldValueInvalid", 'Invalid value: "%s": compilation failed: %s' % (expr, e)))


def _exact_errors(x, path, causes):
    if not isinstance(x, dict):
        causes.append((path, "FieldValueInvalid", "Invalid value: must be an object"))
        return
    cls = x.get("deviceClassName")
    if not cls:
        causes.append((path + ".deviceClassName", "FieldValueRequired", "Required value"))
    elif not isinstance(cls, str) or not DNS_SUBDOMAIN.match(cls):
        causes.append((path + ".deviceClassName", "FieldValueInvalid",
                       'Invalid value: "%s": a lowercase RFC 1123 subdomain must consist of lower case '
                       "alphanumeric characters, '-' or '.'" % cls))
    mode = x.setdefault("allocationMode", "ExactCount")     # SetDefaults_ExactDeviceRequest
    if mode not in ("ExactCount", "All"):
        causes.append((path + ".allocationMode", "FieldValueNotSupported",
                       'Unsupported value: "%s": supported values: "All", "ExactCount"' % mode))
    elif mode == "ExactCount":
        x.setdefault("count", 1)
        if not isinstance(x["count"], int) or isinstance(x["count"], bool) or x["count"] < 1:
            causes.append((path + ".count", "FieldValueInvalid",
                           "Invalid value: %s: must be greater than zero" % json_str(x["count"])))
    elif "count" in x:
        causes.append((path + ".count", "FieldValueInvalid",
                       "Invalid value: %s: must not be specified when allocationMode is 'All'" % x["count"]))
    _selector_errors(x.get("selectors"), path + ".selectors", causes)


def json_str(v):
    return '"%s"' % v if isinstance(v, str) else str(v)


def _claim_spec_errors(spec, path, causes):
    """ResourceClaimSpec: devices.requests (exactly one of exactly/firstAvailable each, unique DNS-label
    names, at most 32), devices.config (requests named in the claim, opaque driver and parameters)."""
    if not isinstance(spec, dict):
        causes.append((path, "FieldValueRequired", "Required value"))
        return
    devices = spec.get("devices") or {}
    reqs = devices.get("requests") or []
    if not isinstance(reqs, list):
        causes.append((path + ".devices.requests", "FieldValueInvalid", "Invalid value: must be a list"))
        return
    if len(reqs) > MAX_REQUESTS:
        causes.append((path + ".devices.requests", "FieldValueTooMany",
                       "Too many: %d: must have at most %d items" % (len(reqs), MAX_REQUESTS)))
    names = set()
    for i, r in enumerate(reqs):
        p = "%s.devices.requests[%d]" % (path, i)
        if not isinstance(r, dict):
            causes.append((p, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        name = r.get("name")
        if not name:
            causes.append((p + ".name", "FieldValueRequired", "Required value"))
        elif not isinstance(name, str) or not DNS_LABEL.match(name):
            causes.append((p + ".name", "FieldValueInvalid", 'Invalid value: "%s": a lowercase RFC 1123 label '
                           "must consist of lower case alphanumeric characters or '-'" % name))
        elif name in names:
            causes.append((p + ".name", "FieldValueDuplicate", 'Duplicate value: "%s"' % name))
        names.add(name)
        has_exact, has_first = r.get("exactly") is not None, r.get("firstAvailable") is not None
        if has_exact == has_first:
            causes.append((p, "FieldValueRequired", "Required value: exactly one of `exactly` or "
                           "`firstAvailable` is required"))
        elif has_exact:
            _exact_errors(r["exactly"], p + ".exactly", causes)
        else:
            subs = r["firstAvailable"] if isinstance(r["firstAvailable"], list) else []
            for j, sub in enumerate(subs):
                sp = "%s.firstAvailable[%d]" % (p, j)
                if not isinstance(sub, dict) or not sub.get("name"):
                    causes.append((sp + ".name", "FieldValueRequired", "Required value"))
                    continue
                names.add("%s/%s" % (name, sub["name"]))
                _exact_errors(sub, sp, causes)
    for i, c in enumerate(devices.get("config") or []):
        p = "%s.devices.config[%d]" % (path, i)
        if not isinstance(c, dict):
            causes.append((p, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        for j, rn in enumerate(c.get("requests") or []):
            if rn not in names:
                causes.append(("%s.requests[%d]" % (p, j), "FieldValueInvalid",
                               'Invalid value: "%s": must be the name of a request in the claim or the name of '
                               "a request and a subrequest separated by '/'" % rn))
        op = c.get("opaque")
        if not isinstance(op, dict):
            causes.append((p + ".opaque", "FieldValueRequired", "Required value"))
            continue
        if not op.get("driver"):
            causes.append((p + ".opaque.driver", "FieldValueRequired", "Required value"))
        if not isinstance(op.get("parameters"), dict):
            causes.append((p + ".opaque.parameters", "FieldValueRequired", "Required value"))


def _counters_errors(counters, path, causes):
    if not isinstance(counters, dict) or not counters:
        causes.append((path, "FieldValueRequired", "Required value"))
        return
    for k, v in counters.items():
        try:
            parse_quantity((v or {}).get("value") if isinstance(v, dict) else None)
        except (ValueError, TypeError):
            causes.append(("%s[%s].value" % (path, k), "FieldValueInvalid", "Invalid value: not a quantity"))


def _slice_errors(obj, causes):
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        causes.append(("spec", "FieldValueRequired", "Required value"))
        return
    if not spec.get("driver"):
        causes.append(("spec.driver", "FieldValueRequired", "Required value"))
    pool = spec.get("pool")
    if not isinstance(pool, dict) or not pool.get("name"):
        causes.append(("spec.pool.name", "FieldValueRequired", "Required value"))
    elif not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] < 1:
        causes.append(("spec.pool.resourceSliceCount", "FieldValueInvalid",
                       "Invalid value: %s: must be greater than zero" % pool.get("resourceSliceCount")))
    elif not isinstance(pool.get("generation"), int) or pool["generation"] < 0:
        causes.append(("spec.pool.generation", "FieldValueInvalid", "Invalid value: must be greater than or "
                       "equal to 0"))
    where = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)]
    if len(where) != 1:
        causes.append(("spec", "FieldValueRequired", "Required value: exactly one of `nodeName`, "
                       "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"))
    sets = set()
    for i, cs in enumerate(spec.get("sharedCounters") or []):
        p = "spec.sharedCounters[%d]" % i
        if not isinstance(cs, dict) or not cs.get("name"):
            causes.append((p + ".name", "FieldValueRequired", "Required value"))
            continue
        if cs["name"] in sets:
            causes.append((p + ".name", "FieldValueDuplicate", 'Duplicate value: "%s"' % cs["name"]))
        sets.add(cs["name"])
        _counters_errors(cs.get("counters"), p + ".counters", causes)
    devs = set()
    for i, d in enumerate(spec.get("devices") or []):
        p = "spec.devices[%d]" % i
        if not isinstance(d, dict) or not d.get("name"):
            causes.append((p + ".name", "FieldValueRequired", "Required value"))
            continue
        if d["name"] in devs:
            causes.append((p + ".name", "FieldValueDuplicate", 'Duplicate value: "%s"' % d["name"]))
        devs.add(d["name"])
        for j, cc in enumerate(d.get("consumesCounters") or []):
            cp = "%s.consumesCounters[%d]" % (p, j)
            if not isinstance(cc, dict) or not cc.get("counterSet"):
                causes.append((cp + ".counterSet", "FieldValueRequired", "Required value"))
                continue
            _counters_errors(cc.get("counters"), cp + ".counters", causes)


def validate(kinfo, obj):
    """Create: defaulting and validation of the four kinds (422 Invalid with the field paths)."""
    causes = []
    if kinfo.plural == "resourceclaims":
        _claim_spec_errors(obj.get("spec"), "spec", causes)
    elif kinfo.plural == "resourceclaimtemplates":
        _claim_spec_errors((obj.get("spec") or {}).get("spec"), "spec.spec", causes)
    elif kinfo.plural == "resourceslices":
        _slice_errors(obj, causes)
    elif kinfo.plural == "deviceclasses":
        _selector_errors((obj.get("spec") or {}).get("selectors"), "spec.selectors", causes)
    if causes:
        raise invalid(kinfo, obj["metadata"].get("name", ""), causes)


def validate_update(kinfo, cur, new):
    """Claims' and claim templates' specs are immutable; slices and classes are validated again."""
    if kinfo.plural in ("resourceclaims", "resourceclaimtemplates"):
        if new.get("spec") != cur.get("spec"):
            raise invalid(kinfo, cur["metadata"]["name"], [("spec", "FieldValueInvalid",
                                                            "Invalid value: field is immutable")])
    else:
        validate(kinfo, new)


def validate_status_update(kinfo, cur, new):
    """status.allocation may be set once and cleared, not changed ("allocation is immutable")."""
    old_a, new_a = (cur.get("status") or {}).get("allocation"), (new.get("status") or {}).get("allocation")
    if old_a is not None and new_a is not None and old_a != new_a:
        raise invalid(kinfo, cur["metadata"]["name"], [("status.allocation", "FieldValueInvalid",
                                                        "Invalid value: field is immutable")])


# ---- inventory and allocation ------------------------------------------------------------------------
class Inventory:
    """The devices of every ResourceSlice and what allocated claims already hold (built per scheduling
    pass, updated as the pass allocates)."""

    def __init__(self, store):
        self.devices = collections.defaultdict(list)    # node ("" : all nodes) -> [(driver, pool, device)]
        self.counters = {}                              # (driver, pool, set) -> {counter: Fraction}
        self.used = set()                               # (driver, pool, device)
        self.used_counters = collections.defaultdict(collections.Counter)
        self.consumes = {}                              # (driver, pool, device) -> [(set, {c: Fraction})]
        for key in store.sorted_keys("resourceslices", None):
            s = store.get("resourceslices", key)
            spec = (s or {}).get("spec") or {}
            driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
            for cs in spec.get("sharedCounters") or []:
                self.counters[(driver, pool, cs["name"])] = {
                    c: parse_quantity((v or {}).get("value", 0)) for c, v in (cs.get("counters") or {}).items()}
            node = "" if spec.get("allNodes") else spec.get("nodeName", "")
            if not node and not spec.get("allNodes"):
                continue         # nodeSelector / perDeviceNodeSelection: not placed by the stand-in
            for d in spec.get("devices") or []:
                self.devices[node].append((driver, pool, d))
                self.consumes[(driver, pool, d["name"])] = [
                    (cc.get("counterSet"), {c: parse_quantity((v or {}).get("value", 0))
                                            for c, v in (cc.get("counters") or {}).items()})
                    for cc in d.get("consumesCounters") or []]
        for key in store.sorted_keys("resourceclaims", None):
            c = store.get("resourceclaims", key)
            alloc = ((c or {}).get("status") or {}).get("allocation")
            for r in ((alloc or {}).get("devices") or {}).get("results") or []:
                self.take((r.get("driver"), r.get("pool"), r.get("device")))

    def take(self, dev):
        self.used.add(dev)
        for cset, cs in self.consumes.get(dev, ()):
            self.used_counters[(dev[0], dev[1], cset)].update(cs)

    def fits(self, dev):
        if dev in self.used:
            return False
        for cset, cs in self.consumes.get(dev, ()):
            total = self.counters.get((dev[0], dev[1], cset))
            if total is None:
                return False
            used = self.used_counters[(dev[0], dev[1], cset)]
            for c, q in cs.items():
                if used.get(c, 0) + q > total.get(c, 0):
                    return False
        return True

    def on_node(self, node):
        return sorted(self.devices.get(node, []) + self.devices.get("", []),
                      key=lambda t: (t[0], t[1], t[2]["name"]))


def _pick(inv, node, exact, classes, picked):
    """Devices for one exact request on `node` (None when it cannot be met)."""
    cls = classes.get(exact.get("deviceClassName"))
    if cls is None:
        return None
    want = [] if exact.get("allocationMode") == "All" else None
    count = exact.get("count", 1)
    before = (set(inv.used), clone_counters(inv.used_counters), set(picked))
    out = []
    for driver, pool, d in inv.on_node(node):
        dev = (driver, pool, d["name"])
        if dev in picked or not inv.fits(dev):
            continue
        if not _selectors_ok((cls.get("spec") or {}).get("selectors"), d, driver):
            continue
        if not _selectors_ok(exact.get("selectors"), d, driver):
            continue
        out.append(dev)
        inv.take(dev)              # counters of the devices picked so far count for the next ones
        picked.add(dev)
        if want is None and len(out) == count:
            break
    if (want is None and len(out) < count) or not out:
        inv.used, inv.used_counters = before[0], before[1]
        picked.clear()
        picked.update(before[2])
        return None
    return out


def allocate(store, inv, claim, node):
    """status.allocation for `claim` on `node`, or None; `inv` is updated only on success."""
    classes = {k: store.get("deviceclasses", k) for k in store.sorted_keys("deviceclasses", None)}
    trial_used, trial_counters = set(inv.used), clone_counters(inv.used_counters)
    picked, results, class_cfg = set(), [], []
    for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        options = [(r["name"], r["exactly"])] if r.get("exactly") is not None else [
            ("%s/%s" % (r["name"], s["name"]), s) for s in r.get("firstAvailable") or []]
        got = None
        for name, exact in options:
            got = _pick(inv, node, exact, classes, picked)
            if got is not None:
                for cfg in (classes[exact["deviceClassName"]].get("spec") or {}).get("config") or []:
                    if cfg.get("opaque"):
                        class_cfg.append({"source": "FromClass", "requests": [name], "opaque": clone(cfg["opaque"])})
                results += [{"request": name, "driver": d[0], "pool": d[1], "device": d[2]} for d in got]
                break
        if got is None:
            inv.used, inv.used_counters = trial_used, trial_counters
            return None
    cfgs = class_cfg + [dict({"source": "FromClaim", "opaque": clone(c["opaque"])},
                             **({"requests": list(c["requests"])} if c.get("requests") else {}))
                        for c in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []]
    devices = {"results": results}
    if cfgs:
        devices["config"] = cfgs
    return {"devices": devices, "allocationTimestamp": now_ts(),
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


def clone_counters(c):
    out = collections.defaultdict(collections.Counter)
    for k, v in c.items():
        out[k] = collections.Counter(v)
    return out


def allocated_node(claim):
    """The node a claim's allocation pins, "" for none (or any)."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    for t in (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return f["values"][0]
    return ""


def pod_claims(store, pod):
    """The claims a pod uses: [(entry name, claim key or None, why)], generating claims from templates
    (the resourceclaim controller's job) and recording them in status.resourceClaimStatuses."""
    md, spec = pod["metadata"], pod.get("spec") or {}
    ns = md["namespace"]
    statuses = {s.get("name"): s.get("resourceClaimName")
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out, new_status = [], False
    for entry in spec.get("resourceClaims") or []:
        name = entry.get("name")
        if entry.get("resourceClaimName"):
            cname = entry["resourceClaimName"]
        elif entry.get("resourceClaimTemplateName"):
            cname = statuses.get(name)
            if not cname:
                tmpl = store.get("resourceclaimtemplates", obj_key(ns, entry["resourceClaimTemplateName"]))
                if tmpl is None:
                    out.append((name, None, 'resourceclaimtemplate "%s" not found'
                                % entry["resourceClaimTemplateName"]))
                    continue
                cname = "%s-%s-%s" % (md["name"][:28], name[:24], rand_suffix())
                tm = (tmpl["spec"].get("metadata") or {})
                claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                         "metadata": {"name": cname, "namespace": ns,
                                      "labels": dict(tm.get("labels") or {}),
                                      "annotations": dict(tm.get("annotations") or {},
                                                          **{"resource.kubernetes.io/pod-claim-name": name}),
                                      "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": md["name"],
                                                           "uid": md["uid"], "controller": True,
                                                           "blockOwnerDeletion": True}]},
                         "spec": clone(tmpl["spec"]["spec"])}
                if not claim["metadata"]["labels"]:
                    del claim["metadata"]["labels"]
                store.create("resourceclaims", claim)
                statuses[name] = cname
                new_status = True
        else:
            out.append((name, None, "pod claim %s names neither a claim nor a template" % name))
            continue
        key = obj_key(ns, cname)
        out.append((name, key, None if store.get("resourceclaims", key) is not None
                    else 'resourceclaim "%s" not found' % cname))
    if new_status:
        def f(p):
            p.setdefault("status", {})["resourceClaimStatuses"] = [
                {"name": n, "resourceClaimName": c} for n, c in statuses.items()]
            return p
        store.mutate("pods", obj_key(ns, md["name"]), f)
    return out


def reserve(store, key, pod, allocation):
    """Writes the allocation (when new) and adds the pod to status.reservedFor."""
    md = pod["metadata"]

    def f(c):
        st = c.setdefault("status", {})
        if allocation is not None:
            st["allocation"] = allocation
        res = st.setdefault("reservedFor", [])
        if not any(r.get("uid") == md["uid"] for r in res):
            res.append({"resource": "pods", "name": md["name"], "uid": md["uid"]})
        return c
    store.mutate("resourceclaims", key, f)


def sync_claims(store, terminal=("Succeeded", "Failed")):
    """The resourceclaim controller and the garbage collector for claims (one pass)."""
    with store.lock:
        for key in list(store.sorted_keys("resourceclaims", None)):
            c = store.get("resourceclaims", key)
            if c is None:
                continue
            md = c["metadata"]
            owners = md.get("ownerReferences") or []
            if owners and all(store.by_uid(r.get("uid")) is None for r in owners):
                store.remove("resourceclaims", key)           # every owner is gone: Background GC
                continue
            pod_owner = next((r for r in owners if r.get("kind") == "Pod" and r.get("controller")), None)
            if pod_owner is not None:
                p = store.by_uid(pod_owner.get("uid"))
                if p is None or (p.get("status") or {}).get("phase") in terminal:
                    store.remove("resourceclaims", key)       # a generated claim goes with its pod
                    continue
            st = c.get("status") or {}
            res = st.get("reservedFor") or []
            keep = []
            for r in res:
                p = store.by_uid(r.get("uid"))
                if p is not None and (p.get("status") or {}).get("phase") not in terminal:
                    keep.append(r)
            if keep == res and (keep or not st.get("allocation")):
                continue

            def f(x, keep=keep):
                s = x.setdefault("status", {})
                if keep:
                    s["reservedFor"] = keep
                else:
                    s.pop("reservedFor", None)
                    s.pop("allocation", None)             # reserved for nobody: deallocated
                    s.pop("devices", None)
                if not s:
                    x.pop("status")
                return x
            store.mutate("resourceclaims", key, f)

