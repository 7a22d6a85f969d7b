#!/usr/bin/env python3
"""Fault soak for the control plane (issue 33): run by hand, not part of the test suite.

    sudo python3 bench/faults_soak.py 5m [--tessera build/src/cli/tessera] [--seed 1]

What runs (all real processes on this host, state under --dir):
  - one PostgreSQL (Debian's server binaries, as the 'postgres' user), the store of
  - two `tessera serve` (one leads, one waits as its standby),
  - six `tessera agent --simulate 2xH100-80GB` (n1..n6), each reaching each server through a TCP
    proxy of this script that drops messages (a chunk either way is lost with --drop's
    probability: the connection is cut there) and can cut the agent off entirely,
  - a real single-host Slurm (tests/backends/slurm_up.sh) behind a `backend: slurm` queue, when
    this runs as root and slurmctld is installed (--no-slurm leaves it out),
  - two clients submitting continuously (each submission named by its Idempotency-Key, retried
    on both servers with the same key until answered 201 or 30 s pass),
  - chaos, one fault every 2-8 s: SIGSTOP of a server for 2-15 s, SIGKILL of a server (restarted
    1-5 s later), SIGKILL of an agent (restarted 1-5 s later; its jobs run on), SIGSTOP of an agent
    for 2-10 s, a partition of one agent for 5-20 s; and the drops throughout.
Each job's process records itself (records/JOB.PID: pid, start and end times, its devices
(CUDA_VISIBLE_DEVICES: GPU-sim-NODE-INDEX, or the Slurm GRES index)). A process killed by SIGKILL
leaves no end line: a watcher (a process of its own, so that this one's threads do not delay it)
holds a pidfd of every recorded process and notes, for each one that dies, two bounds on when:
the last time it was seen alive and the first time it was seen gone (records/../watch.log). At
the end (faults stop, everything is resumed and restarted, submissions stop) it waits for every
job to end, then checks, from the agents' side: every acknowledged submission stored once (and
none stored twice), no device in two grants at any moment, no job running twice at any moment,
every job terminal; and prints the figures. Two runs overlap when the later one started before
the earlier one ended: for a run without an end line, before it was last seen alive (certain);
a later start between its last sight alive and its first sight gone is reported apart, with the
bound, as an overlap the watcher cannot tell from none (it does not fail the run). Exit 0 when
every check holds.
"""
import argparse
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LOCK = threading.Lock()


