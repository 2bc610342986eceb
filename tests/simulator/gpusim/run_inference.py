"""A client driver like the ones people run in tmux next to a server: it keeps sending work.

It posts a generation request to the server every interval and never gives
up: when the server is gone it retries, so it re-feeds a restarted server.
"""

import argparse
import json
import os
import signal
import socket
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--interval", type=float, default=0.2)
    args = parser.parse_args()
    knobs = json.loads(os.environ.get("GPUSIM_KNOBS", "{}"))
    if knobs.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sent = 0
    while True:
        try:
            with socket.create_connection(("127.0.0.1", args.port), timeout=2) as conn:
                conn.sendall(b"POST /generate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}")
                conn.recv(4096)
                sent += 1
        except OSError:
            pass
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
