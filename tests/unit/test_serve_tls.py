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
import pytest

import localcluster as lc
from extender.cli.serve import is_loopback
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
    # /debug is off by default.
    off = httpx.get(f"http://127.0.0.1:{port}/debug/quotas")
    assert off.status_code == 404
    assert "--enable-debug-endpoints" in off.json()["error"]


def test_debug_endpoints_on_a_loopback_host(stop: list[subprocess.Popen[bytes]]) -> None:
    """Without client certificates, /debug is served on a loopback host only; the probe
    port serves only the probes even then."""
    probe_port = lc.free_port()
    process, port = serve(
        "--enable-debug-endpoints", "--host", "127.0.0.1", "--probe-port", str(probe_port)
    )
    stop.append(process)
    wait_listening(process, port)
    quotas = httpx.get(f"http://127.0.0.1:{port}/debug/quotas")
    assert quotas.status_code == 200 and "team-a" in quotas.json()
    refused = httpx.get(f"http://127.0.0.1:{probe_port}/debug/quotas")
    assert refused.status_code == 404
    assert "not served on the probe port" in refused.json()["error"]


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
    # /debug stays off without --enable-debug-endpoints, even to an authenticated caller.
    debug = httpx.get(f"https://127.0.0.1:{port}/debug/quotas", verify=with_cert)
    assert debug.status_code == 404

    without_cert = ssl.create_default_context(cafile=str(ca.path))
    with pytest.raises(httpx.TransportError):
        httpx.post(url, json=FILTER_BODY, verify=without_cert)
    with pytest.raises(httpx.TransportError):
        httpx.post(f"http://127.0.0.1:{port}/filter", json=FILTER_BODY)
    # the server is still up after refusing those
    assert httpx.post(url, json=FILTER_BODY, verify=with_cert).status_code == 200


def test_debug_endpoints_off_loopback_with_mutual_tls(
    tmp_path: Path, stop: list[subprocess.Popen[bytes]]
) -> None:
    """On every interface, /debug is served with --client-ca: to callers with a client
    certificate, and to no one else."""
    ca = CertificateAuthority(tmp_path)
    server_cert, server_key = ca.issue("server", server=True)
    client_cert, client_key = ca.issue("client", server=False)
    process, port = serve(
        *("--host", "0.0.0.0", "--enable-debug-endpoints"),
        *("--tls-cert", str(server_cert), "--tls-key", str(server_key)),
        *("--client-ca", str(ca.path)),
    )
    stop.append(process)
    wait_listening(process, port)
    url = f"https://127.0.0.1:{port}/debug/quotas"
    with_cert = ssl.create_default_context(cafile=str(ca.path))
    with_cert.load_cert_chain(str(client_cert), str(client_key))
    quotas = httpx.get(url, verify=with_cert)
    assert quotas.status_code == 200 and "team-a" in quotas.json()
    with pytest.raises(httpx.TransportError):
        httpx.get(url, verify=ssl.create_default_context(cafile=str(ca.path)))


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


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "muster.example"])
def test_debug_endpoints_need_mutual_tls_off_loopback(host: str) -> None:
    """/debug tells whoever asks about every quota and pod: off a loopback host it needs
    client certificates, and serve refuses before listening (or reading the snapshot)."""
    completed = subprocess.run(
        [*MUSTER, "serve", "--snapshot", "nope.yaml", "--enable-debug-endpoints", "--host", host],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 2, completed.stderr
    assert f"--enable-debug-endpoints on --host {host} needs --client-ca" in completed.stderr


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.com", "", "localhost.evil.com"):
        assert not is_loopback(host), host


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
