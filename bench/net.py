#!/usr/bin/env python3
"""Network echo benchmark: an echo server on each loop, a C load client, all on 127.0.0.1.

    python bench/net.py                                   # everything found, 5 repeats
    python bench/net.py --quick                           # smoke test, ~4 minutes
    python bench/net.py --loops asyncio,uvloop,rsloop --kinds protocol,streams \\
        --sizes 1k,100k --repeat 7 --duration 5
    python bench/net.py --kinds tls --tls-sizes 1k,100k    # TLS echo only

For each repeat, for each (server kind, message size), every loop serves once, in a
fresh ``python bench/_net_server.py LOOP KIND`` process (interleaved A B C A B C), while
``bench/echo_client.c`` (compiled on first use) runs closed-loop round trips over
``--connections`` sockets (over OpenSSL for the ``tls`` kind, with a throwaway
self-signed certificate made at start-up). The parent samples the server's CPU time (/proc/PID/stat)
around the client's measured window and reads the server's peak RSS. The tables report
medians over the repeats; JSON goes to bench/results/net-<timestamp>.json. Linux only.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as _dt
import json
import os
import platform
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _machine import describe  # noqa: E402
from run import (  # noqa: E402
    ALL_LOOPS,
    DEFAULT_LOOPS,
    NOT_INSTALLED,
    OURS,
    _loadavg,
    add_venv_options,
    child_command,
    resolve_venv_options,
)

KINDS = ["protocol", "streams", "sock", "udp", "tls"]
TCP_KINDS = ("protocol", "streams", "sock", "tls")
UNSUPPORTED = 4  # exit code of _net_server.py: the loop lacks an API this kind needs
BASELINE = "asyncio"
CLIENT_SRC = HERE / "echo_client.c"
STALL_S = 5.0  # the client gives up when no round trip completes for this long
START_TIMEOUT_S = 30.0  # server start-up (imports, loop, bind)
STOP_TIMEOUT_S = 10.0  # server shutdown after the stop line

_live: list = []  # every child process still running; killed on any exit


def _kill_all():
    for proc in _live:
        if proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    _live.clear()


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def parse_size(text: str) -> int:
    t = text.strip().lower()
    mult = 1
    if t.endswith("k"):
        mult, t = 1024, t[:-1]
    elif t.endswith("m"):
        mult, t = 1024 * 1024, t[:-1]
    return int(float(t) * mult)


def fmt_size(n: int) -> str:
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    if n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--loops",
        default=",".join(DEFAULT_LOOPS),
        help=f"comma-separated, from {','.join(ALL_LOOPS)} (default: all but "
        "rsloop-nostats; missing ones are skipped with a note)",
    )
    p.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"server kinds, comma-separated, from {','.join(KINDS)} (default: all)",
    )
    p.add_argument(
        "--sizes",
        default="1k,10k,100k",
        help="message sizes for the TCP kinds, bytes with an optional k/m suffix "
        "(KiB/MiB) (default 1k,10k,100k)",
    )
    p.add_argument("--udp-sizes", default="1k", help="datagram sizes for the udp kind (default 1k)")
    p.add_argument(
        "--tls-sizes", default="1k,100k", help="message sizes for the tls kind (default 1k,100k)"
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="server processes per (kind, size, loop); median reported (default 5, quick 3)",
    )
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help="measured seconds per run (default 3, quick 1)",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="unmeasured seconds before that, same connections (default 0.5, quick 0.25)",
    )
    p.add_argument(
        "--connections", type=int, default=10, help="client connections / sockets (default 10)"
    )
    p.add_argument(
        "--udp-timeout-ms",
        type=int,
        default=200,
        help="a datagram not echoed within this is counted lost and a new one sent (default 200)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="1 s windows, 0.25 s warm-up, 3 repeats: a smoke test (~4 min for 6 loops)",
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="pin the server to CPU 0 and the client to CPU 1 (default: let the "
        "scheduler place them)",
    )
    p.add_argument(
        "--python", default=sys.executable, help="interpreter of the servers (default: this one)"
    )
    add_venv_options(p)
    p.add_argument(
        "--cc", default=os.environ.get("CC", "cc"), help="C compiler (default $CC or cc)"
    )
    p.add_argument(
        "--client",
        default=None,
        help="use this echo_client binary instead of building bench/echo_client.c",
    )
    p.add_argument(
        "--out",
        default=None,
        help="JSON results file (default bench/results/net-<UTC timestamp>.json)",
    )
    a = p.parse_args(argv)
    if a.repeat is None:
        a.repeat = 3 if a.quick else 5
    if a.duration is None:
        a.duration = 1.0 if a.quick else 3.0
    if a.warmup is None:
        a.warmup = 0.25 if a.quick else 0.5
    a.loops = [x.strip() for x in a.loops.split(",") if x.strip()]
    a.kinds = [x.strip() for x in a.kinds.split(",") if x.strip()]
    for x in a.loops:
        if x not in ALL_LOOPS:
            p.error(f"unknown loop {x!r}; choose from {', '.join(ALL_LOOPS)}")
    for x in a.kinds:
        if x not in KINDS:
            p.error(f"unknown kind {x!r}; choose from {', '.join(KINDS)}")
    try:
        a.sizes = [parse_size(x) for x in a.sizes.split(",") if x.strip()]
        a.udp_sizes = [parse_size(x) for x in a.udp_sizes.split(",") if x.strip()]
        a.tls_sizes = [parse_size(x) for x in a.tls_sizes.split(",") if x.strip()]
    except ValueError as exc:
        p.error(f"bad size: {exc}")
    if any(s < 1 for s in a.sizes + a.tls_sizes) or any(not 8 <= s <= 65507 for s in a.udp_sizes):
        p.error("sizes must be >= 1 byte; UDP sizes in [8, 65507]")
    if a.connections < 1 or a.repeat < 1 or a.duration <= 0 or a.warmup < 0:
        p.error("--connections, --repeat and --duration must be positive")
    resolve_venv_options(a)
    return a


# the C client -------------------------------------------------------------------------
def _client_modes(binary) -> set:
    """The modes a built client supports (``echo_client -V``: "tcp udp [tls]")."""
    try:
        r = subprocess.run([str(binary), "-V"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return set()
    return set(r.stdout.split()) if r.returncode == 0 else set()


def _tls_flags() -> list:
    """Compiler flags for a client that speaks TLS (OpenSSL), from pkg-config if there."""
    try:
        r = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "openssl"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if r.returncode == 0 and r.stdout.strip():
            return ["-DECHO_TLS", *r.stdout.split()]
    except (OSError, subprocess.SubprocessError):
        pass
    return ["-DECHO_TLS", "-lssl", "-lcrypto"]


def ensure_client(args):
    """(path, modes) of a compiled echo_client no older than its source; builds it if
    needed (into bench/results/, or a temporary directory if that is not writable).
    It is built with TLS (OpenSSL) when the headers are there, else without (the tls
    kind then fails with a note saying so)."""
    want_tls = "tls" in args.kinds
    if args.client:
        return args.client, _client_modes(args.client)
    src_mtime = CLIENT_SRC.stat().st_mtime
    for d in (HERE / "results", None):
        if d is None:
            d = Path(tempfile.mkdtemp(prefix="rsloop-bench-"))
        binary = d / "echo_client"
        if binary.exists() and binary.stat().st_mtime >= src_mtime:
            modes = _client_modes(binary)
            if "tcp" in modes and (not want_tls or "tls" in modes):
                return str(binary), modes
        try:
            d.mkdir(parents=True, exist_ok=True)
            base = [args.cc, "-O2", "-Wall", "-o", str(binary), str(CLIENT_SRC)]
            r = subprocess.run(base + _tls_flags(), capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                why = (r.stderr.strip().splitlines() or ["?"])[0]
                print(
                    f"# building the client with TLS failed ({why}); building it without: "
                    "the tls kind needs OpenSSL's headers (Debian: libssl-dev)",
                    file=sys.stderr,
                )
                r = subprocess.run(base, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"# building the client in {d} failed: {exc}", file=sys.stderr)
            continue
        if r.returncode == 0:
            modes = _client_modes(binary)
            print(f"# built {binary} ({' '.join(sorted(modes))})", file=sys.stderr)
            return str(binary), modes
        raise SystemExit(f"{' '.join(base)} failed:\n{r.stderr}")
    raise SystemExit("could not build bench/echo_client.c (see above)")


# a throwaway TLS certificate --------------------------------------------------------------
def make_tls_cert():
    """(cert path, key path, None) of a fresh self-signed certificate for IP 127.0.0.1
    (EC P-256, valid one day) in a temporary directory removed at exit, or (None, None,
    why). Made with the openssl command line tool; nothing is written to the repo."""
    tool = shutil.which("openssl")
    if tool is None:
        return None, None, "no openssl command to make a test certificate (Debian: openssl)"
    d = tempfile.mkdtemp(prefix="rsloop-bench-tls-")
    atexit.register(shutil.rmtree, d, True)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    cmd = [
        tool,
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-keyout",
        key,
        "-out",
        cert,
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, None, f"openssl req failed: {exc}"
    if r.returncode != 0:
        return None, None, f"openssl req failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    return cert, key, None


# child processes ------------------------------------------------------------------------
class Lines:
    """Line reader over a child's stdout pipe with a deadline per line."""

    def __init__(self, proc):
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.buf = b""
        self.eof = False

    def readline(self, timeout: float):
        """Next line (str, without newline), or None on EOF or timeout."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf and not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65536)
                if chunk:
                    self.buf += chunk
                else:
                    self.eof = True
        if b"\n" not in self.buf:
            return None
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")


def _json_line(line):
    try:
        data = json.loads(line) if line else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int):
    """user + system CPU seconds of every thread of process ``pid`` so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    # After "pid (comm)": state is fields[0], utime field 14 -> [11], stime 15 -> [12].
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def busy_cpu_seconds():
    """CPU seconds all CPUs spent busy so far (/proc/stat: everything but idle and
    iowait), or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(v[:8]) - v[3] - v[4]) / _CLK_TCK  # user nice system idle iowait irq softirq steal


def _stderr_tail(f, n=400) -> str:
    try:
        f.seek(0)
        lines = f.read().decode(errors="replace").strip().splitlines()
    except (OSError, ValueError):
        return "(no stderr)"
    return (lines[-1] if lines else "(no stderr)")[-n:]


def _pin(cpu):
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return None
    n = os.cpu_count() or 1
    return lambda: os.sched_setaffinity(0, {cpu % n})


def _spawn(cmd, env=None, cwd=None, cpu=None, stdin=None):
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        cmd,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=err,
        env=env,
        cwd=cwd,
        preexec_fn=_pin(cpu),
    )
    _live.append(proc)
    return proc, err


def _reap(proc, timeout):
    if proc.poll() is None:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    if proc in _live:
        _live.remove(proc)


def measure(args, client, loop, kind, size, window=None):
    """One (loop, kind, size) run at ``args.connections`` connections. A dict with the
    figures, or {'skip': why} (loop not installed), {'unsupported': why} (loop lacks the
    API) or {'error': why}. ``window``, if given, is called with the server's pid when
    the measured window opens and returns a callable run when it closes, whose result is
    stored under ``"window"`` (``bench/scale_net.py`` attaches strace there)."""
    cmd, env = child_command(args, loop, "-", 0, 0)
    python = cmd[0]
    if python is None:
        return {"skip": f"no interpreter for {loop} (see --help)"}
    if not os.path.exists(python):
        return {"skip": f"interpreter {python} not found"}
    if kind == "tls":
        if args.tls_error:
            return {"error": args.tls_error}
        if "tls" not in args.client_modes:
            return {
                "error": "the client was built without TLS: install OpenSSL's headers "
                "(Debian: libssl-dev) and re-run"
            }
    server_cmd = [python, str(HERE / "_net_server.py"), loop, kind]
    if kind == "tls":
        server_cmd += [args.tls_cert, args.tls_key]
    server, server_err = _spawn(
        server_cmd,
        env=env,
        cwd="/",  # never import the source tree's rsloop/
        cpu=0 if args.pin else None,
        stdin=subprocess.PIPE,
    )
    client_proc = client_err = close_window = None
    try:
        out = Lines(server)
        hello = _json_line(out.readline(START_TIMEOUT_S))
        if hello is None or "port" not in hello:
            _reap(server, 5)
            if server.returncode == NOT_INSTALLED and hello:
                return {"skip": hello.get("skip", "not installed")}
            if server.returncode == UNSUPPORTED and hello:
                return {"unsupported": hello.get("unsupported", "?")}
            return {
                "error": f"server did not start (exit {server.returncode}): "
                f"{_stderr_tail(server_err)}"
            }
        port = int(hello["port"])
        if not 0 < port < 65536:
            return {"error": f"server reported port {port}"}
        client_cmd = [
            client,
            "-m",
            kind if kind in ("udp", "tls") else "tcp",
            "-p",
            str(port),
            "-c",
            str(args.connections),
            "-s",
            str(size),
            "-d",
            str(args.duration),
            "-w",
            str(args.warmup),
            "-t",
            str(args.udp_timeout_ms),
            "-S",
            str(STALL_S),
        ]
        if kind == "tls":
            client_cmd += ["-C", args.tls_cert]  # verify the server's certificate
        if window is not None:
            client_cmd.append("-G")  # the window opens when we say so (after "W")
        client_proc, client_err = _spawn(
            client_cmd,
            cpu=1 if args.pin else None,
            stdin=subprocess.PIPE if window is not None else None,
        )
        cout = Lines(client_proc)
        # Opening the connections comes first (seconds for 10,000), and the warm-up lasts
        # until every connection has had a reply (the client gives up after STALL_S + 2 ms
        # per connection).
        line = cout.readline(args.warmup + STALL_S + 10 + args.connections * 0.004)
        if window is not None and line == "W":
            close_window = window(server.pid)
            try:
                client_proc.stdin.write(b"go\n")
                client_proc.stdin.close()
            except OSError:
                pass
            line = cout.readline(STALL_S + 10)
        t0 = time.monotonic()
        cpu0, ccpu0, all0 = (
            cpu_seconds(server.pid),
            cpu_seconds(client_proc.pid),
            busy_cpu_seconds(),
        )
        if line != "M":
            res = _json_line(line) or {}
            why = res.get("error_detail") or _stderr_tail(client_err)
            return _server_verdict(server, out, server_err, f"client failed in warm-up: {why}")
        line = cout.readline(args.duration + STALL_S + 10)
        t1 = time.monotonic()
        cpu1, ccpu1, all1 = (
            cpu_seconds(server.pid),
            cpu_seconds(client_proc.pid),
            busy_cpu_seconds(),
        )
        window_result = None
        if close_window is not None:
            window_result, close_window = close_window(), None
        res = _json_line(cout.readline(STALL_S + 10) if line == "E" else line)
        _reap(client_proc, 10)
        if res is None:
            return _server_verdict(
                server, out, server_err, f"client gave no result: {_stderr_tail(client_err)}"
            )
        if res.get("errors") or client_proc.returncode != 0:
            return _server_verdict(
                server,
                out,
                server_err,
                f"client: {res.get('errors')} errors, first: {res.get('error_detail')}",
            )
        if server.poll() is not None:
            return {"error": f"server exited early ({server.returncode})"}
        try:
            server.stdin.write(b"stop\n")
            server.stdin.close()
        except OSError:
            pass
        bye = _json_line(out.readline(STOP_TIMEOUT_S))
        _reap(server, STOP_TIMEOUT_S)
        if bye is None:
            return {"error": f"server gave no final report: {_stderr_tail(server_err)}"}
        if bye.get("unsupported"):
            return {"unsupported": bye["unsupported"]}
        if bye.get("errors"):
            return {"error": f"server: {bye['errors'][0]}"}
        if cpu0 is None or cpu1 is None:
            return {"error": "could not read the server's CPU time from /proc"}
        secs = res["duration"]
        server_cpu = cpu1 - cpu0
        client_cpu = (ccpu1 - ccpu0) if ccpu0 is not None and ccpu1 is not None else None
        others = None
        if all0 is not None and all1 is not None and client_cpu is not None:
            others = max(0.0, (all1 - all0) - server_cpu - client_cpu) / (t1 - t0)
        return {
            "requests": res["requests"],
            "bytes": res["bytes"],
            "seconds": secs,
            "req_per_s": res["requests"] / secs,
            "mib_per_s": res["bytes"] / secs / 2**20,
            "server_cpu_s": server_cpu,
            "server_cpu_util": server_cpu / (t1 - t0),
            "req_per_cpu_s": res["requests"] / server_cpu if server_cpu > 0 else float("inf"),
            "client_cpu_s": client_cpu,
            "client_cpu_util": client_cpu / (t1 - t0) if client_cpu is not None else None,
            "others_cpu_util": others,
            "peak_rss_kib": bye["peak_rss_kib"],
            "base_rss_kib": hello.get("base_rss_kib"),
            "per_conn_min": res.get("per_conn_min"),
            "per_conn_max": res.get("per_conn_max"),
            "lost": res.get("lost", 0),
            "late": res.get("late", 0),
            "warmup_requests": res.get("warmup_requests"),
            "warmup_s": res.get("warmup_s"),
            "tls": res.get("tls") or None,
            "window": window_result,
            "nofile": hello.get("nofile"),
            "python": bye.get("python"),
            "info": bye.get("info", {}),
        }
    finally:
        if close_window is not None:  # a failure inside the window: stop the tracer
            close_window()
        for proc in (client_proc, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                _reap(proc, 5)
        for f in (client_err, server_err):
            if f is not None:
                f.close()


def _server_verdict(server, out, server_err, client_why):
    """The client failed: ask the server why (it may have hit a missing API)."""
    if server.poll() is None:
        try:
            server.stdin.write(b"stop\n")
            server.stdin.close()
        except OSError:
            pass
    bye = _json_line(out.readline(STOP_TIMEOUT_S))
    while bye is not None and "peak_rss_kib" not in bye:
        bye = _json_line(out.readline(STOP_TIMEOUT_S))
    if bye and bye.get("unsupported"):
        return {"unsupported": bye["unsupported"]}
    if bye and bye.get("errors"):
        return {"error": f"{client_why}; server: {bye['errors'][0]}"}
    return {"error": client_why}


# summaries ---------------------------------------------------------------------------
def cases(args):
    out = []
    for kind in args.kinds:
        sizes = {"udp": args.udp_sizes, "tls": args.tls_sizes}.get(kind, args.sizes)
        for size in sizes:
            out.append((kind, size))
    return out


def _median(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _spread(vals):
    vals = sorted(vals)
    med = statistics.median(vals)
    return 100.0 * (vals[-1] - vals[0]) / med if med else 0.0


def _why_missing(samples, lp, kind, size):
    """n/a (reason) / error (reason) / skip reason for a cell without a figure."""
    runs = samples.get((lp, kind, size), [])
    # An unsupported kind is measured once, at its first size; it holds for all sizes.
    for (lp2, kind2, _), runs2 in samples.items():
        if (lp2, kind2) == (lp, kind):
            runs = runs + [r for r in runs2 if "unsupported" in r]
    for r in runs:
        if "unsupported" in r:
            return f"n/a ({r['unsupported']})"
    for r in runs:
        if "error" in r:
            return f"error ({r['error']})"
    return next((r["skip"] for r in runs if "skip" in r), "not run")


def summarize(loops, case_list, samples, key="req_per_s"):
    """{(kind, size): {'loops': {loop: summary}, 'best_peer': loop}}: medians over the
    repeats; ``rate`` is the median of ``key`` and ``vs_best_peer`` its ratio to the
    best peer's (the fastest of uvloop, rloop, pypi-rsloop; asyncio if none ran)."""
    table = {}
    for kind, size in case_list:
        row = {}
        for lp in loops:
            runs = samples.get((lp, kind, size), [])
            ok = [r for r in runs if "req_per_s" in r]
            if not ok:
                row[lp] = {"missing": _why_missing(samples, lp, kind, size)}
                continue
            row[lp] = {
                "rate": _median(ok, key),
                "median_req_per_s": _median(ok, "req_per_s"),
                "spread_req_per_s_pct": _spread([r["req_per_s"] for r in ok]),
                "median_mib_per_s": _median(ok, "mib_per_s"),
                "median_server_cpu_s": _median(ok, "server_cpu_s"),
                "median_server_cpu_util": _median(ok, "server_cpu_util"),
                "median_req_per_cpu_s": _median(ok, "req_per_cpu_s"),
                "spread_req_per_cpu_s_pct": _spread([r["req_per_cpu_s"] for r in ok]),
                "median_client_cpu_util": _median(ok, "client_cpu_util"),
                "median_others_cpu_util": _median(ok, "others_cpu_util"),
                "peak_rss_mib": _median(ok, "peak_rss_kib") / 1024,
                "n_ok": len(ok),
                "n_failed": len(runs) - len(ok),
                "failures": [r.get("error") or r.get("unsupported") for r in runs if r not in ok],
                "lost": sum(r.get("lost") or 0 for r in ok),
                "per_conn_min_max": [
                    min(r.get("per_conn_min") or 0 for r in ok),
                    max(r.get("per_conn_max") or 0 for r in ok),
                ],
            }
        peers = {
            lp: s["rate"]
            for lp, s in row.items()
            if lp not in OURS and lp != BASELINE and "rate" in s
        }
        if not peers and "rate" in row.get(BASELINE, {}):
            peers = {BASELINE: row[BASELINE]["rate"]}
        best = max(peers, key=peers.get) if peers else None
        for s in row.values():
            if "rate" in s and best:
                s["vs_best_peer"] = s["rate"] / peers[best]
        table[(kind, size)] = {"loops": row, "best_peer": best}
    return table


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _cell_missing(text: str) -> str:
    """'n/a (NotImplementedError: rsloop: X is not implemented yet; see ...)' ->
    'n/a (X is not implemented yet)': short enough for a table cell."""
    head, _, why = text.partition(" (")
    if not why:
        return _short(text, 40)
    # Drop the leading "ExcType: " and "module: " tags and anything after a ";".
    why = why[:-1] if why.endswith(")") else why
    if head == "n/a":
        why = re.sub(r"^(\w+: )+", "", why).split(";")[0]
    return f"{head} ({_short(why, 48)})"


