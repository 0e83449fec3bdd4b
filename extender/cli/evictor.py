"""``muster evictor``: run the reference soft-eviction operator until interrupted."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from prometheus_client import start_http_server

from extender.kube.client import KubeClient
from extender.kube.evictor import Evictor


def run_evictor(*, kubeconfig: str | None, in_cluster: bool, metrics_port: int | None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        client = KubeClient.in_cluster() if in_cluster else KubeClient.from_kubeconfig(kubeconfig)
    except Exception as error:  # the kubernetes package raises several kinds
        print(f"muster evictor: cannot configure API access: {error}", file=sys.stderr)
        return 2
    evictor = Evictor(client).start()
    if metrics_port is not None:
        start_http_server(metrics_port, registry=evictor.registry)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    evictor.stop()
    return 0
