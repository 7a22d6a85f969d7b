"""Defaulting and validation of the objects the stand-in stores.

Job rules follow the Job documentation: "Pod Template" (restartPolicy Never/OnFailure),
"Specifying your own Pod selector" (auto-generated selector and labels), "Suspending a Job",
"Mutable Scheduling Directives", "Elastic Indexed Jobs" (completions may change together with
parallelism for Indexed Jobs), and the immutable fields of JobSpec.
Pod update rules follow "Pod update and replacement" (spec is immutable except a few fields).
"""
import json

from .kinds import KINDS
from .util import (ApiError, bad_request, clone, invalid, is_dns_label, is_dns_subdomain, is_label_value,
                   is_qualified_name, parse_quantity)

JOB_LABELS = ("batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name", "controller-uid", "job-name")


def _short(v):
    s = json.dumps(v, sort_keys=True)
    return s if len(s) < 200 else s[:197] + "..."


def _meta_errors(obj, causes, name_max=253):
    md = obj.get("metadata") or {}
    name = md.get("name")
    if name is not None and not (is_dns_subdomain(name) and len(name) <= name_max):
        causes.append(("metadata.name", "FieldValueInvalid",
                       'Invalid value: "%s": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
                       "characters, '-' or '.', and must start and end with an alphanumeric character%s"
                       % (name, "" if len(name) <= name_max else " (at most %d characters)" % name_max)))
    for k, v in (md.get("labels") or {}).items():
        if not is_qualified_name(k):
            causes.append(("metadata.labels", "FieldValueInvalid", 'Invalid value: "%s": name part must consist '
                           "of alphanumeric characters, '-', '_' or '.'" % k))
        elif not isinstance(v, str) or not is_label_value(v):
            causes.append(("metadata.labels", "FieldValueInvalid", 'Invalid value: "%s": a valid label must be an '
                           "empty string or consist of alphanumeric characters, '-', '_' or '.'" % (v,)))
    for k, v in (md.get("annotations") or {}).items():
        if not isinstance(v, str):
            causes.append(("metadata.annotations", "FieldValueInvalid", "Invalid value: %s: must be a string"
                           % _short(v)))


# ---- defaulting (what the real API server's SetDefaults_* functions do) ------------------------
def default_pod_spec(spec, is_pod):
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if not isinstance(c, dict):
            continue
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        img = c.get("image") or ""
        tag = img.rsplit("/", 1)[-1]
        c.setdefault("imagePullPolicy", "Always" if (":" not in tag or tag.endswith(":latest")) and "@" not in tag
                     else "IfNotPresent")
        res = c.setdefault("resources", {})
        # SetDefaults_Pod: a container's requests default to its limits.
        if is_pod and res.get("limits"):
            req = res.setdefault("requests", {})
            for r, q in res["limits"].items():
                req.setdefault(r, q)
    if is_pod:
        # DefaultTolerationSeconds admission plugin.
        tols = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tols
                       if isinstance(t, dict)):
                tols.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})


def default_job(job):
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    elif spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimitPerIndex") is None:
        spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    tmpl = spec.setdefault("template", {})
    if isinstance(tmpl, dict):
        tmpl.setdefault("metadata", {})
        if isinstance(tmpl.get("spec"), dict):
            default_pod_spec(tmpl["spec"], False)