def rate_table(loops, table, title) -> list:
    out = [title, ""]
    out.append("| kind | size | " + " | ".join(loops) + " | best peer |")
    out.append("|---|---|" + "---:|" * len(loops) + "---|")
    for (kind, size), t in table.items():
        cells = []
        for lp in loops:
            s = t["loops"][lp]
            if "rate" not in s:
                cells.append(_cell_missing(s["missing"]))
            else:
                fail = f", {s['n_failed']} failed" if s["n_failed"] else ""
                ratio = s.get("vs_best_peer")
                # No peer in the run (e.g. only rsloop builds compared): no ratio to show.
                shown = f"{ratio:.2f}×" if ratio is not None else "–"
                cells.append(f"{fmt_rate(s['rate'])} ({shown}{fail})")
        cells.append(t["best_peer"] or "–")
        out.append(f"| {kind} | {fmt_size(size)} | " + " | ".join(cells) + " |")
    return out


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def markdown(loops, table, cpu_table, meta) -> str:
    r = meta["repeat"]
    out = rate_table(
        loops,
        table,
        f"Echo round trips per second (wall clock), median of {r} server processes per "
        f"cell, {meta['connections']} connections, {meta['duration']:g} s windows; in "
        "brackets the ratio to the best peer of that row (uvloop, rloop, pypi-rsloop); "
        "higher is better.",
    )
    out.append("")
    out += rate_table(
        loops,
        cpu_table,
        "Round trips per CPU second of the server process (user + sys, all threads), "
        "same runs; in brackets the ratio to the best peer by this measure. Robust "
        "against other processes competing for the CPUs.",
    )
    out.append("")
    out.append(
        "Per loop (medians): round trips/s and their spread (max-min)/median; echoed "
        "payload MiB/s (one direction: each byte counted once, though it crosses "
        "loopback twice); server CPU seconds in the window and utilisation (100% = "
        "one core); round trips per server CPU second and their spread; peak RSS of "
        "the server (VmHWM, MiB); CPU used by the client; CPU used by every other "
        "process on the machine in the window (noise: above ~20% the wall-clock "
        "figures are unreliable)."
    )
    out.append("")
    out.append(
        "| kind | size | loop | req/s | spread | MiB/s | server CPU s | server CPU "
        "| req/CPU-s | spread | peak RSS | client CPU | others CPU |"
    )
    out.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (kind, size), t in table.items():
        for lp in loops:
            s = t["loops"][lp]
            head = f"| {kind} | {fmt_size(size)} | {lp} |"
            if "rate" not in s:
                out.append(f"{head} {_short(s['missing'], 160)} |" + " |" * 9)
                continue
            fail = f" ({s['n_failed']} failed)" if s["n_failed"] else ""
            lost = f", {s['lost']} lost" if s["lost"] else ""
            out.append(
                f"{head} {fmt_rate(s['median_req_per_s'])}{fail}{lost} | "
                f"{s['spread_req_per_s_pct']:.0f}% | {s['median_mib_per_s']:.1f} | "
                f"{s['median_server_cpu_s']:.2f} | {_pct(s['median_server_cpu_util'])} | "
                f"{fmt_rate(s['median_req_per_cpu_s'])} | "
                f"{s['spread_req_per_cpu_s_pct']:.0f}% | {s['peak_rss_mib']:.1f} | "
                f"{_pct(s['median_client_cpu_util'])} | "
                f"{_pct(s['median_others_cpu_util'])} |"
            )
    return "\n".join(out)


