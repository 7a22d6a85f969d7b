"""PATCH bodies.

Follows "API concepts" / "Update an API object in place using kubectl patch":
  application/merge-patch+json           RFC 7386 JSON merge patch
  application/strategic-merge-patch+json merge patch + patchMergeKey lists + $patch directives
  application/json-patch+json            RFC 6902 JSON patch (add/remove/replace/move/copy/test)
"""
from .util import ApiError, bad_request, clone


class PatchError(ApiError):
    # The real server answers a JSON patch that cannot be applied with 422.
    def __init__(self, msg):
        super().__init__(422, "Invalid", msg)


# ---- RFC 7386 -------------------------------------------------------------------------------
def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


# ---- strategic merge patch ------------------------------------------------------------------
# patchMergeKey of the list fields the stand-in knows (from the core/v1 and meta/v1 Go types).
# Fields without patchStrategy=merge (e.g. tolerations, args, command) are replaced atomically.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
              "volumes": "name", "env": "name", "volumeMounts": "mountPath", "ports": "containerPort",
              "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name",
              "hostAliases": "ip", "resourceClaims": "name", "schedulingGates": "name",
              "volumeDevices": "devicePath", "taints": None}
SET_LISTS = {"finalizers"}       # primitive lists with patchStrategy=merge
_DELETE = object()


def strategic_merge_patch(target, patch):
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch body must be a JSON object")
    r = _smp(target, patch)
    return {} if r is _DELETE else r


def _smp(target, patch):
    if not isinstance(patch, dict):
        return clone(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: clone(v) for k, v in patch.items() if not k.startswith("$")}
    if directive == "delete":
        return _DELETE
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys") or k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            f = k.split("/", 1)[1]
            result[f] = [x for x in result.get(f) or [] if x not in (v or [])]
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, list) and MERGE_KEYS.get(k) and isinstance(result.get(k), list):
            result[k] = _merge_list(result[k], v, MERGE_KEYS[k])
        elif isinstance(v, list) and k in SET_LISTS and isinstance(result.get(k), list):
            out = list(result[k])
            for x in v:
                if x not in out:
                    out.append(x)
            result[k] = out
        elif isinstance(v, dict):
            r = _smp(result.get(k), v)
            if r is _DELETE:
                result.pop(k, None)
            else:
                result[k] = r
        elif isinstance(v, list):
            result[k] = [_strip(e) for e in v]
        else:
            result[k] = v
    if retain is not None:
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _strip(e):
    if isinstance(e, dict):
        return {k: _strip(v) for k, v in e.items() if not k.startswith("$")}
    return clone(e)


def _merge_list(cur, patch, key):
    if any(isinstance(e, dict) and e.get("$patch") == "replace" for e in patch):
        return [_strip(e) for e in patch if not (isinstance(e, dict) and e.get("$patch") == "replace")]
    out = list(cur)
    for e in patch:
        if not isinstance(e, dict) or key not in e:
            raise bad_request("map: %r does not contain declared merge key: %s" % (e, key))
        idx = next((i for i, c in enumerate(out) if isinstance(c, dict) and c.get(key) == e[key]), None)
        if e.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(_strip(e))
        else:
            out[idx] = _smp(out[idx], e)
    return out


# ---- RFC 6902 -------------------------------------------------------------------------------
def _tokens(path):
    if not isinstance(path, str):
        raise PatchError("path must be a string")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError('invalid JSON pointer "%s"' % path)
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _resolve(doc, toks, path):
    cur = doc
    for t in toks:
        if isinstance(cur, dict):
            if t not in cur:
                raise PatchError("doc is missing path: %s: missing value" % path)
            cur = cur[t]
        elif isinstance(cur, list):
            try:
                i = int(t)
            except ValueError:
                raise PatchError("invalid array index %s in path %s" % (t, path))
            if i < 0 or i >= len(cur):
                raise PatchError("doc is missing path: %s: index out of range" % path)
            cur = cur[i]
        else:
            raise PatchError("doc is missing path: %s" % path)
    return cur


def _get(doc, path):
    return _resolve(doc, _tokens(path), path)


def _add(doc, path, value):
    toks = _tokens(path)
    if not toks:
        return value
    parent = _resolve(doc, toks[:-1], path)
    last = toks[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                i = int(last)
            except ValueError:
                raise PatchError("invalid array index %s" % last)
            if i < 0 or i > len(parent):
                raise PatchError("add operation does not apply: doc is missing path: %s" % path)
            parent.insert(i, value)
    else:
        raise PatchError("add operation does not apply: doc is missing path: %s" % path)
    return doc


def _remove(doc, path):
    toks = _tokens(path)
    if not toks:
        raise PatchError("unable to remove the whole document")
    parent = _resolve(doc, toks[:-1], path)
    last = toks[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError("remove operation does not apply: doc is missing path: %s" % path)
        return parent.pop(last)
    if isinstance(parent, list):
        try:
            i = int(last)
        except ValueError:
            raise PatchError("invalid array index %s" % last)
        if i < 0 or i >= len(parent):
            raise PatchError("remove operation does not apply: doc is missing path: %s" % path)
        return parent.pop(i)
    raise PatchError("remove operation does not apply: doc is missing path: %s" % path)


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request("json patch operation must be an object with \"op\"")
        kind, path = op.get("op"), op.get("path")
        if kind not in ("add", "remove", "replace", "move", "copy", "test"):
            raise PatchError("Unexpected kind: %s" % kind)
        if kind == "add":
            if "value" not in op:
                raise PatchError("add operation does not apply: missing value")
            doc = _add(doc, path, clone(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            if "value" not in op:
                raise PatchError("replace operation does not apply: missing value")
            toks = _tokens(path)
            if not toks:
                doc = clone(op["value"])
            else:
                _get(doc, path)  # must exist
                _remove(doc, path)
                doc = _add(doc, path, clone(op["value"]))
        elif kind == "move":
            frm = op.get("from")
            if isinstance(path, str) and isinstance(frm, str) and path.startswith(frm + "/"):
                raise PatchError("move operation does not apply: a value cannot be moved into one of its children")
            v = _remove(doc, frm)
            doc = _add(doc, path, v)
        elif kind == "copy":
            v = clone(_get(doc, op.get("from")))
            doc = _add(doc, path, v)
        elif kind == "test":
            try:
                cur = _get(doc, path)
            except PatchError:
                raise PatchError("testing value %s failed: test failed" % path)
            if cur != op.get("value") or type(cur) is bool and type(op.get("value")) is not bool:
                raise PatchError("testing value %s failed: test failed" % path)
    return doc


PATCH_TYPES = {
    "application/merge-patch+json": lambda cur, p: _require_obj(p) and merge_patch(cur, p),
    "application/strategic-merge-patch+json": strategic_merge_patch,
    "application/json-patch+json": json_patch,
}


def _require_obj(p):
    if not isinstance(p, dict):
        raise bad_request("merge patch body must be a JSON object")
    return True
