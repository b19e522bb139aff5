#!/usr/bin/env bash
# The HTTP connection limit with a real gptd (issue 36, case 10), with
# http_max_connections 2 and http_timeout_s 2 on 127.0.0.1:
#  - idle connections filling the limit do not keep anyone out: a new
#    connection is answered 200 at once and the oldest idle one is closed;
#  - connections filling the limit that all have a request in progress
#    (a large CSV reply to clients that never read it) make a new request
#    get 503 naming http_max_connections within 1 s, not a wait in the
#    backlog;
#  - once those stalled replies pass http_timeout_s without progress gptd
#    drops them and answers again, while their clients still hold them.
#   http_busy.sh GPTD GPTCTL ITEST SRC
source "$(dirname "$0")/daemon_common.sh"
command -v curl >/dev/null || fail "curl is not installed (packaging/install-deps.sh)"

start_gptd --http 127.0.0.1:0 --http-max-connections 2 --http-timeout-s 2
wait_for 10 grep -q 'http: serving /metrics' "$T/gptd.0.log"
PORT=$(grep -o 'http: serving /metrics on 127.0.0.1:[0-9]*' "$T/gptd.0.log" | tail -n1 | cut -d: -f3)
[[ -n $PORT ]] || fail "no http port in the log"

# A job with 3000 metric rows: its CSV (about 600 KB) is far larger than
# what the kernel buffers for a client that does not read.
tiny_job "$T/job.json" 3000 1 3000
"$GPTCTL" submit "$T/job.json" trainer.micro_batch=2 trainer.global_batch=2 >/dev/null
wait_for 120 job_is 1 completed
size=$(curl -s --max-time 10 "http://127.0.0.1:$PORT/api/jobs/1/metrics?format=csv" | wc -c)
((size > 400000)) || fail "the metrics CSV is only $size bytes"

python3 - "$PORT" <<'PY' || fail "the connection limit did not hold"
import socket, sys, time
port = int(sys.argv[1])

def request(path, limit_s):
    """One request on a new connection: (status line, body, seconds)."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=limit_s)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    data = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except socket.timeout:
        pass
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(errors="replace"), body, time.monotonic() - t0

def closed_by_peer(s, limit_s):
    s.settimeout(limit_s)
    try:
        return s.recv(1) == b""
    except OSError as e:
        return not isinstance(e, socket.timeout)

# Idle connections: the newcomer is answered, the oldest idle one goes.
idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
status, _, took = request("/metrics", 1)
if " 200 " not in status + " " or took > 1:
    sys.exit(f"with 2 idle connections /metrics answered {status!r} after {took:.2f} s")
if not closed_by_peer(idle[0], 1):
    sys.exit("the oldest idle connection was not closed to make room")
for s in idle:
    s.close()
print(f"idle connections: /metrics answered in {took:.3f} s, the oldest idle one closed")

# Busy connections: each asks for the CSV and reads none of it; a tiny
# receive buffer and segment size keep gptd's send buffer small too.
busy = []
for _ in range(2):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 88)
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /api/jobs/1/metrics?format=csv HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    # The reply started (peeked, not read): its request is in progress.
    if not s.recv(12, socket.MSG_PEEK).startswith(b"HTTP/1.1 200"):
        sys.exit("the CSV request was not answered 200")
    busy.append(s)
stalled = time.monotonic()
status, body, took = request("/metrics", 5)
if " 503 " not in status + " " or took > 1:
    sys.exit(f"with every connection busy /metrics answered {status!r} after {took:.2f} s")
if b"http_max_connections" not in body:
    sys.exit(f"the 503 does not name http_max_connections: {body!r}")
print(f"busy connections: 503 in {took:.3f} s")

# Service comes back once the stalled replies pass http_timeout_s (2 s),
# their clients still holding them unread.
deadline = stalled + 2 + 5
while True:
    status, _, took = request("/metrics", 2)
    if " 200 " in status + " ":
        break
    if time.monotonic() > deadline:
        sys.exit(f"/metrics still answers {status!r} {time.monotonic() - stalled:.1f} s after "
                 "the replies stalled")
    time.sleep(0.1)
print(f"service back {time.monotonic() - stalled:.1f} s after the replies stalled")
for s in busy:
    s.close()
PY
kill -0 "$GPTD_PID" || fail "gptd died"
echo "http_busy: ok"