def _pod_spec_errors(spec, prefix, causes, restart_allowed):
    if not isinstance(spec, dict):
        causes.append((prefix, "FieldValueRequired", "Required value"))
        return
    conts = spec.get("containers")
    if not isinstance(conts, list) or not conts:
        causes.append((prefix + ".containers", "FieldValueRequired", "Required value"))
        conts = []
    seen = set()
    for kind, lst in (("initContainers", spec.get("initContainers") or []), ("containers", conts)):
        for i, c in enumerate(lst):
            f = "%s.%s[%d]" % (prefix, kind, i)
            if not isinstance(c, dict):
                causes.append((f, "FieldValueInvalid", "Invalid value: must be an object"))
                continue
            if not c.get("name"):
                causes.append((f + ".name", "FieldValueRequired", "Required value"))
            elif not is_dns_label(c["name"]):
                causes.append((f + ".name", "FieldValueInvalid", 'Invalid value: "%s": a lowercase RFC 1123 label '
                               "must consist of lower case alphanumeric characters or '-'" % c["name"]))
            elif c["name"] in seen:
                causes.append((f + ".name", "FieldValueDuplicate", 'Duplicate value: "%s"' % c["name"]))
            else:
                seen.add(c["name"])
            if not c.get("image"):
                causes.append((f + ".image", "FieldValueRequired", "Required value"))
            for which in ("requests", "limits"):
                for r, q in ((c.get("resources") or {}).get(which) or {}).items():
                    try:
                        if parse_quantity(q) < 0:
                            raise ValueError("must be greater than or equal to 0")
                    except ValueError as e:
                        causes.append(("%s.resources.%s[%s]" % (f, which, r), "FieldValueInvalid",
                                       'Invalid value: "%s": %s' % (q, e)))
            for j, e in enumerate(c.get("env") or []):
                if not isinstance(e, dict) or not e.get("name"):
                    causes.append(("%s.env[%d].name" % (f, j), "FieldValueRequired", "Required value"))
            # "Dynamic Resource Allocation": a container's resources.claims name the pod's resourceClaims.
            pod_claims = {(rc or {}).get("name") for rc in spec.get("resourceClaims") or []}
            for j, rc in enumerate((c.get("resources") or {}).get("claims") or []):
                if (rc or {}).get("name") not in pod_claims:
                    causes.append(("%s.resources.claims[%d].name" % (f, j), "FieldValueNotFound",
                                   'Not found: "%s"' % (rc or {}).get("name")))
    for i, rc in enumerate(spec.get("resourceClaims") or []):
        f = "%s.resourceClaims[%d]" % (prefix, i)
        if not isinstance(rc, dict) or not rc.get("name"):
            causes.append((f + ".name", "FieldValueRequired", "Required value"))
        elif bool(rc.get("resourceClaimName")) == bool(rc.get("resourceClaimTemplateName")):
            causes.append((f, "FieldValueInvalid", "Invalid value: must specify one of: `resourceClaimName`, "
                           "`resourceClaimTemplateName`"))
    rp = spec.get("restartPolicy")
    if rp not in restart_allowed:
        causes.append((prefix + ".restartPolicy", "FieldValueNotSupported", 'Unsupported value: "%s": supported '
                       "values: %s" % (rp, ", ".join('"%s"' % r for r in restart_allowed))))
    for i, t in enumerate(spec.get("tolerations") or []):
        if not isinstance(t, dict) or t.get("operator", "Equal") not in ("Equal", "Exists"):
            causes.append(("%s.tolerations[%d].operator" % (prefix, i), "FieldValueNotSupported",
                           'Unsupported value: supported values: "Equal", "Exists"'))
        elif t.get("operator") == "Exists" and t.get("value"):
            causes.append(("%s.tolerations[%d].operator" % (prefix, i), "FieldValueInvalid",
                           "Invalid value: value must be empty when `operator` is 'Exists'"))
    ns = spec.get("nodeSelector")
    if ns is not None and not isinstance(ns, dict):
        causes.append((prefix + ".nodeSelector", "FieldValueInvalid", "Invalid value: must be a map"))


def _nonneg(spec, field, causes, positive=False):
    v = spec.get(field)
    if v is None:
        return
    if not isinstance(v, int) or isinstance(v, bool) or v < 0 or (positive and v == 0):
        causes.append(("spec." + field, "FieldValueInvalid", "Invalid value: %s: must be %s" % (
            _short(v), "greater than 0" if positive else "greater than or equal to 0")))


def _job_spec_errors(job, causes):
    spec = job.get("spec")
    for f in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"):
        _nonneg(spec, f, causes)
    _nonneg(spec, "activeDeadlineSeconds", causes, positive=True)
    if spec.get("completionMode") not in ("NonIndexed", "Indexed"):
        causes.append(("spec.completionMode", "FieldValueNotSupported", 'Unsupported value: "%s": supported values:'
                       ' "NonIndexed", "Indexed"' % spec.get("completionMode")))
    elif spec["completionMode"] == "Indexed" and spec.get("completions") is None:
        causes.append(("spec.completions", "FieldValueRequired", "Required value: when completion mode is Indexed"))
    if not isinstance(spec.get("suspend"), bool):
        causes.append(("spec.suspend", "FieldValueInvalid", "Invalid value: must be a boolean"))
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        causes.append(("spec.template", "FieldValueRequired", "Required value"))
        return
    _pod_spec_errors(tmpl.get("spec"), "spec.template.spec", causes, ("OnFailure", "Never"))


