"""``muster serve`` as a real process: plain HTTP, TLS, mutual TLS, and the probe port."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import localcluster as lc
import pytest

from tests.certs import CertificateAuthority

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "scenarios" / "gang-fits-after-eviction.yaml"
MUSTER = [sys.executable, "-m", "extender.cli.main"]
FILTER_BODY = {
    "Pod": {"metadata": {"name": "p", "namespace": "team-b"}, "spec": {"containers": []}},
    "NodeNames": ["n1"],
}


def serve(*extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = lc.free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "extender.cli.main",
            "serve",
            "--snapshot",
            str(SCENARIO),
            "--port",
            str(port),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return process, port


def wait_listening(process: subprocess.Popen[bytes], port: int, deadline: float = 20) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process.poll() is not None:
            raise AssertionError(f"muster serve exited: {process.stdout.read().decode()}")  # type: ignore[union-attr]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("muster serve did not listen in time")


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


def test_plain_http(stop: list[subprocess.Popen[bytes]]) -> None:
    process, port = serve()
    stop.append(process)
    wait_listening(process, port)
    response = httpx.post(f"http://127.0.0.1:{port}/filter", json=FILTER_BODY)
    assert response.status_code == 200
    assert response.json()["NodeNames"] == ["n1"]


def test_tls_and_mutual_tls(tmp_path: Path, stop: list[subprocess.Popen[bytes]]) -> None:
    ca = CertificateAuthority(tmp_path)
    server_cert, server_key = ca.issue("server", server=True)
    client_cert, client_key = ca.issue("client", server=False)
    process, port = serve(
        "--tls-cert", str(server_cert), "--tls-key", str(server_key), "--client-ca", str(ca.path)
    )
    stop.append(process)
    wait_listening(process, port)
    url = f"https://127.0.0.1:{port}/filter"

    with_cert = ssl.create_default_context(cafile=str(ca.path))
    with_cert.load_cert_chain(str(client_cert), str(client_key))
    response = httpx.post(url, json=FILTER_BODY, verify=with_cert)
    assert response.status_code == 200

    without_cert = ssl.create_default_context(cafile=str(ca.path))
    with pytest.raises(httpx.TransportError):
        httpx.post(url, json=FILTER_BODY, verify=without_cert)
    with pytest.raises(httpx.TransportError):
        httpx.post(f"http://127.0.0.1:{port}/filter", json=FILTER_BODY)
    # the server is still up after refusing those
    assert httpx.post(url, json=FILTER_BODY, verify=with_cert).status_code == 200


def test_probe_port_serves_health_and_metrics_beside_mutual_tls(
    tmp_path: Path, stop: list[subprocess.Popen[bytes]]
) -> None:
    """With mTLS, kubelet and Prometheus (no client certificate) read /readyz, /healthz and
    /metrics on the plain probe port; nothing else is served there."""
    ca = CertificateAuthority(tmp_path)
    server_cert, server_key = ca.issue("server", server=True)
    probe_port = lc.free_port()
    process, port = serve(
        "--tls-cert",
        str(server_cert),
        "--tls-key",
        str(server_key),
        "--client-ca",
        str(ca.path),
        "--probe-port",
        str(probe_port),
    )
    stop.append(process)
    wait_listening(process, port)
    probes = f"http://127.0.0.1:{probe_port}"
    # A snapshot is synced from the start: ready and healthy.
    assert httpx.get(f"{probes}/readyz").json() == {"status": "ready"}
    assert httpx.get(f"{probes}/healthz").json() == {"status": "ok"}
    assert "muster_extender_requests_total" in httpx.get(f"{probes}/metrics").text
    for path in ("/debug/quotas", "/filter"):
        refused = httpx.request("POST" if path == "/filter" else "GET", probes + path)
        assert refused.status_code == 404, path
        assert "not served on the probe port" in refused.json()["error"]
    # The extender port still wants a client certificate.
    without_cert = ssl.create_default_context(cafile=str(ca.path))
    with pytest.raises(httpx.TransportError):
        httpx.get(f"https://127.0.0.1:{port}/readyz", verify=without_cert)


def test_a_renewed_certificate_is_served_without_a_restart(
    tmp_path: Path, stop: list[subprocess.Popen[bytes]]
) -> None:
    """The certificate files are replaced in place (as a rotated Secret's are) by ones
    from another CA: new connections get the new certificate, with no restart."""
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old_ca = CertificateAuthority(tmp_path / "old")
    new_ca = CertificateAuthority(tmp_path / "new")
    cert, key = old_ca.issue("server", server=True)
    process, port = serve(
        "--tls-cert", str(cert), "--tls-key", str(key), "--tls-reload-seconds", "0.2"
    )
    stop.append(process)
    wait_listening(process, port)
    url = f"https://127.0.0.1:{port}/readyz"
    trusts_new = ssl.create_default_context(cafile=str(new_ca.path))
    assert httpx.get(url, verify=ssl.create_default_context(cafile=str(old_ca.path))).is_success
    with pytest.raises(httpx.TransportError):
        httpx.get(url, verify=trusts_new)
    renewed_cert, renewed_key = new_ca.issue("server", server=True)
    key.write_bytes(renewed_key.read_bytes())
    cert.write_bytes(renewed_cert.read_bytes())
    deadline = time.monotonic() + 20
    while True:
        try:
            assert httpx.get(url, verify=trusts_new).is_success
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_serve_refuses_bad_flags() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "extender.cli.main", "serve", "--tls-cert", "x.pem"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2
    assert "--tls-cert and --tls-key go together" in completed.stderr
    completed = subprocess.run(
        [sys.executable, "-m", "extender.cli.main", "serve"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2 and "--snapshot" in completed.stderr
    completed = subprocess.run(
        [sys.executable, "-m", "extender.cli.main", "serve", "--probe-port", "8888"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2 and "--probe-port must differ" in completed.stderr


def test_serve_exits_when_the_probe_port_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        completed = subprocess.run(
            [
                *(*MUSTER, "serve", "--snapshot", str(SCENARIO)),
                *("--port", str(lc.free_port()), "--probe-port", str(busy)),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    assert completed.returncode == 2, completed.stderr
    assert f"--probe-port {busy}: cannot listen" in completed.stderr
