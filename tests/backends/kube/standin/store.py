"""Object storage: a global resourceVersion counter (like etcd's revision), per-namespace indexes,
a bounded per-resource watch history ("watch cache"), watchers and consistent list snapshots
for limit/continue, and JSON persistence.

Objects held by the store are never mutated in place: every write stores a new dict, so list
snapshots and watch events can share references safely.
"""
import base64
import bisect
import collections
import json
import os
import queue
import threading
import time
import uuid

from .kinds import KINDS
from .util import ApiError, bad_request, clone, now_ts

EXPIRED_CONTINUE_MSG = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list.")


def obj_key(ns, name):
    return "%s/%s" % (ns, name) if ns else name


class Watcher:
    MAX_BACKLOG = 200000

    def __init__(self, plural, ns):
        self.plural, self.ns = plural, ns
        self.q = queue.SimpleQueue()
        self.dropped = False        # /_standin/drop-watches
        self.overflow = False       # a watcher that cannot keep up is closed, as the watch cache does

    def push(self, ev):
        if self.ns is not None and ev[2]["metadata"].get("namespace") != self.ns:
            return
        if self.q.qsize() > self.MAX_BACKLOG:
            self.overflow = True
            return
        self.q.put(ev)

    def wake(self):
        self.q.put(None)


class Expired(Exception):
    def __init__(self, rv, oldest):
        self.rv, self.oldest = rv, oldest


