"""neuron.runs: a local history of profiled and benchmarked runs, in one SQLite file.

    prof = neuron.profile(k)(a, b); prof.record()        # or NEURON_RUNS=1 records every profile
    neuron.runs.list(kernel="matmul")                    # newest first
    neuron.runs.get(7).text()                            # one run: engines, lines, waits
    print(neuron.runs.compare(6, 7))                     # what got faster or slower

and from a shell: `neuron runs list | show ID | compare A B` (or `python -m neuron runs ...`).

Each run keeps the kernel's IR hash, target, shapes, options, toolkit version, build id and
commit, host, its times per engine and per source line, top waits, and the failure text of
failed runs. The file is NEURON_RUNS_DB, else $XDG_CACHE_HOME/neuron/runs.sqlite. Several
processes may write at once (WAL journal, busy timeout, immediate transactions). A damaged file
is set aside as <file>.corrupt-<time>-<pid> and what can still be read from it is copied into a
fresh one, so no run that can be recovered is lost and the damaged file stays for inspection.
"""
import builtins
import hashlib
import json
import os
import platform
import socket
import sqlite3
import subprocess
import sys
import time
import warnings

__all__ = ["default_path", "record", "record_failure", "record_benchmark", "list", "get",
           "compare", "Run", "RunComparison", "main"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created REAL NOT NULL,
  kind TEXT NOT NULL,
  status TEXT NOT NULL,
  kernel TEXT NOT NULL,
  ir_hash TEXT,
  target TEXT,
  shapes TEXT,
  options TEXT,
  toolkit_version TEXT,
  build_id TEXT,
  git_commit TEXT,
  host TEXT,
  device_ns REAL,
  launch_ns REAL,
  verdict TEXT,
  summary TEXT,
  error TEXT,
  label TEXT
);
CREATE TABLE IF NOT EXISTS run_units (
  run_id INTEGER NOT NULL, unit TEXT, active_ns REAL, engine_ns REAL, wait_ns REAL,
  instructions INTEGER);
CREATE TABLE IF NOT EXISTS run_lines (
  run_id INTEGER NOT NULL, file TEXT, line INTEGER, instructions TEXT, engine_ns REAL,
  wait_ns REAL, count INTEGER);
CREATE TABLE IF NOT EXISTS run_waits (
  run_id INTEGER NOT NULL, waiter TEXT, for_op TEXT, file TEXT, line INTEGER, dependence TEXT,
  memory TEXT, wait_ns REAL, count INTEGER);
