"""One client flooding a web page with requests at a fixed rate, over one keep-alive connection (pipelined), for
tests/test_run_page.py.

    python tests/web_flood.py HOST PORT PATH RATE SECONDS

Prints one JSON line: requests sent and responses read, by status code.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
from collections import Counter


def main(host: str, port: int, path: str, rate: float, seconds: float) -> None:
    sock = socket.create_connection((host, port))
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    codes: Counter[str] = Counter()
    done = threading.Event()

    def read() -> None:
        tail = b""
        sock.settimeout(0.5)
        while not done.is_set() or sum(codes.values()) < sent:
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                if done.is_set():
                    return
                continue
            except OSError:
                return
            if not data:
                return
            chunk = tail + data
            end = 0
            for match in re.finditer(rb"HTTP/1\.1 (\d{3}) ", chunk):
                codes[match.group(1).decode()] += 1
                end = match.end()
            tail = chunk[max(end, len(chunk) - 12) :]  # a status line cut in two is counted with the next read

    sent = 0
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    start = time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * rate) - sent
        if due > 0:
            sock.sendall(request * due)
            sent += due
        time.sleep(0.002)
    done.set()
    reader.join(5)
    print(json.dumps({"sent": sent, "seconds": round(time.monotonic() - start, 2), "codes": dict(codes)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