def main(argv=None) -> int:
    if not sys.platform.startswith("linux"):
        raise SystemExit("bench/net.py needs Linux (epoll client, /proc)")
    args = parse_args(argv)
    atexit.register(_kill_all)
    signal.signal(signal.SIGTERM, _on_sigterm)
    client, args.client_modes = ensure_client(args)
    args.tls_cert = args.tls_key = args.tls_error = None
    if "tls" in args.kinds:
        args.tls_cert, args.tls_key, args.tls_error = make_tls_cert()
        if args.tls_error:
            print(f"# tls kind: {args.tls_error}", file=sys.stderr)
    case_list = cases(args)
    samples: dict = {}
    skipped: dict = {}  # loop -> why (not installed)
    dropped: set = set()  # (loop, kind) unsupported, or (loop, kind, size) failed
    infos: dict = {}
    t_start = time.time()
    load_start = _loadavg()
    log = sys.stderr
    print(
        f"# {len(args.loops)} loops x {len(case_list)} (kind, size) x {args.repeat} repeats, "
        f"one server process each, {args.warmup:g} s warm-up + {args.duration:g} s measured"
        f"{' (quick)' if args.quick else ''}; client {client}",
        file=log,
    )
    try:
        for rep in range(args.repeat):
            for kind, size in case_list:
                for lp in args.loops:  # interleaved: A B C A B C
                    if lp in skipped or (lp, kind) in dropped or (lp, kind, size) in dropped:
                        continue
                    r = measure(args, client, lp, kind, size)
                    samples.setdefault((lp, kind, size), []).append(r)
                    tag = f"  rep {rep + 1}/{args.repeat} {kind:8s} {fmt_size(size):>7s} {lp:12s}"
                    if "skip" in r:
                        skipped[lp] = r["skip"]
                        print(f"# skipping {lp}: {r['skip']}", file=log)
                    elif "unsupported" in r:
                        dropped.add((lp, kind))
                        print(f"{tag} n/a: {r['unsupported']}", file=log)
                    elif "error" in r:
                        dropped.add((lp, kind, size))
                        print(f"{tag} ERROR: {r['error']}", file=log)
                    else:
                        infos.setdefault(lp, r["info"] | {"python": r.get("python")})
                        print(
                            f"{tag} {fmt_rate(r['req_per_s']):>7s} req/s "
                            f"{r['mib_per_s']:8.1f} MiB/s  server CPU "
                            f"{100 * r['server_cpu_util']:3.0f}%  "
                            f"{fmt_rate(r['req_per_cpu_s']):>7s} req/CPU-s  "
                            f"peak {r['peak_rss_kib'] / 1024:.1f} MiB  others "
                            f"{_pct(r['others_cpu_util'])}",
                            file=log,
                        )
    finally:
        _kill_all()
    shown = [lp for lp in args.loops if lp not in skipped]
    table = summarize(shown, case_list, samples, "req_per_s")
    cpu_table = summarize(shown, case_list, samples, "req_per_cpu_s")
    try:
        commit = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    others = [
        r["others_cpu_util"]
        for runs in samples.values()
        for r in runs
        if r.get("others_cpu_util") is not None
    ]
    meta = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "repeat": args.repeat,
        "duration": args.duration,
        "warmup": args.warmup,
        "connections": args.connections,
        "sizes": args.sizes,
        "udp_sizes": args.udp_sizes,
        "tls_sizes": args.tls_sizes,
        "tls": next((r["tls"] for runs in samples.values() for r in runs if r.get("tls")), None),
        "udp_timeout_ms": args.udp_timeout_ms,
        "kinds": args.kinds,
        "pin": args.pin,
        "quick": args.quick,
        "python": args.python,
        "client": client,
        "platform": platform.platform(),
        "machine": describe(),
        "cpu_count": os.cpu_count(),
        "git_commit": commit,
        "loops": args.loops,
        "loop_info": infos,
        "skipped": skipped,
        "wall_seconds": round(time.time() - t_start, 1),
        "loadavg_start": load_start,
        "loadavg_end": _loadavg(),
        "others_cpu_util_median": statistics.median(others) if others else None,
        "command": " ".join([Path(sys.executable).name] + sys.argv),
    }
    stamp = meta["date_utc"].replace(":", "") + ("-quick" if args.quick else "")
    out_path = Path(args.out) if args.out else HERE / "results" / f"net-{stamp}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)

    def keyed(t):
        return {f"{k}/{s}": v for (k, s), v in t.items()}

    out_path.write_text(
        json.dumps(
            {
                "meta": meta,
                "table_req_per_s": keyed(table),
                "table_req_per_cpu_s": keyed(cpu_table),
                "raw": {f"{lp}/{k}/{s}": v for (lp, k, s), v in samples.items()},
            },
            indent=1,
        )
    )
    print(markdown(shown, table, cpu_table, meta))
    notes = []
    for lp, info in infos.items():
        bits = [
            f"{k}={v}"
            for k, v in info.items()
            if k in ("version", "backend", "backend_reason", "python") and v
        ]
        notes.append(f"- {lp}: " + ", ".join(bits))
    for lp, why in skipped.items():
        notes.append(f"- {lp}: skipped ({why})")
    print()
    print("Loops:\n" + "\n".join(notes))
    if meta["tls"]:
        print(
            f"\nTLS: {meta['tls']} (what the client negotiated with the servers' "
            "ssl.create_default_context(Purpose.CLIENT_AUTH); a self-signed EC P-256 "
            "certificate the client verifies)."
        )
    others_med = meta["others_cpu_util_median"]
    busy = (
        f" Other processes used {_pct(others_med)} of a CPU (median over the runs): "
        "trust the per-CPU-second table more than the wall-clock one."
        if others_med is not None and others_med > 0.2
        else ""
    )
    print(
        f"\n{describe()}, "
        f"repo HEAD {commit or '?'}, {meta['wall_seconds']} s wall, load average "
        f"{meta['loadavg_start']} at start, {meta['loadavg_end']} at end.{busy} "
        f"JSON: {out_path}"
    )
    failed = any("error" in r for runs in samples.values() for r in runs if isinstance(r, dict))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