CREATE INDEX IF NOT EXISTS runs_kernel ON runs(kernel, created);
CREATE INDEX IF NOT EXISTS run_units_run ON run_units(run_id);
CREATE INDEX IF NOT EXISTS run_lines_run ON run_lines(run_id);
CREATE INDEX IF NOT EXISTS run_waits_run ON run_waits(run_id);
"""
_TABLES = ("runs", "run_units", "run_lines", "run_waits")
_BUSY_TIMEOUT_S = 30


def default_path():
    """NEURON_RUNS_DB, else $XDG_CACHE_HOME/neuron/runs.sqlite (~/.cache/...)."""
    p = os.environ.get("NEURON_RUNS_DB")
    if p:
        return p
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "neuron", "runs.sqlite")


# ---- opening, damage and recovery ----

def _new(path):
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_S * 1000}")
    return conn


def _check(conn):
    """Raises sqlite3.DatabaseError unless the file is a sound run history."""
    row = conn.execute("PRAGMA quick_check").fetchone()
    if not row or row[0] != "ok":
        raise sqlite3.DatabaseError(f"quick_check: {row[0] if row else 'no answer'}")
    conn.executescript(_SCHEMA)


def _salvage_rows(bad_path):
    """What can be read from a damaged file: {table: [rows]}, stopping at the first unreadable
    page of each table. A damaged header (the 16-byte magic) is repaired in a copy first."""
    got = {}
    candidates = [bad_path]
    try:
        with open(bad_path, "rb") as f:
            data = bytearray(f.read())
        if len(data) >= 100 and data[:16] != b"SQLite format 3\0":
            data[:16] = b"SQLite format 3\0"
            fixed = bad_path + ".header-fixed"
            with open(fixed, "wb") as f:
                f.write(data)
            candidates.append(fixed)
    except OSError:
        return got
    for path in candidates:
        try:
            src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        except sqlite3.Error:
            continue
        try:
            for table in _TABLES:
                rows = []
                try:
                    for r in src.execute(f"SELECT * FROM {table}"):
                        rows.append(r)
                except sqlite3.Error:
                    pass
                if len(rows) > len(got.get(table, [])):
                    got[table] = rows
        finally:
            src.close()
        if path != bad_path:
            try:
                os.remove(path)
            except OSError:
                pass
    return got


def _set_aside(path):
    """Renames a damaged file (and its WAL) out of the way; returns the new name or None when
    another process did it first."""
    bad = f"{path}.corrupt-{int(time.time())}-{os.getpid()}"
    try:
        os.replace(path, bad)
    except FileNotFoundError:
        return None
    for ext in ("-wal", "-shm"):
        try:
            os.replace(path + ext, bad + ext)
        except FileNotFoundError:
            pass
    return bad


def _connect(path=None):
    path = os.fspath(path or default_path())
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    for _ in range(3):
        conn = None
        try:
            conn = _new(path)
            _check(conn)
            return conn
        except sqlite3.OperationalError as e:
            if conn:
                conn.close()
            if "locked" in str(e) or "busy" in str(e):
                time.sleep(0.05)
                continue
            raise
        except sqlite3.DatabaseError as e:
            if conn:
                conn.close()
            bad = _set_aside(path)
            if bad is None:
                continue  # another writer set it aside; open the fresh file
            rows = _salvage_rows(bad)
            conn = _new(path)
            conn.executescript(_SCHEMA)
            n = _restore(conn, rows)
            warnings.warn(f"run history {path} was damaged ({e}); kept as {bad}; {n} runs "
                          f"recovered into a fresh file", RuntimeWarning, stacklevel=3)
            return conn
    return _new(path)


def _restore(conn, rows):
    """Copies salvaged rows into a fresh database; returns the number of runs restored."""
    runs = rows.get("runs", [])
    conn.execute("BEGIN IMMEDIATE")
    try:
        cols = len(_columns(conn, "runs"))
        for r in runs:
            if len(r) == cols:
                conn.execute(f"INSERT OR IGNORE INTO runs VALUES ({','.join('?' * cols)})", r)
        kept = {r[0] for r in runs}
        for table in _TABLES[1:]:
            cols = len(_columns(conn, table))
            for r in rows.get(table, []):
                if len(r) == cols and r[0] in kept:
                    conn.execute(f"INSERT INTO {table} VALUES ({','.join('?' * cols)})", r)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(runs)


def _columns(conn, table):
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _write(db, fn):
    """Runs fn(conn) in an immediate transaction, retrying while another writer holds the lock
    longer than the busy timeout."""
    for attempt in range(20):
        conn = _connect(db)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
                return out
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as e:
            if ("locked" not in str(e) and "busy" not in str(e)) or attempt == 19:
                raise
            time.sleep(0.05 * (attempt + 1))
        finally:
            conn.close()


# ---- what a run records ----

_ENV = None


def _environment():
    """Toolkit version, build id, commit and host, computed once per process."""
    global _ENV
    if _ENV is None:
        from . import _C
        try:
            build_id = _C.cache_info().get("build_id", "")
        except Exception:  # noqa: BLE001 - a missing cache must not stop recording
            build_id = ""
        here = os.path.dirname(os.path.realpath(__file__))
        try:
            commit = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True,
                                    text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = ""
        try:
            from importlib.metadata import version
            toolkit = version("neuron")
        except Exception:  # noqa: BLE001 - not installed with pip: the source tree
            toolkit = "source"
        host = f"{socket.gethostname()} ({platform.platform()}, Python {platform.python_version()})"
        _ENV = dict(toolkit_version=toolkit, build_id=build_id, git_commit=commit, host=host)
    return _ENV


def _insert_run(conn, **fields):
    env = _environment()
    row = dict(created=time.time(), status="ok", **env)
    row.update(fields)
    cols = builtins.list(row)
    cur = conn.execute(f"INSERT INTO runs ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                       [row[c] for c in cols])
    return cur.lastrowid


def record(profile, db=None, kind="profile", label=None):
    """Adds a neuron.Profile to the run history; returns the run id."""
    def put(conn):
        rid = _insert_run(
            conn, kind=kind, kernel=profile.kernel,
            ir_hash=hashlib.sha256((profile.ir_text or "").encode()).hexdigest()[:16],
            target=profile.target, shapes=json.dumps(profile.shapes),
            options=json.dumps(profile.options), device_ns=profile.summary["device_ns"],
            launch_ns=profile.summary["launch_ns"], verdict=profile.verdict,
            summary=json.dumps(profile.summary), label=label)
        conn.executemany("INSERT INTO run_units VALUES (?,?,?,?,?,?)",
                         [(rid, u["unit"], u["active_ns"], u["engine_ns"], u["wait_ns"],
                           u["instructions"]) for u in profile.units])
        conn.executemany("INSERT INTO run_lines VALUES (?,?,?,?,?,?,?)",
                         [(rid, l["file"], l["line"], l["instructions"], l["engine_ns"],
                           l["wait_ns"], l["count"]) for l in profile.lines])
        conn.executemany("INSERT INTO run_waits VALUES (?,?,?,?,?,?,?,?,?)",
                         [(rid, w["waiter"], w["for"], w["file"], w["line"], w["dependence"],
                           w["memory"], w["wait_ns"], w["count"]) for w in profile.waits[:20]])
        return rid
    return _write(db, put)


def record_failure(kernel, target, shapes, options, error, db=None, kind="profile"):
    """Adds a failed run (its error text) to the history; returns the run id."""
    return _write(db, lambda conn: _insert_run(
        conn, kind=kind, status="failed", kernel=kernel, target=target,
        shapes=json.dumps(shapes), options=json.dumps(options), error=str(error)))


def record_benchmark(kernel, target, time_ns, shapes=(), options=None, db=None, label=None,
                     **summary):
    """Adds a benchmark result (a measured or modelled time) to the history; returns its id."""
    return _write(db, lambda conn: _insert_run(
        conn, kind="benchmark", kernel=kernel, target=target, shapes=json.dumps(list(shapes)),
        options=json.dumps(options or {}), device_ns=float(time_ns), label=label,
        summary=json.dumps(summary)))


# ---- reading ----

class Run:
    """One recorded run: its fields (`id`, `kernel`, `target`, `status`, `device_ns`, `verdict`,
    `error`, ...) as attributes, and `units`, `lines`, `waits` as lists of dicts."""

    def __init__(self, row, cols, conn=None):
        self.__dict__.update(dict(zip(cols, row)))
        for k in ("shapes", "options", "summary"):
            v = self.__dict__.get(k)
            self.__dict__[k] = json.loads(v) if v else None
        self.units, self.lines, self.waits = [], [], []
        if conn is not None:
            self.units = _dicts(conn, "SELECT unit, active_ns, engine_ns, wait_ns, instructions "
                                      "FROM run_units WHERE run_id=?", self.id)
            self.lines = _dicts(conn, "SELECT file, line, instructions, engine_ns, wait_ns, count "
                                      "FROM run_lines WHERE run_id=? ORDER BY engine_ns DESC",
                                self.id)
            self.waits = _dicts(conn, "SELECT waiter, for_op, file, line, dependence, memory, "
                                      "wait_ns, count FROM run_waits WHERE run_id=? "
                                      "ORDER BY wait_ns DESC", self.id)

    def __repr__(self):
        return f"<neuron.runs.Run {self.id} {self.kernel} on {self.target}: {self.status}>"

    def brief(self):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.created))
        what = (f"{self.device_ns / 1000:12.2f} us  {self.verdict or ''}"
                if self.status == "ok" and self.device_ns is not None
                else f"{'FAILED':>15}  {(self.error or '').splitlines()[0][:60] if self.error else ''}")
        return f"{self.id:5}  {when}  {self.kind:9} {self.kernel:24} {self.target or '':5} {what}"

    def text(self):
        out = [f"run {self.id}: {self.kind} of {self.kernel} on {self.target} ({self.status})",
               f"  recorded  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.created))}",
               f"  shapes    {self.shapes}", f"  options   {self.options}",
               f"  IR hash   {self.ir_hash}",
               f"  toolkit   {self.toolkit_version}, build {self.build_id[:16] if self.build_id else ''}"
               f", commit {self.git_commit[:12] if self.git_commit else ''}",
               f"  host      {self.host}"]
        if self.label:
            out.append(f"  label     {self.label}")
        if self.status != "ok":
            out.append("  error:")
            out += ["    " + l for l in (self.error or "").splitlines()]
            return "\n".join(out)
        if self.device_ns is not None:
            out.append(f"  time      {self.device_ns / 1000:.2f} us on the device"
                       + (f" + {self.launch_ns / 1000:.2f} us launch floor"
                          if self.launch_ns else ""))
        if self.verdict:
            out.append(f"  verdict   {self.verdict}")
        if self.units:
            out.append("  units (active, engine time, waiting, instructions):")
            for u in self.units:
                out.append(f"    {u['unit']:10} {u['active_ns'] / 1000:12.2f} us "
                           f"{u['engine_ns'] / 1000:12.2f} us {u['wait_ns'] / 1000:12.2f} us "
                           f"{u['instructions']:9}")
        if self.lines:
            out.append("  source lines (engine time, waiting, runs):")
            for l in self.lines[:12]:
                out.append(f"    {_where(l):28} {l['engine_ns'] / 1000:12.2f} us "
                           f"{l['wait_ns'] / 1000:12.2f} us {l['count']:8}x  {l['instructions']}")
        if self.waits:
            out.append("  top waits:")
            for w in self.waits[:6]:
                out.append(f"    {w['waiter']:8} waited {w['wait_ns'] / 1000:12.2f} us "
                           f"({w['count']}x) for {w['for_op']} at {_where(w)} "
                           f"({w['dependence']} dependence on {w['memory']})")
        return "\n".join(out)

    def __str__(self):
        return self.text()


def _where(d):
    f = d.get("file") or "<unknown>"
    return f"{os.path.basename(f)}:{d.get('line')}"


def _dicts(conn, sql, *args):
    cur = conn.execute(sql, args)
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur]


def list_runs(kernel=None, target=None, status=None, kind=None, limit=20, db=None):
    """Runs newest first, filtered by kernel name (substring), target, status and kind."""
    conn = _connect(db)
    try:
        where, args = [], []
        for col, v in (("target", target), ("status", status), ("kind", kind)):
            if v:
                where.append(f"{col}=?")
                args.append(v)
        if kernel:
            where.append("kernel LIKE ?")
            args.append(f"%{kernel}%")
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        cur = conn.execute(sql, args)
        cols = [c[0] for c in cur.description]
        return [Run(r, cols) for r in cur.fetchall()]
    finally:
        conn.close()


def get(run_id, db=None):
    """One run with its per-unit, per-line and wait tables; KeyError when there is none."""
    conn = _connect(db)
    try:
        cur = conn.execute("SELECT * FROM runs WHERE id=?", (int(run_id),))
        row = cur.fetchone()
        if row is None:
            raise KeyError(f"no run {run_id} in {db or default_path()}")
        return Run(row, [c[0] for c in cur.description], conn)
    finally:
        conn.close()


class RunComparison:
    """Two recorded runs side by side: `units` and `lines` as (what, before_ns, after_ns) rows,
    largest line changes first; `speedup` is before / after device time."""

    def __init__(self, a, b):
        self.before, self.after = a, b
        order = [u["unit"] for u in a.units] + [u["unit"] for u in b.units
                                                 if u["unit"] not in {x["unit"] for x in a.units}]
        ua = {u["unit"]: u["active_ns"] for u in a.units}
        ub = {u["unit"]: u["active_ns"] for u in b.units}
        self.units = [(u, ua.get(u, 0.0), ub.get(u, 0.0)) for u in order]
        key = lambda l: f"{_where(l)}  {l['instructions']}"  # noqa: E731
        la, lb = {}, {}
        for l in a.lines:
            la[key(l)] = la.get(key(l), 0.0) + l["engine_ns"]
        for l in b.lines:
            lb[key(l)] = lb.get(key(l), 0.0) + l["engine_ns"]
        keys = builtins.list(dict.fromkeys(builtins.list(la) + builtins.list(lb)))
        self.lines = sorted([(k, la.get(k, 0.0), lb.get(k, 0.0)) for k in keys],
                            key=lambda r: -abs(r[2] - r[1]))

    @property
    def speedup(self):
        a, b = self.before.device_ns, self.after.device_ns
        return a / b if a and b else float("nan")

    def text(self):
        a, b = self.before, self.after

        def change(x, y):
            if not x and not y:
                return "="
            if not x:
                return "new"
            if not y:
                return "gone"
            r = y / x
            return "=" if abs(r - 1) < 0.005 else f"x{r:.2f} {'faster' if r < 1 else 'slower'}"
        out = [f"run {a.id} -> run {b.id}: {a.kernel} on {a.target} -> {b.kernel} on {b.target}"]
        if a.kernel != b.kernel:
            out.append("  (different kernels: compare runs of one kernel for a like-for-like view)")
        if a.device_ns and b.device_ns:
            out.append(f"  time     {a.device_ns / 1000:.2f} us -> {b.device_ns / 1000:.2f} us "
                       f"({change(a.device_ns, b.device_ns)})")
        out.append(f"  verdict  {a.verdict} -> {b.verdict}")
        if a.ir_hash != b.ir_hash:
            out.append(f"  IR       {a.ir_hash} -> {b.ir_hash} (the kernel changed)")
        out.append("  by unit (active time):")
        for u, x, y in self.units:
            out.append(f"    {u:10} {x / 1000:12.2f} us {y / 1000:12.2f} us  {change(x, y)}")
        out.append("  by source line (engine time, largest changes first):")
        for k, x, y in self.lines[:12]:
            out.append(f"    {k[:44]:44} {x / 1000:12.2f} us {y / 1000:12.2f} us  {change(x, y)}")
        return "\n".join(out)

    def html(self):
        """A small self-contained HTML table of the comparison."""
        import html as h
        rows = "".join(f"<tr><td>{h.escape(u)}</td><td>{x / 1000:.2f}</td><td>{y / 1000:.2f}</td>"
                       f"</tr>" for u, x, y in self.units + self.lines[:30])
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>run {self.before.id} vs "
                f"{self.after.id}</title></head><body><pre>{h.escape(self.text())}</pre>"
                f"<table border=1><tr><th>unit / line</th><th>run {self.before.id} (us)</th>"
                f"<th>run {self.after.id} (us)</th></tr>{rows}</table></body></html>")

    def __str__(self):
        return self.text()


def compare(a, b, db=None):
    """Compares runs `a` and `b` (ids or Run objects): what got faster or slower."""
    a = a if isinstance(a, Run) else get(a, db)
    b = b if isinstance(b, Run) else get(b, db)
    return RunComparison(a, b)


list = list_runs  # neuron.runs.list(...), as `neuron runs list`


# ---- command line ----

def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="neuron runs", description="the local run history")
    ap.add_argument("--db", default=None, help=f"database file (default: {default_path()})")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="runs, newest first")
    ls.add_argument("--kernel")
    ls.add_argument("--target")
    ls.add_argument("--status", choices=["ok", "failed"])
    ls.add_argument("--kind", choices=["profile", "benchmark"])
    ls.add_argument("-n", "--limit", type=int, default=20)
    sh = sub.add_parser("show", help="one run in full")
    sh.add_argument("id", type=int)
    cp = sub.add_parser("compare", help="two runs side by side")
    cp.add_argument("a", type=int)
    cp.add_argument("b", type=int)
    cp.add_argument("--html", help="also write the comparison as HTML to this file")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "list":
            runs = list_runs(a.kernel, a.target, a.status, a.kind, a.limit, a.db)
            if not runs:
                print(f"no runs in {a.db or default_path()}")
            for r in runs:
                print(r.brief())
        elif a.cmd == "show":
            print(get(a.id, a.db).text())
        else:
            c = compare(a.a, a.b, a.db)
            print(c.text())
            if a.html:
                with open(a.html, "w") as f:
                    f.write(c.html())
    except KeyError as e:
        print(f"neuron runs: {e.args[0]}", file=sys.stderr)
        return 1
    return 0
