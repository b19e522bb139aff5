#!/usr/bin/env bash
# The loopback HTTP listener against a web page and a slowloris (issue 36,
# cases 8 and 10), with a real gptd on 127.0.0.1:
#  - DNS rebinding: a request whose Host: is not localhost, a loopback
#    address or a name in http_allowed_hosts gets 421 naming the option, on
#    every path; those names (any case, with a port) are answered;
#  - 100 idle connections and 20 that send their headers a byte at a time
#    (all loopback, opened by this test and closed by it) leave /metrics,
#    the dashboard and /api/jobs answering within 2 s each, again and
#    again, with http_max_connections at its default of 16;
#  - every one of those connections is closed by gptd within
#    http_timeout_s (2 here) plus the sweep's second, the slow ones too.
#   http_hostile.sh GPTD GPTCTL ITEST SRC
source "$(dirname "$0")/daemon_common.sh"
command -v curl >/dev/null || fail "curl is not installed (packaging/install-deps.sh)"

start_gptd --http 127.0.0.1:0 --http-allowed-hosts "gptd.example, other.example" \
    --http-timeout-s 2
wait_for 10 grep -q 'http: serving /metrics' "$T/gptd.0.log"
PORT=$(grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$T/gptd.0.log" | tail -n1 | cut -d: -f3)
[[ -n $PORT ]] || fail "no http port in the log"
URL=http://127.0.0.1:$PORT
wait_for 10 curl -sf -o /dev/null "$URL/api/jobs"

# --- Host:
code() { curl -s -o "$T/body" -w '%{http_code}' --max-time 5 -H "Host: $1" "$URL$2"; }
for h in evil.example "evil.example:$PORT" 127.0.0.1.evil.example localhost.evil.example \
    "localhost:x" "[::2]:$PORT" "gptd.example.evil" 10.0.0.1; do
    for p in /api/jobs /api/nodes /metrics / /app.js /api/jobs/1/events; do
        c=$(code "$h" "$p")
        [[ $c == 421 ]] || fail "Host: $h $p answered $c, not 421"
    done
    grep -q "http_allowed_hosts" "$T/body" || fail "the 421 does not name http_allowed_hosts: $(cat "$T/body")"
done
for h in localhost "localhost:$PORT" LOCALHOST localhost. 127.0.0.1 "127.0.0.1:$PORT" 127.5.6.7 \
    "[::1]" "[::1]:$PORT" gptd.example "GPTD.Example:80" other.example; do
    c=$(code "$h" /api/jobs)
    [[ $c == 200 ]] || fail "Host: $h answered $c, not 200: $(cat "$T/body")"
done
echo "Host: checks ok"

# --- 100 idle and 20 slow connections.
python3 - "$PORT" "$URL" <<'PY' || fail "the listener did not stay responsive"
import socket, subprocess, sys, time
port, url = int(sys.argv[1]), sys.argv[2]
idle, slow = [], []
for i in range(100):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    idle.append(s)
for i in range(20):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    slow.append(s)
start = time.monotonic()
drip = b"X-Slow: " + b"a" * 200
k = 0
# About 3 s of requests while the slow ones drip a byte each 0.2 s.
while time.monotonic() - start < 3:
    for s in slow:
        try:
            s.send(drip[k % len(drip):k % len(drip) + 1])
        except OSError:
            pass
    k += 1
    for path in ("/metrics", "/", "/api/jobs"):
        t0 = time.monotonic()
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                            "--max-time", "2", url + path], capture_output=True, text=True)
        took = time.monotonic() - t0
        if r.stdout != "200":
            sys.exit(f"{path} answered {r.stdout!r} after {took:.2f} s under 120 idle/slow connections")
    time.sleep(0.2)
print(f"{3 * k} requests answered under 100 idle and 20 slow connections")
# Every one of them closed by gptd: idle ones at once (displaced) or at the
# timeout, slow ones at the timeout although they keep sending.
socks = idle + slow
deadline = time.monotonic() + 10
closed = set()
while len(closed) < len(socks) and time.monotonic() < deadline:
    for i, s in enumerate(socks):
        if i in closed:
            continue
        if i >= 100:
            try:
                s.send(b"a")
            except OSError:
                closed.add(i)
                continue
        s.setblocking(False)
        try:
            if s.recv(4096) == b"":
                closed.add(i)
        except BlockingIOError:
            pass
        except OSError:
            closed.add(i)
    time.sleep(0.1)
left = len(socks) - len(closed)
if left:
    sys.exit(f"{left} of {len(socks)} idle or slow connections still open after 10 s")
print(f"all {len(socks)} idle and slow connections closed by gptd in {time.monotonic() - start:.1f} s")
for s in socks:
    s.close()
PY
c=$(code 127.0.0.1 /metrics)
[[ $c == 200 ]] || fail "/metrics after the flood: $c"
kill -0 "$GPTD_PID" || fail "gptd died"
echo "http_hostile: ok"