def prepare_job_create(job):
    name = job["metadata"].get("name") or job["metadata"].get("generateName") or ""
    causes = []
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise invalid(KINDS["jobs"], name, [("spec.template", "FieldValueRequired", "Required value")])
    tmpl = spec.get("template")
    if isinstance(tmpl, dict) and isinstance(tmpl.get("spec"), dict) and not tmpl["spec"].get("restartPolicy"):
        causes.append(("spec.template.spec.restartPolicy", "FieldValueRequired",
                       'Required value: valid values: "OnFailure", "Never"'))
    default_job(job)
    _meta_errors(job, causes, name_max=63)
    # "Specifying your own Pod selector": without manualSelector the selector is generated.
    if spec.get("selector") and not spec.get("manualSelector"):
        causes.append(("spec.selector", "FieldValueInvalid", "Invalid value: %s: `selector` will be auto-generated"
                       % _short(spec["selector"])))
    _job_spec_errors(job, causes)
    causes = [c for i, c in enumerate(causes) if not (c[0] == "spec.template.spec.restartPolicy" and any(
        d[0] == c[0] for d in causes[:i]))]
    if causes:
        raise invalid(KINDS["jobs"], name, causes)


def finish_job_create(job):
    """After the uid is known: generate selector and template labels."""
    spec, md = job["spec"], job["metadata"]
    uid = md["uid"]
    labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
    if not spec.get("manualSelector"):
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        labels.update({"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid})
    labels.update({"batch.kubernetes.io/job-name": md["name"], "job-name": md["name"]})


_SCHED_DIRECTIVES = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


def _strip_mutable_template(t):
    t = clone(t) if isinstance(t, dict) else {}
    md = t.setdefault("metadata", {})
    md.pop("labels", None)
    md.pop("annotations", None)
    spec = t.get("spec") if isinstance(t.get("spec"), dict) else {}
    for f in _SCHED_DIRECTIVES:
        spec.pop(f, None)
    t["spec"] = spec
    if not md:
        t.pop("metadata")
    return t


def _empty_to_none(v):
    return None if v in ({}, [], None) else v


def validate_job_update(old, new):
    """Job immutability + "Mutable Scheduling Directives" (old.spec.suspend and no status.startTime)."""
    default_job(new)
    name = old["metadata"]["name"]
    causes = []
    _meta_errors(new, causes, name_max=63)
    os_, ns_ = old["spec"], new["spec"]
    imm = lambda f: causes.append(("spec." + f, "FieldValueInvalid", "Invalid value: %s: field is immutable"
                                   % _short(ns_.get(f))))
    for f in ("selector", "completionMode", "podFailurePolicy", "backoffLimitPerIndex", "manualSelector",
              "successPolicy", "managedBy"):
        if _empty_to_none(os_.get(f)) != _empty_to_none(ns_.get(f)):
            imm(f)
    if os_.get("completions") != ns_.get("completions"):
        # "Elastic Indexed Jobs": completions may change with parallelism (kept equal) for Indexed Jobs.
        if not (ns_.get("completionMode") == "Indexed" and ns_.get("completions") == ns_.get("parallelism")):
            imm("completions")
    ot, nt = old["spec"].get("template"), ns_.get("template")
    if ot != nt:
        allow = bool(os_.get("suspend")) and not (old.get("status") or {}).get("startTime")
        if not allow or _strip_mutable_template(ot) != _strip_mutable_template(nt):
            causes.append(("spec.template", "FieldValueInvalid", "Invalid value: %s: field is immutable"
                           % _short(nt)))
    _job_spec_errors(new, causes)
    if causes:
        raise invalid(KINDS["jobs"], name, causes)


def prepare_pod_create(pod):
    name = pod["metadata"].get("name") or pod["metadata"].get("generateName") or ""
    causes = []
    if not isinstance(pod.get("spec"), dict):
        raise invalid(KINDS["pods"], name, [("spec.containers", "FieldValueRequired", "Required value")])
    default_pod_spec(pod["spec"], True)
    _meta_errors(pod, causes)
    _pod_spec_errors(pod["spec"], "spec", causes, ("Always", "OnFailure", "Never"))
    if causes:
        raise invalid(KINDS["pods"], name, causes)
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(pod["spec"])}


def qos_class(spec):
    """Configure Quality of Service for Pods: Guaranteed / Burstable / BestEffort."""
    conts = spec.get("containers") or []
    any_set, guaranteed = False, True
    for c in conts:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and req[r] != lim[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def validate_pod_update(old, new):
    """Pods: "spec: Forbidden: pod updates may not change fields other than ..." """
    def strip(spec):
        s = clone(spec or {})
        for c in (s.get("containers") or []) + (s.get("initContainers") or []):
            c.pop("image", None)
        for f in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"):
            s.pop(f, None)
        return s
    default_pod_spec(new.setdefault("spec", {}), True)
    causes = []
    _meta_errors(new, causes)
    if strip(old.get("spec")) != strip(new.get("spec")):
        causes.append(("spec", "FieldValueForbidden",
                       "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                       "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
                       "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
                       "set to 1 if it was previously negative)"))
    og = [g.get("name") for g in (old.get("spec") or {}).get("schedulingGates") or []]
    ng = [g.get("name") for g in (new.get("spec") or {}).get("schedulingGates") or []]
    if any(g not in og for g in ng):
        causes.append(("spec.schedulingGates", "FieldValueForbidden", "Forbidden: only deletion is allowed"))
    if causes:
        raise invalid(KINDS["pods"], old["metadata"]["name"], causes)


def prepare_node_create(node):
    causes = []
    _meta_errors(node, causes)
    node.setdefault("spec", {})
    node.setdefault("status", {})
    for i, t in enumerate(node["spec"].get("taints") or []):
        if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(("spec.taints[%d].effect" % i, "FieldValueNotSupported", 'Unsupported value: "%s"'
                           % t.get("effect")))
    if causes:
        raise invalid(KINDS["nodes"], node["metadata"].get("name", ""), causes)


def validate_node_update(old, new):
    prepare_node_create(new)


def check_body_meta(kinfo, obj, ns, name=None):
    """The body must be an object of the URL's kind; namespace and name must agree with the URL."""
    if not isinstance(obj, dict):
        raise bad_request("the body of the request was in an unknown format")
    if obj.get("kind") not in (None, "", kinfo.kind) or obj.get("apiVersion") not in (None, "", kinfo.api_version):
        raise bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                          % (obj.get("apiVersion"), kinfo.api_version)
                          if obj.get("kind") in (None, "", kinfo.kind) else
                          "%s in version \"%s\" cannot be handled as a %s: the kind does not match"
                          % (obj.get("kind"), kinfo.version, kinfo.kind))
    obj["kind"], obj["apiVersion"] = kinfo.kind, kinfo.api_version
    md = obj.get("metadata")
    if md is None:
        md = obj["metadata"] = {}
    for field in ("metadata", "spec", "status"):
        v = obj.get(field)
        if v is not None and not isinstance(v, dict):
            # what decoding into the Go struct reports
            raise bad_request("%s in version \"%s\" cannot be handled as a %s: json: cannot unmarshal %s into Go "
                              "struct field %s.%s of type %s" % (kinfo.kind, kinfo.version, kinfo.kind,
                                                                 type(v).__name__, kinfo.kind, field,
                                                                 "v1.ObjectMeta" if field == "metadata" else
                                                                 "v1.%s%s" % (kinfo.kind, field.capitalize())))
    if kinfo.namespaced:
        if md.get("namespace") and md["namespace"] != ns:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        md["namespace"] = ns
    else:
        md.pop("namespace", None)
    if name is not None:
        if md.get("name") and md["name"] != name:
            raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                              % (md["name"], name))
        md["name"] = name
    return obj


def admission_error(msg):
    return ApiError(403, "Forbidden", msg)
