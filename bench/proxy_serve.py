"""Run the test harness's counting S3 proxy (tests/integration/s3proxy.py) in its own process.

Own process, so that the proxy's Python threads never compete for the benchmark driver's
GIL and its CPU time can be read from /proc like any other process.

    python3 bench/proxy_serve.py UPSTREAM_URL READY_FILE

Writes the proxy endpoint to READY_FILE once listening; serves until SIGTERM/SIGINT.
Counters: GET {endpoint}/__proxy__/stats, /__proxy__/reset.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from s3proxy import CountingProxy  # noqa: E402


def main() -> int:
    upstream, ready = sys.argv[1], sys.argv[2]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    proxy = CountingProxy(upstream).start()
    tmp = ready + ".tmp"
    with open(tmp, "w") as f:
        f.write(proxy.endpoint)
    os.replace(tmp, ready)
    try:
        while not stop.wait(0.5):
            if os.getppid() == 1:  # the driver died: do not linger
                break
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