def log(msg):
    with LOCK:
        print(time.strftime("%H:%M:%S") + " " + msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def parse_duration(text):
    units = {"s": 1, "m": 60, "h": 3600}
    if text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


# --- the dropping proxy -------------------------------------------------------------------------


class Proxy:
    """127.0.0.1:port -> 127.0.0.1:target. Each chunk either way is lost (the connection cut
    there) with probability `drop`; cut() cuts everything until heal()."""

    def __init__(self, target, drop, rng):
        self.target, self.drop, self.rng = target, drop, rng
        self.cut_flag = False
        self.socks = set()
        self.mu = threading.Lock()
        self.dropped = 0
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def cut(self):
        with self.mu:
            self.cut_flag = True
            for s in list(self.socks):
                self.close(s)

    def heal(self):
        with self.mu:
            self.cut_flag = False

    def close(self, s):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
        self.socks.discard(s)

    def accept(self):
        while True:
            c, _ = self.ls.accept()
            with self.mu:
                if self.cut_flag:
                    c.close()
                    continue
            try:
                s = socket.create_connection(("127.0.0.1", self.target), timeout=2)
                s.settimeout(None)
            except OSError:
                c.close()
                continue
            with self.mu:
                self.socks.update((c, s))
            threading.Thread(target=self.pump, args=(c, s), daemon=True).start()
            threading.Thread(target=self.pump, args=(s, c), daemon=True).start()

    def pump(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                with self.mu:
                    lose = self.cut_flag or self.rng.random() < self.drop
                    if lose and not self.cut_flag:
                        self.dropped += 1
                if lose:
                    break
                b.sendall(data)
        except OSError:
            pass
        with self.mu:
            self.close(a)
            self.close(b)


# --- processes ------------------------------------------------------------------------------------


class Proc:
    def __init__(self, name, argv, logpath, env=None):
        self.name, self.argv, self.logpath, self.env = name, argv, logpath, env
        self.p = None
        self.stopped = False
        self.starts = 0

    def start(self):
        self.starts += 1
        f = open(self.logpath, "ab")
        f.write(("--- start %d at %s\n" % (self.starts, time.strftime("%H:%M:%S"))).encode())
        f.flush()
        self.p = subprocess.Popen(self.argv, stdout=f, stderr=f, stdin=subprocess.DEVNULL,
                                  env=self.env, start_new_session=True)
        self.stopped = False

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            try:
                os.kill(self.p.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self):
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.p is not None:
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                pass


def alive(pid):
    """Whether pid runs (a zombie, killed and not yet reaped by its new parent, does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def http(method, url, body=None, token="admin-token-1", key=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ValueError):
        return 0, ""


CONFIG = """
cluster: soak
heartbeat_timeout: 6s
partition_stop: 10s
backend_poll: 500ms
identities:
  - {name: admin, role: admin, token: admin-token-1, run_as: nobody}
  - {name: alice, role: user, groups: [research], token: alice-token-1, run_as: nobody}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles:
  - {name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
  - {name: strain, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: training, profile: train, groups: [research], requeue_on_loss: true}
"""
SLURM_QUEUE = ("  - {name: slurm, profile: strain, groups: [research], backend: slurm, "
               "partition: debug, gpu_type: testgpu}\n")

# The job: records its start (pid, time, devices), runs D seconds (responsive to SIGTERM), and
# records its end. $1: the records folder, $2: D.
JOB = ('f="$1/${TESSERA_JOB_ID:-none}.$$"; '
       'echo "start $$ $(date +%s%N) ${TESSERA_JOB_ID:-none} ${SLURM_JOB_ID:+slurm:}'
       '${CUDA_VISIBLE_DEVICES:-none}" > "$f"; '
       'trap \'echo "end $$ $(date +%s%N)" >> "$f"; exit 143\' TERM; '
       'end=$(( $(date +%s) + $2 )); while [ "$(date +%s)" -lt "$end" ]; do sleep 0.2; done; '
       'echo "end $$ $(date +%s%N)" >> "$f"')


class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.dir = a.dir
        self.records = os.path.join(self.dir, "records")
        self.faults = {}
        self.stop = threading.Event()
        self.acked = {}  # key -> job id
        self.unanswered = 0
        self.submitted = 0
        self.slowest = 0.0
        self.pg = None
        self.slurm = None
        self.gone = {}  # file -> (last seen alive, first seen gone), ns (stop_watcher)
        self.mu = threading.Lock()

    def count(self, kind):
        with self.mu:
            self.faults[kind] = self.faults.get(kind, 0) + 1

    # --- setup ---
    def start_pg(self):
        bins = sorted(d for d in os.listdir("/usr/lib/postgresql"))[-1]
        bindir = "/usr/lib/postgresql/%s/bin" % bins
        pgdir = os.path.join(self.dir, "pg")
        os.makedirs(pgdir)
        shutil.chown(pgdir, "postgres", "postgres")
        as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(as_pg + [bindir + "/initdb", "-D", pgdir + "/data", "-A", "trust", "-U",
                                "postgres", "--no-sync", "-E", "UTF8", "--locale=C"],
                       check=True, stdout=subprocess.DEVNULL)
        port = free_port()
        opts = ("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=64 "
                "-c shared_buffers=32MB" % (port, pgdir))
        subprocess.run(as_pg + [bindir + "/pg_ctl", "-D", pgdir + "/data", "-l",
                                pgdir + "/server.log", "-w", "-t", "30", "-o", opts, "start"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([bindir + "/createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                        "soak"], check=True)
        self.pg = (as_pg, bindir, pgdir)
        return "postgresql://postgres@127.0.0.1:%d/soak" % port

    def stop_pg(self):
        if self.pg:
            as_pg, bindir, pgdir = self.pg
            subprocess.run(as_pg + [bindir + "/pg_ctl", "-D", pgdir + "/data", "-m", "immediate",
                                    "stop"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start_slurm(self):
        d = os.path.join(self.dir, "slurm")
        r = subprocess.run(["bash", os.path.join(ROOT, "tests/backends/slurm_up.sh"), d],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            log("slurm did not start; running without it:\n" + r.stdout.decode()[-2000:])
            return None
        self.slurm = d
        return os.path.join(d, "slurm.conf")

    def setup(self):
        os.makedirs(self.records)
        os.chmod(self.records, 0o777)
        os.chmod(self.dir, 0o755)
        store = self.start_pg()
        env = dict(os.environ)
        config = CONFIG
        if self.a.slurm:
            conf = self.start_slurm()
            if conf:
                env["SLURM_CONF"] = conf
                config += SLURM_QUEUE
        with open(os.path.join(self.dir, "config.yaml"), "w") as f:
            f.write(config)
        token = os.path.join(self.dir, "agent-token")
        with open(token, "w") as f:
            f.write("agent-token-1\n")
        os.chmod(token, 0o600)
        self.ports = [free_port(), free_port()]
        self.urls = ["http://127.0.0.1:%d" % p for p in self.ports]
        self.servers = []
        for k in range(2):
            self.servers.append(Proc(
                "s%d" % k,
                [self.a.tessera, "serve", "--config", self.dir + "/config.yaml", "--data",
                 self.dir + "/s%d" % k, "--listen", "127.0.0.1:%d" % self.ports[k], "--store",
                 store, "--advertise", self.urls[k]],
                self.dir + "/s%d.log" % k, env))
        self.servers[0].start()
        self.wait_role(0, "leader", 30)
        self.servers[1].start()
        self.wait_role(1, "standby", 30)
        self.proxies = {}
        self.agents = []
        for i in range(1, 7):
            node = "n%d" % i
            px = [Proxy(self.ports[k], self.a.drop, random.Random(self.rng.random()))
                  for k in range(2)]
            self.proxies[node] = px
            self.agents.append(Proc(
                node,
                [self.a.tessera, "agent", "--server",
                 ",".join("http://127.0.0.1:%d" % p.port for p in px), "--token-file", token,
                 "--node", node, "--simulate", "2xH100-80GB", "--work",
                 self.dir + "/work-" + node, "--cgroup-root", ""],
                self.dir + "/agent-%s.log" % node))
        for ag in self.agents:
            ag.start()
        deadline = time.time() + 60
        while time.time() < deadline and self.ready_nodes() < 6:
            time.sleep(0.5)
        log("setup: PostgreSQL, 2 servers, %d agents ready%s" %
            (self.ready_nodes(), ", Slurm" if self.slurm else " (no Slurm)"))

    def wait_role(self, k, role, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st, body = http("GET", self.urls[k] + "/v1/health", timeout=2)
            if st == 200 and json.loads(body).get("role") == role:
                return True
            time.sleep(0.2)
        raise SystemExit("server %d did not become %s: see %s/s%d.log" % (k, role, self.dir, k))

    def leader_url(self):
        for u in self.urls:
            st, body = http("GET", u + "/v1/health", timeout=2)
            if st == 200 and json.loads(body).get("role") == "leader":
                return u
        return None

    def ready_nodes(self):
        u = self.leader_url()
        if not u:
            return 0
        st, body = http("GET", u + "/v1/nodes", timeout=5)
        if st != 200:
            return 0
        return sum(1 for n in json.loads(body)["nodes"] if n.get("state") == "ready")

    # --- load ---
    def submitter(self, who):
        rng = random.Random(self.rng.random())
        n = 0
        while not self.stop.is_set():
            n += 1
            key = "soak-%s-%d" % (who, n)
            slurm = self.slurm is not None and rng.random() < 0.15
            secs = rng.randint(2, 10) if slurm else rng.randint(2, 20)
            body = {"queue": "slurm" if slurm else "training", "name": key,
                    "command": ["/bin/sh", "-c", JOB, "job", self.records, str(secs)]}
            sent = time.time()
            self.submitted += 1
            got = None
            while time.time() - sent < 30 and got is None:
                for u in self.urls:
                    st, text = http("POST", u + "/v1/jobs", body, token="alice-token-1", key=key,
                                    timeout=10)
                    if st == 201:
                        got = json.loads(text)["id"]
                        break
                    if 400 <= st < 500 and st not in (404, 409, 429):
                        log("submission %s refused: %d %s" % (key, st, text[:200]))
                        got = ""
                        break
                if got is None:
                    time.sleep(0.5)
            took = time.time() - sent
            with self.mu:
                self.slowest = max(self.slowest, took)
                if got:
                    self.acked[key] = got
                elif got is None:
                    self.unanswered += 1
            time.sleep(rng.uniform(0.8, 2.5))

    def start_watcher(self):
        self.watch_log = os.path.join(self.dir, "watch.log")
        self.watch_stop = os.path.join(self.dir, "watch.stop")
        self.watch_proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--watch", self.records, self.watch_log,
             self.watch_stop], stdin=subprocess.DEVNULL)

    def stop_watcher(self):
        open(self.watch_stop, "w").close()
        try:
            self.watch_proc.wait(30)
        except subprocess.TimeoutExpired:
            self.watch_proc.kill()
        # name -> (last seen alive, first seen gone), ns; last seen alive None: never seen alive.
        self.gone = {}
        with open(self.watch_log) as f:
            for line in f:
                name, alive_ns, gone_ns = line.split()
                self.gone[name] = (None if alive_ns == "-" else int(alive_ns), int(gone_ns))

    # --- chaos ---
    def chaos(self):
        rng = random.Random(self.rng.random())
        while not self.stop.is_set():
            time.sleep(rng.uniform(2, 8))
            if self.stop.is_set():
                break
            kind = rng.choice(["server_stop", "server_kill", "agent_kill", "agent_stop",
                               "partition"])
            if kind.startswith("server"):
                down = [s for s in self.servers if not s.alive() or s.stopped]
                if down:
                    continue  # one server at a time
                s = rng.choice(self.servers)
                if kind == "server_stop":
                    secs = rng.uniform(2, 15)
                    log("fault: SIGSTOP %s for %.1f s" % (s.name, secs))
                    s.stopped = True
                    s.signal(signal.SIGSTOP)
                    self.later(secs, lambda s=s: (s.signal(signal.SIGCONT),
                                                  setattr(s, "stopped", False)))
                else:
                    secs = rng.uniform(1, 5)
                    log("fault: SIGKILL %s (restarted after %.1f s)" % (s.name, secs))
                    s.kill()
                    self.later(secs, s.start)
            elif kind == "agent_kill":
                ag = rng.choice(self.agents)
                if not ag.alive():
                    continue
                secs = rng.uniform(1, 5)
                log("fault: SIGKILL agent %s (restarted after %.1f s)" % (ag.name, secs))
                ag.signal(signal.SIGKILL)  # the agent alone: its jobs run on
                ag.p.wait()
                self.later(secs, ag.start)
            elif kind == "agent_stop":
                ag = rng.choice(self.agents)
                secs = rng.uniform(2, 10)
                log("fault: SIGSTOP agent %s for %.1f s" % (ag.name, secs))
                ag.signal(signal.SIGSTOP)
                self.later(secs, lambda ag=ag: ag.signal(signal.SIGCONT))
            else:
                node = rng.choice(sorted(self.proxies))
                secs = rng.uniform(5, 20)
                log("fault: partition of agent %s for %.1f s" % (node, secs))
                for p in self.proxies[node]:
                    p.cut()
                self.later(secs, lambda node=node: [p.heal() for p in self.proxies[node]])
            self.count(kind)

    def later(self, secs, fn):
        t = threading.Timer(secs, fn)
        t.daemon = True
        self.timers.append(t)
        t.start()

    # --- the end ---
    def settle(self):
        for t in self.timers:
            t.cancel()
        for s in self.servers:
            s.signal(signal.SIGCONT)
            s.stopped = False
        for ps in self.proxies.values():
            for p in ps:
                p.heal()
                p.drop = 0.0
        for ag in self.agents:
            ag.signal(signal.SIGCONT)
        for s in self.servers:
            if not s.alive():
                s.start()
        for ag in self.agents:
            if not ag.alive():
                ag.start()

    def jobs(self):
        u = self.leader_url()
        if not u:
            return None
        st, body = http("GET", u + "/v1/jobs?limit=1000000", timeout=30)
        if st != 200:
            return None
        return json.loads(body)["jobs"]

    def run(self):
        self.timers = []
        self.setup()
        self.start_watcher()
        t0 = time.time()
        threads = [threading.Thread(target=self.submitter, args=(w,), daemon=True)
                   for w in ("a", "b")]
        threads.append(threading.Thread(target=self.chaos, daemon=True))
        for t in threads:
            t.start()
        while time.time() - t0 < self.a.duration:
            time.sleep(min(30, max(0.1, self.a.duration - (time.time() - t0))))
            log("%.0f s: %d submitted, %d acked, faults %s, drops %d" % (
                time.time() - t0, self.submitted, len(self.acked), self.faults,
                sum(p.dropped for ps in self.proxies.values() for p in ps)))
        self.stop.set()
        for t in threads:
            t.join(60)
        self.settle()
        log("faults stopped; waiting for every job to end")
        deadline = time.time() + self.a.settle
        jobs = None
        while time.time() < deadline:
            jobs = self.jobs()
            if jobs is not None and all(j["state"] in TERMINAL for j in jobs):
                break
            time.sleep(2)
        time.sleep(2)
        self.stop_watcher()
        jobs = self.jobs() or jobs or []
        return self.judge(jobs, time.time() - t0)

    def judge(self, jobs, elapsed):
        ok = True
        # Stored once: each acked key names exactly one stored job, the acked one; no key twice.
        by_name = {}
        for j in jobs:
            name = j.get("name") or j.get("spec", {}).get("name", "")
            by_name.setdefault(name, []).append(j["id"])
        missing = [k for k, i in self.acked.items() if by_name.get(k) != [i]]
        doubled = [k for k, ids in by_name.items() if len(ids) > 1]
        nonterminal = [j["id"] for j in jobs if j["state"] not in TERMINAL]
        states = {}
        for j in jobs:
            states[j["state"]] = states.get(j["state"], 0) + 1
        # The runs, from the jobs' own records (and the watcher for those killed without one).
        runs = []
        for name in os.listdir(self.records):
            lines = open(os.path.join(self.records, name)).read().split("\n")
            if not lines[0].startswith("start "):
                continue
            _, pid, start, job, devs = lines[0].split(" ", 4)
            # Its end: its own end line; else (killed by SIGKILL) between the watcher's last
            # sight of it alive (its start when never seen alive) and its first sight gone.
            end_lo = end_hi = None
            for l in lines[1:]:
                if l.startswith("end "):
                    end_lo = end_hi = int(l.split()[2])
            killed = end_lo is None and name in self.gone
            if killed:
                alive_ns, gone_ns = self.gone[name]
                end_lo, end_hi = (alive_ns if alive_ns is not None else int(start)), gone_ns
            runs.append({"job": job, "pid": int(pid), "start": int(start), "end_lo": end_lo,
                         "end_hi": end_hi, "killed": killed,
                         "devices": devs.split(",") if devs != "none" else [], "file": name})
        open_runs = [r for r in runs if r["end_hi"] is None]

        def overlaps(group):
            """(certain, uncertain): pairs of runs where the later started before the earlier
            ended for sure (before its end line or its last sight alive), and where it started
            within the earlier one's window of death (their bound: how far in, how far out)."""
            bad, unsure = [], []
            for key, rs in group.items():
                rs = sorted(rs, key=lambda r: r["start"])
                for i, x in enumerate(rs):
                    for y in rs[i + 1:]:
                        if x["end_hi"] is None or x["end_lo"] > y["start"]:
                            bad.append((key, x["file"], y["file"], None if x["end_hi"] is None
                                        else (x["end_lo"] - y["start"]) / 1e9))
                        elif x["end_hi"] > y["start"]:
                            unsure.append((key, x["file"], y["file"],
                                           (y["start"] - x["end_lo"]) / 1e6,
                                           (x["end_hi"] - y["start"]) / 1e6))
            return bad, unsure

        def gaps(group):
            """From a killed run's death (first sight gone) to the next start on the same key,
            in ms: the shortest, how many, and how many within 150 ms (within one pass of a
            watcher that looks every 100 ms, as this one did before 2026-12-03, which then took
            the pass's time for the death and could not tell such a handover from an overlap)."""
            out = []
            for rs in group.values():
                rs = sorted(rs, key=lambda r: r["start"])
                for x, y in zip(rs, rs[1:]):
                    if x["killed"] and y["start"] >= x["end_hi"]:
                        out.append((y["start"] - x["end_hi"]) / 1e6)
            return (min(out) if out else None), len(out), sum(1 for g in out if g < 150)

        by_dev, by_job = {}, {}
        for r in runs:
            by_job.setdefault(r["job"], []).append(r)
            for d in r["devices"]:
                by_dev.setdefault(d, []).append(r)
        dev_overlaps, dev_unsure = overlaps(by_dev)
        job_overlaps, job_unsure = overlaps(by_job)
        killed = [r for r in runs if r["killed"]]
        windows = sorted((r["end_hi"] - r["end_lo"]) / 1e6 for r in killed)
        reruns = sum(len(rs) - 1 for rs in by_job.values())
        drops = sum(p.dropped for ps in self.proxies.values() for p in ps)
        print("\n=== fault soak: %.0f s of faults (%.0f s in all), seed %d, drop %.3f, %s ===" % (
            self.a.duration, elapsed, self.a.seed, self.a.drop,
            "PostgreSQL, 2 servers, 6 agents x 2 simulated H100, " +
            ("real Slurm (2 GPUs)" if self.slurm else "no Slurm")))
        print("faults injected: %s; messages dropped by the proxies: %d" % (
            ", ".join("%s %d" % kv for kv in sorted(self.faults.items())), drops))
        print("server starts: %s; agent starts: %s" % (
            [s.starts for s in self.servers], [a.starts for a in self.agents]))
        print("submissions: %d sent, %d acknowledged, %d unanswered within 30 s; slowest "
              "acknowledgement %.1f s" % (self.submitted, len(self.acked), self.unanswered,
                                          self.slowest))
        print("stored: %d jobs; acknowledged and not stored once: %d; names stored twice: %d" % (
            len(jobs), len(missing), len(doubled)))
        print("job states at the end: %s; not terminal: %d" % (states, len(nonterminal)))
        why = {}
        for j in jobs:
            if j["state"] == "failed":
                r = j.get("reason") or "exit code %s" % j.get("exit_code")
                why[r] = why.get(r, 0) + 1
        for r, n in sorted(why.items(), key=lambda kv: -kv[1])[:10]:
            print("  failed: %d x %s" % (n, r[:160]))
        print("runs recorded by the jobs' processes: %d (%d jobs ran, %d runs were re-runs after "
              "a requeue); runs with no known end: %d" % (len(runs), len(by_job), reruns,
                                                          len(open_runs)))
        print("runs killed without an end line: %d; the watcher's window on their death: "
              "median %.1f ms, largest %.1f ms" % (
                  len(killed), windows[len(windows) // 2] if windows else 0,
                  windows[-1] if windows else 0))
        for what, group in (("device", by_dev), ("job", by_job)):
            least, n, close = gaps(group)
            if n:
                print("  after a killed run, the next start on its %s: %d times, the soonest "
                      "%.1f ms after it was seen gone, %d within 150 ms" % (what, n, least, close))
        print("device in two grants at once: %d; job running twice at once: %d" % (
            len(dev_overlaps), len(job_overlaps)))
        for what, bad in (("device", dev_overlaps), ("job", job_overlaps)):
            for b in bad[:10]:
                print("  %s overlap: %s %s then %s (overlap %s s)" % (what, *b))
        print("within the watcher's window (not told from none; not counted): device %d, job %d"
              % (len(dev_unsure), len(job_unsure)))
        for what, unsure in (("device", dev_unsure), ("job", job_unsure)):
            for u in unsure[:10]:
                print("  %s: %s %s then %s: started %.1f ms after the first was last seen alive, "
                      "%.1f ms before it was seen gone" % (what, *u))
        for k in missing[:10]:
            print("  acknowledged, not stored once: %s -> %s (stored: %s)" % (
                k, self.acked[k], by_name.get(k)))
        ok = not (missing or doubled or nonterminal or dev_overlaps or job_overlaps or open_runs)
        print("RESULT: %s" % ("every check holds" if ok else "FAILED"))
        return ok

    def teardown(self):
        if getattr(self, "watch_proc", None) is not None and self.watch_proc.poll() is None:
            self.watch_proc.kill()
        for ag in getattr(self, "agents", []):
            ag.kill()
        # Jobs left by agents killed alone (their own sessions): by the records' pids.
        for name in os.listdir(self.records) if os.path.isdir(self.records) else []:
            try:
                pid = int(open(os.path.join(self.records, name)).read().split()[1])
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass
        for s in getattr(self, "servers", []):
            s.kill()
        if self.slurm:
            subprocess.run(["bash", os.path.join(ROOT, "tests/backends/slurm_down.sh"),
                            self.slurm], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.stop_pg()


def watch(records, out_path, stop_path):
    """The watcher (`--watch RECORDS OUT STOP`, a process of its own): for every recorded process
    without an end line, a pidfd; for each one that dies, "NAME ALIVE_NS GONE_NS" in OUT: the
    last time it was seen alive (or -) and the first time it was seen gone (the wall clock's ns,
    as the records). poll() scans every pidfd after it is called: a pidfd it does not report was
    alive at the call, one it reports (readable: the process exited) was gone when it returned.
    It ends when STOP exists, after one more look at the records."""
    poller = select.poll()
    fds = {}  # fd -> [name, last seen alive ns]
    seen = set()
    out = open(out_path, "a", buffering=1)
    last_scan = 0.0
    stopping = False
    while True:
        if time.monotonic() - last_scan >= 0.05 or stopping:
            last_scan = time.monotonic()
            for name in os.listdir(records):
                if name in seen:
                    continue
                try:
                    lines = open(os.path.join(records, name)).read().split("\n")
                except OSError:
                    continue
                if not lines[0].startswith("start ") or len(lines[0].split()) < 5:
                    continue  # being written: next time
                seen.add(name)
                if any(l.startswith("end ") for l in lines):
                    continue
                pid = int(lines[0].split()[1])
                t0 = time.time_ns()
                try:
                    fd = os.pidfd_open(pid)
                except OSError:
                    out.write("%s - %d\n" % (name, time.time_ns()))  # gone before it was seen
                    continue
                # The record's process (its command names the records), not a later one's pid.
                try:
                    cmd = open("/proc/%d/cmdline" % pid, "rb").read().decode(errors="replace")
                except OSError:
                    cmd = ""
                if records not in cmd or not alive(pid):
                    os.close(fd)
                    out.write("%s - %d\n" % (name, time.time_ns()))
                    continue
                fds[fd] = [name, t0]
                poller.register(fd, select.POLLIN)
        if stopping:
            break
        t_call = time.time_ns()
        ready = {fd for fd, _ in poller.poll(5)}
        t_ret = time.time_ns()
        for fd, entry in list(fds.items()):
            if fd not in ready:
                entry[1] = t_call
                continue
            out.write("%s %d %d\n" % (entry[0], entry[1], t_ret))
            poller.unregister(fd)
            os.close(fd)
            del fds[fd]
        stopping = os.path.exists(stop_path)
    out.close()


TERMINAL = {"succeeded", "failed", "cancelled"}


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--watch":
        watch(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("duration", help="how long faults are injected: 300, 5m, 30m, 1h")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build/src/cli/tessera"))
    ap.add_argument("--dir", default="/tmp/tessera-soak-%d" % os.getpid())
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--drop", type=float, default=0.01,
                    help="probability that a chunk through a proxy is lost (default 0.01)")
    ap.add_argument("--settle", type=float, default=300,
                    help="seconds to wait for every job to end after the faults (default 300)")
    ap.add_argument("--no-slurm", dest="slurm", action="store_false")
    a = ap.parse_args()
    a.duration = parse_duration(a.duration)
    a.tessera = os.path.abspath(a.tessera)
    if os.path.exists(a.dir):
        shutil.rmtree(a.dir)
    os.makedirs(a.dir)
    soak = Soak(a)
    try:
        ok = soak.run()
    finally:
        soak.teardown()
    print("state and logs: " + a.dir)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
