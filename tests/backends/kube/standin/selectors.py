"""Label and field selectors.

Follows "Labels and Selectors" (equality-based: =, ==, !=; set-based: in, notin, exists, !key)
and "Field Selectors" (=, ==, != on a per-resource list of supported fields).
"""
import re

from .util import bad_request, is_label_value, is_qualified_name


def _split_top(s):
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


_SET_RE = re.compile(r"^\s*([^\s!=<>(),]+)\s+(in|notin)\s*\(([^()]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([^\s!=<>(),]+)\s*(==|=|!=)\s*([^\s!=<>(),]*)\s*$")
_CMP_RE = re.compile(r"^\s*([^\s!=<>(),]+)\s*(<|>)\s*(-?\d+)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([^\s!=<>(),]+)\s*$")


class LabelSelector:
    def __init__(self, reqs):
        self.reqs = reqs          # list of (key, op, values)

    @classmethod
    def parse(cls, s):
        reqs = []
        if s is None or not s.strip():
            return cls(reqs)
        for part in _split_top(s):
            m = _SET_RE.match(part)
            if m:
                key, op, vals = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
                vals = [v for v in vals if v != ""] if op == "notin" else vals
                if op == "in" and not [v for v in vals if v]:
                    raise bad_request("unable to parse requirement: values for 'in' must not be empty")
                reqs.append((key, op, set(vals)))
            else:
                m = _EQ_RE.match(part)
                if m:
                    op = "!=" if m.group(2) == "!=" else "="
                    reqs.append((m.group(1), op, {m.group(3)}))
                else:
                    m = _CMP_RE.match(part)
                    if m:
                        reqs.append((m.group(1), m.group(2), {m.group(3)}))
                    else:
                        m = _EXISTS_RE.match(part)
                        if not m:
                            raise bad_request("unable to parse requirement: found '%s', expected: "
                                              "identifier" % part.strip())
                        reqs.append((m.group(2), "!" if m.group(1) else "exists", set()))
            key, op, vals = reqs[-1]
            if not is_qualified_name(key):
                raise bad_request('unable to parse requirement: <nil>: Invalid value: "%s": name part must '
                                  "consist of alphanumeric characters, '-', '_' or '.'" % key)
            if op in ("=", "!=", "in", "notin"):
                for v in vals:
                    if not is_label_value(v):
                        raise bad_request('unable to parse requirement: <nil>: Invalid value: "%s": a valid '
                                          "label must be an empty string or consist of alphanumeric characters"
                                          % v)
        return cls(reqs)

    @classmethod
    def from_object(cls, sel):
        """metav1.LabelSelector (matchLabels + matchExpressions)."""
        reqs = []
        if not sel:
            return cls(reqs)
        for k, v in (sel.get("matchLabels") or {}).items():
            reqs.append((k, "=", {v}))
        for e in sel.get("matchExpressions") or []:
            op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(e.get("operator"))
            if op:
                reqs.append((e.get("key"), op, set(e.get("values") or [])))
        return cls(reqs)

    def empty(self):
        return not self.reqs

    def matches(self, labels):
        labels = labels or {}
        for key, op, vals in self.reqs:
            has = key in labels
            v = labels.get(key)
            if op == "=" or op == "in":
                if not has or v not in vals:
                    return False
            elif op == "!=" or op == "notin":
                if has and v in vals:
                    return False
            elif op == "exists":
                if not has:
                    return False
            elif op == "!":
                if has:
                    return False
            elif op in ("<", ">"):
                try:
                    lv, rv = int(v), int(next(iter(vals)))
                except (TypeError, ValueError):
                    return False
                if (op == "<" and not lv < rv) or (op == ">" and not lv > rv):
                    return False
        return True


def _get(obj, *path):
    for p in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(p)
    return obj


def _s(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


_COMMON = {"metadata.name": lambda o: _get(o, "metadata", "name"),
           "metadata.namespace": lambda o: _get(o, "metadata", "namespace")}
# Field Selectors: "Supported fields" differ by resource type.
FIELDS = {
    "pods": dict(_COMMON, **{
        "spec.nodeName": lambda o: _get(o, "spec", "nodeName"),
        "spec.restartPolicy": lambda o: _get(o, "spec", "restartPolicy"),
        "spec.schedulerName": lambda o: _get(o, "spec", "schedulerName"),
        "spec.serviceAccountName": lambda o: _get(o, "spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: bool(_get(o, "spec", "hostNetwork")),
        "status.phase": lambda o: _get(o, "status", "phase"),
        "status.podIP": lambda o: _get(o, "status", "podIP"),
        "status.nominatedNodeName": lambda o: _get(o, "status", "nominatedNodeName"),
    }),
    "nodes": dict(_COMMON, **{"spec.unschedulable": lambda o: bool(_get(o, "spec", "unschedulable"))}),
    "jobs": dict(_COMMON, **{"status.successful": lambda o: _get(o, "status", "succeeded") or 0}),
    "namespaces": dict(_COMMON, **{"status.phase": lambda o: _get(o, "status", "phase")}),
    "resourceclaims": dict(_COMMON),
    "resourceclaimtemplates": dict(_COMMON),
    # ResourceSlices: the real server supports spec.nodeName, spec.driver and spec.pool.name.
    "resourceslices": dict(_COMMON, **{"spec.nodeName": lambda o: _get(o, "spec", "nodeName"),
                                       "spec.driver": lambda o: _get(o, "spec", "driver"),
                                       "spec.pool.name": lambda o: (_get(o, "spec", "pool") or {}).get("name")}),
    "deviceclasses": dict(_COMMON),
}


class FieldSelector:
    def __init__(self, reqs):
        self.reqs = reqs   # (getter, op, value, field)

    @classmethod
    def parse(cls, plural, s):
        reqs = []
        if s is None or not s.strip():
            return cls(reqs)
        for part in s.split(","):
            part = part.strip()
            m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", part)
            if not m:
                raise bad_request("invalid selector: '%s'; can't understand '%s'" % (s, part))
            field, op, val = m.group(1).strip(), m.group(2), m.group(3).strip()
            getter = FIELDS[plural].get(field)
            if getter is None:
                raise bad_request('field label not supported: %s' % field)
            reqs.append((getter, "!=" if op == "!=" else "=", val, field))
        return cls(reqs)

    def empty(self):
        return not self.reqs

    def matches(self, obj):
        for getter, op, val, _ in self.reqs:
            eq = _s(getter(obj)) == val
            if (op == "=") != eq:
                return False
        return True

    def names(self):
        """Exact metadata.name this selector pins, if any (to short-cut a list)."""
        for _, op, val, field in self.reqs:
            if field == "metadata.name" and op == "=":
                return val
        return None
