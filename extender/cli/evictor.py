"""``muster evictor``: run the reference soft-eviction operator until interrupted."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

from prometheus_client import start_http_server

from extender.kube.client import KubeClient
from extender.kube.evictor import Evictor
from extender.kube.recordkeys import KeyDirectory, RecordKeyError


def run_evictor(
    *, kubeconfig: str | None, in_cluster: bool, metrics_port: int | None, records_key_dir: str
) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        record_keys = KeyDirectory(Path(records_key_dir))
    except RecordKeyError as error:
        print(f"muster evictor: --records-key-dir: {error}", file=sys.stderr)
        return 2
    try:
        client = KubeClient.in_cluster() if in_cluster else KubeClient.from_kubeconfig(kubeconfig)
    except Exception as error:  # the kubernetes package raises several kinds
        print(f"muster evictor: cannot configure API access: {error}", file=sys.stderr)
        return 2
    evictor = Evictor(client, record_keys=record_keys).start()
    if metrics_port is not None:
        start_http_server(metrics_port, registry=evictor.registry)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    evictor.stop()
    return 0