class Store:
    def __init__(self, history=1000, continue_ttl=300.0):
        self.lock = threading.RLock()
        self.rv = 0
        self.objs = {p: {} for p in KINDS}
        self.ns_index = {p: {} for p in KINDS}
        self.sorted_cache = {}
        self.history_max = history
        self.history = {p: collections.deque() for p in KINDS}
        self.compacted = {p: 0 for p in KINDS}
        self.watchers = {p: set() for p in KINDS}
        self.snapshots = collections.OrderedDict()
        self.snapshot_seq = 0
        self.continue_ttl = continue_ttl
        self.hooks = []
        self.uids = {}
        self.pods_by_owner = collections.defaultdict(set)
        self.pods_by_node = collections.defaultdict(set)
        self.changes = 0

    # ---- reads -----------------------------------------------------------------------------
    def get(self, plural, key):
        return self.objs[plural].get(key)

    def by_uid(self, uid):
        pk = self.uids.get(uid)
        return self.objs[pk[0]].get(pk[1]) if pk else None

    def sorted_keys(self, plural, ns):
        c = self.sorted_cache.get((plural, ns))
        if c is None:
            src = self.objs[plural].keys() if ns is None else self.ns_index[plural].get(ns, ())
            c = sorted(src)
            self.sorted_cache[(plural, ns)] = c
        return c

    # ---- indexes ---------------------------------------------------------------------------
    def _index(self, plural, key, obj, add):
        md = obj["metadata"]
        if add:
            self.uids[md["uid"]] = (plural, key)
        else:
            self.uids.pop(md["uid"], None)
        if plural == "pods":
            for ref in md.get("ownerReferences") or []:
                s = self.pods_by_owner[ref.get("uid")]
                if add:
                    s.add(key)
                else:
                    s.discard(key)
                    if not s:
                        del self.pods_by_owner[ref.get("uid")]
            node = (obj.get("spec") or {}).get("nodeName")
            if node:
                s = self.pods_by_node[node]
                if add:
                    s.add(key)
                else:
                    s.discard(key)
                    if not s:
                        del self.pods_by_node[node]

    def _insert(self, plural, key, obj):
        ns = obj["metadata"].get("namespace")
        self.objs[plural][key] = obj
        self.ns_index[plural].setdefault(ns, set()).add(key)
        self.sorted_cache.pop((plural, None), None)
        self.sorted_cache.pop((plural, ns), None)
        self._index(plural, key, obj, True)

    def _delete(self, plural, key):
        obj = self.objs[plural].pop(key)
        ns = obj["metadata"].get("namespace")
        s = self.ns_index[plural].get(ns)
        if s is not None:
            s.discard(key)
            if not s:
                del self.ns_index[plural][ns]
        self.sorted_cache.pop((plural, None), None)
        self.sorted_cache.pop((plural, ns), None)
        self._index(plural, key, obj, False)
        return obj

    # ---- writes (every write takes the next resourceVersion and emits one watch event) -----
    def _emit(self, plural, etype, obj, prev):
        ev = (self.rv, etype, obj, prev)
        h = self.history[plural]
        if self.history_max > 0:
            if len(h) >= self.history_max:
                self.compacted[plural] = h.popleft()[0]
            h.append(ev)
        else:
            self.compacted[plural] = self.rv
        for w in self.watchers[plural]:
            w.push(ev)
        for hook in self.hooks:
            hook(plural, etype, obj, prev)
        self.changes += 1

    def create(self, plural, obj):
        with self.lock:
            md = obj["metadata"]
            key = obj_key(md.get("namespace"), md["name"])
            if key in self.objs[plural]:
                k = KINDS[plural]
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (k.qualified, md["name"]),
                               {"name": md["name"], "group": k.group, "kind": plural})
            md.setdefault("uid", str(uuid.uuid4()))
            md["creationTimestamp"] = now_ts()
            if plural == "jobs":
                md["generation"] = 1
            self.rv += 1
            md["resourceVersion"] = str(self.rv)
            self._insert(plural, key, obj)
            self._emit(plural, "ADDED", obj, None)
            return obj

    def update(self, plural, key, obj):
        """Store a new version.  An object with deletionTimestamp, no finalizers and no grace period
        left is removed instead ("Finalizers" / "Graceful deletion")."""
        with self.lock:
            old = self.objs[plural][key]
            md = obj["metadata"]
            if md.get("deletionTimestamp") and not md.get("finalizers") and not md.get("deletionGracePeriodSeconds"):
                return self.remove(plural, key, obj)
            self.rv += 1
            md["resourceVersion"] = str(self.rv)
            # name and namespace never change: the sorted key caches stay valid
            self._index(plural, key, old, False)
            self.objs[plural][key] = obj
            self._index(plural, key, obj, True)
            self._emit(plural, "MODIFIED", obj, old)
            return obj

    def remove(self, plural, key, final=None):
        with self.lock:
            old = self._delete(plural, key)
            final = dict(final or old)
            final["metadata"] = dict(final["metadata"])
            self.rv += 1
            final["metadata"]["resourceVersion"] = str(self.rv)
            self._emit(plural, "DELETED", final, old)
            return final

    def mutate(self, plural, key, fn, uid=None):
        """Read-modify-write under the lock (used by the controllers and the kubelet).  fn gets a
        deep copy and returns the new object (or None for no change)."""
        with self.lock:
            cur = self.objs[plural].get(key)
            if cur is None or (uid and cur["metadata"]["uid"] != uid):
                return None
            new = fn(clone(cur))
            if new is None or new == cur:
                return cur
            return self.update(plural, key, new)

    # ---- list with limit/continue ("API concepts: Retrieving large results sets in chunks") --
    def list(self, plural, ns, match, trivial, limit=0, cont=None):
        with self.lock:
            now = time.monotonic()
            self._purge_snapshots(now)
            if cont:
                tok = self._decode_continue(cont)
                start = tok.get("start", "")
                if tok.get("rv") == -1:   # the "inconsistent" token handed out with a 410
                    snap = self._new_snapshot(plural, ns, now)
                else:
                    snap = self.snapshots.get(tok.get("sid"))
                    if snap is None or now - snap["created"] > self.continue_ttl:
                        self.snapshots.pop(tok.get("sid"), None)
                        incons = self._encode_continue({"rv": -1, "start": start})
                        raise ApiError(410, "Expired", EXPIRED_CONTINUE_MSG, meta={"continue": incons})
                    if snap["plural"] != plural or snap["ns"] != ns:
                        raise bad_request("continue key is not valid: the continue token is for another list")
                keys, objs, rv = snap["keys"], snap["objs"], snap["rv"]
                i = bisect.bisect_left(keys, start)
            else:
                keys = self.sorted_keys(plural, ns)
                table = self.objs[plural]
                if not limit:
                    return [o for o in (table[k] for k in keys) if match(o)], self.rv, None, None
                snap, objs, rv, i = None, None, self.rv, 0
            n = len(keys)
            items = []
            if objs is None:
                get = lambda j: table[keys[j]]
            else:
                get = objs.__getitem__
            while i < n and (not limit or len(items) < limit):
                o = get(i)
                if match(o):
                    items.append(o)
                i += 1
            if i >= n:
                return items, rv, None, None
            if snap is None:
                snap = self._new_snapshot(plural, ns, now, keys=keys, table=table)
            token = self._encode_continue({"v": "meta.k8s.io/v1", "rv": snap["rv"], "start": keys[i - 1] + "\x00",
                                           "sid": snap["sid"]})
            remaining = (n - i) if trivial else None
            return items, rv, token, remaining

    def _new_snapshot(self, plural, ns, now, keys=None, table=None):
        keys = keys if keys is not None else self.sorted_keys(plural, ns)
        table = table if table is not None else self.objs[plural]
        self.snapshot_seq += 1
        snap = {"sid": self.snapshot_seq, "created": now, "rv": self.rv, "plural": plural, "ns": ns,
                "keys": keys, "objs": [table[k] for k in keys]}
        self.snapshots[snap["sid"]] = snap
        while len(self.snapshots) > 256:
            self.snapshots.popitem(last=False)
        return snap

    def _purge_snapshots(self, now):
        while self.snapshots:
            sid, snap = next(iter(self.snapshots.items()))
            if now - snap["created"] <= self.continue_ttl:
                break
            del self.snapshots[sid]

    @staticmethod
    def _encode_continue(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

    @staticmethod
    def _decode_continue(s):
        try:
            d = json.loads(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
            if not isinstance(d, dict):
                raise ValueError
            return d
        except Exception:
            raise bad_request("continue key is not valid: illegal base64 data")

    # ---- watch ("API concepts: Efficient detection of changes") -----------------------------
    def start_watch(self, plural, ns, rv_str):
        with self.lock:
            w = Watcher(plural, ns)
            if rv_str in (None, "", "0"):
                src = self.objs[plural].values() if ns is None else (
                    self.objs[plural][k] for k in self.ns_index[plural].get(ns, ()))
                initial = [(int(o["metadata"]["resourceVersion"]), "ADDED", o, None) for o in src]
                initial.sort(key=lambda e: e[0])
            else:
                try:
                    rv = int(rv_str)
                except ValueError:
                    raise bad_request('invalid resource version: strconv.ParseUint: parsing "%s": invalid syntax'
                                      % rv_str)
                if rv < self.compacted[plural]:
                    raise Expired(rv, self.compacted[plural])
                initial = [ev for ev in self.history[plural] if ev[0] > rv and
                           (ns is None or ev[2]["metadata"].get("namespace") == ns)]
            self.watchers[plural].add(w)
            return w, initial

    def stop_watch(self, w):
        with self.lock:
            self.watchers[w.plural].discard(w)

    def all_watchers(self):
        with self.lock:
            return [w for s in self.watchers.values() for w in s]

    def compact(self):
        """/_standin/compact: forget watch history and continue snapshots (like an etcd compaction)."""
        with self.lock:
            for p in KINDS:
                self.history[p].clear()
                self.compacted[p] = self.rv
            self.snapshots.clear()

    # ---- persistence -----------------------------------------------------------------------
    def save(self, path):
        with self.lock:
            state = {"resourceVersion": self.rv, "objects": {p: list(self.objs[p].values()) for p in KINDS}}
            changes = self.changes
        data = json.dumps(state, separators=(",", ":"))
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return changes

    def load(self, path):
        with open(path) as f:
            state = json.load(f)
        with self.lock:
            rv = int(state.get("resourceVersion", 0))
            for plural, items in (state.get("objects") or {}).items():
                if plural not in KINDS:
                    continue
                for o in items:
                    md = o["metadata"]
                    self._insert(plural, obj_key(md.get("namespace"), md["name"]), o)
                    rv = max(rv, int(md.get("resourceVersion", 0)))
            self.rv = rv
            for p in KINDS:          # watch history starts empty: older resourceVersions get 410
                self.compacted[p] = rv
