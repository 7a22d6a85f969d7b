"""Small helpers shared by the stand-in: errors as Status objects, copying, time, quantities."""
import datetime
import random
import re
import time
from fractions import Fraction

# API concepts: "Status" kind / "Responses" — every error is a metav1.Status object.
def status_obj(code, reason, message, details=None, status="Failure"):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status,
         "message": message, "reason": reason, "code": code}
    if details:
        s["details"] = details
    if status == "Success":
        for f in ("reason", "message", "code"):
            if not s.get(f) or f == "code" and code == 200:
                s.pop(f, None)
    return s


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None, meta=None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details, self.headers, self.meta = details, headers or {}, meta

    def body(self):
        s = status_obj(self.code, self.reason, self.message, self.details)
        if self.meta:
            s["metadata"] = self.meta
        return s


def bad_request(msg):
    return ApiError(400, "BadRequest", msg)


def not_found(kinfo, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (kinfo.qualified, name),
                    {"name": name, "group": kinfo.group, "kind": kinfo.plural})


def conflict(kinfo, name):
    return ApiError(409, "Conflict",
                    'Operation cannot be fulfilled on %s "%s": the object has been modified; '
                    'please apply your changes to the latest version and try again' % (kinfo.qualified, name),
                    {"name": name, "group": kinfo.group, "kind": kinfo.plural})


def invalid(kinfo, name, causes):
    """causes: list of (field, reason_type, message) — API conventions: 422 with details.causes."""
    msgs = ["%s: %s" % (f, m) for f, _, m in causes]
    joined = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (kinfo.kind_qualified, name, joined),
                    {"name": name, "group": kinfo.group, "kind": kinfo.kind,
                     "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]})


def clone(o):
    """Fast deep copy for JSON-shaped data (dict/list/scalars)."""
    t = type(o)
    if t is dict:
        return {k: clone(v) for k, v in o.items()}
    if t is list:
        return [clone(v) for v in o]
    return o


def now_ts(offset=0.0):
    return datetime.datetime.fromtimestamp(int(time.time() + offset), datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def parse_ts(s):
    if not s:
        return None
    try:
        return datetime.datetime.strptime(s[:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return None


_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet apimachinery's rand.String uses


def rand_suffix(n=5):
    return "".join(random.choice(_NAME_ALPHABET) for _ in range(n))


_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def is_dns_label(s):
    return isinstance(s, str) and len(s) <= 63 and bool(_DNS1123_LABEL.match(s))


def is_dns_subdomain(s):
    return isinstance(s, str) and len(s) <= 253 and bool(_DNS1123_SUB.match(s))


def is_qualified_name(k):
    """Labels and Selectors: syntax and character set (prefix/name)."""
    if not isinstance(k, str) or not k:
        return False
    if "/" in k:
        prefix, _, name = k.partition("/")
        if not is_dns_subdomain(prefix):
            return False
    else:
        name = k
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def is_label_value(v):
    return isinstance(v, str) and len(v) <= 63 and bool(_LABEL_VALUE.match(v))


# "Resource Management for Pods and Containers" / apimachinery resource.Quantity
_SUFFIX = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
           "n": Fraction(1, 10 ** 9), "u": Fraction(1, 10 ** 6), "m": Fraction(1, 1000), "": 1,
           "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}
_QTY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")


def parse_quantity(q):
    if isinstance(q, bool):
        raise ValueError("bad quantity")
    if isinstance(q, (int, float)):
        return Fraction(q)
    m = _QTY.match(str(q).strip())
    if not m:
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    num = Fraction(m.group(1))
    if m.group(2) is not None:
        return num * Fraction(10) ** int(m.group(2))
    return num * _SUFFIX[m.group(3) or ""]


def fmt_quantity(f):
    if f.denominator == 1:
        return str(f.numerator)
    milli = f * 1000
    if milli.denominator == 1:
        return "%dm" % milli.numerator
    return str(float(f))
