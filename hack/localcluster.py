"""A real, local Kubernetes control plane for Muster's e2e tests and demo.

``ControlPlane`` runs the upstream binaries built by ``hack/build-k8s.sh`` (etcd,
kube-apiserver, kube-scheduler) on 127.0.0.1, on free ports, in a temporary directory:

* etcd with loopback client/peer URLs and its data in the temporary directory;
* kube-apiserver with RBAC (``--authorization-mode=Node,RBAC``), a serving certificate
  signed by a throw-away CA, service-account signing keys, and static bearer tokens:
  an admin (group ``system:masters``) and ``system:kube-scheduler`` for the scheduler.
  The admin kubeconfig is written to ``<workdir>/admin.kubeconfig``;
* kube-scheduler with a ``KubeSchedulerConfiguration`` (v1), leader election off and,
  optionally, an ``extenders`` entry (see ``ExtenderConfig``). It can be restarted with
  another extender configuration, and kube-apiserver can be restarted on the same port.

There is no kubelet and no kube-controller-manager. Nodes are plain Node objects whose
status the harness writes (``create_node``), and ``KubeletEmulator`` plays the kubelet's
part: pods bound to an existing node become Running, and a pod being deleted gracefully
is removed (a delete with grace period 0) once its grace period has elapsed. Without a
controller manager nothing garbage-collects, namespaces never finish terminating (use a
fresh namespace per test), and nothing removes the ``not-ready`` taint, so kube-apiserver
runs with the ``TaintNodesByCondition`` admission plugin off. The ``ServiceAccount``
admission plugin is off too (no controller creates the ``default`` service accounts), so
pods can be created in a namespace as soon as it exists.

Each component logs to ``<workdir>/logs/<component>.log``; ``log_tail()`` returns the end
of every log for failure reports. ``stop()`` sends SIGTERM, then SIGKILL after a
deadline; it is also registered with ``atexit``, and the children get a parent-death
signal, so no process outlives the Python process that started it.

Typical use::

    with ControlPlane(extender=ExtenderConfig("http://127.0.0.1:8888", bind=True)) as cp:
        cp.create_namespace("team-a")
        cp.create_node("node-1", {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4})
        core = cp.core_v1()
        ...
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime as dt
import ipaddress
import json
import os
import queue
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import quote, urlencode

import urllib3
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from kubernetes import client as k8s

__all__ = [
    "ApiError",
    "BuildError",
    "ComponentError",
    "ControlPlane",
    "ExtenderConfig",
    "KubeletEmulator",
    "ManagedResource",
    "RestClient",
    "default_bin_dir",
    "ensure_binaries",
    "free_ports",
    "wait_until",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-k8s.sh"
DEFAULT_CRDS_DIR = REPO_ROOT / "manifests" / "crds"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
ADMIN_USER = "muster-admin"
SCHEDULER_USER = "system:kube-scheduler"

T = TypeVar("T")
Json = dict[str, Any]


# --------------------------------------------------------------------------- errors


class BuildError(RuntimeError):
    """The control-plane binaries could not be built or found."""


class ComponentError(RuntimeError):
    """A component failed to start, exited, or did not become ready in time."""


class ApiError(RuntimeError):
    """A Kubernetes API request answered with an unexpected HTTP status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.method = method
        self.path = path
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        """The ``reason`` of the Status object in the body ("NotFound", ...), if any."""
        try:
            return str(json.loads(self.body).get("reason", ""))
        except (ValueError, AttributeError):
            return ""


# --------------------------------------------------------------------------- helpers


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.1,
    what: str = "condition",
    on_timeout: Callable[[], str] | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    Exceptions raised by ``condition`` count as "not yet" (the last one is reported).
    Raises ``TimeoutError`` after ``timeout`` seconds; its message names ``what`` and
    includes ``on_timeout()`` when given (e.g. the last observed state, or log tails).
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
        except Exception as exc:
            last_error = exc
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    message = f"timed out after {timeout:.1f}s waiting for {what}"
    if last_error is not None:
        message += f" (last error: {last_error!r})"
    if on_timeout is not None:
        message += "\n" + on_timeout()
    raise TimeoutError(message)


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports that are free on 127.0.0.1 right now."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def default_bin_dir() -> Path:
    """Where ``hack/build-k8s.sh`` puts the binaries for the pinned versions.

    ``$MUSTER_K8S_BIN_DIR`` overrides it (binaries built some other way).
    """
    override = os.environ.get("MUSTER_K8S_BIN_DIR")
    if override:
        return Path(override)
    result = subprocess.run(
        [str(BUILD_SCRIPT), "--bin-dir"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BuildError(f"{BUILD_SCRIPT} --bin-dir failed: {result.stderr.strip()}")
    return Path(result.stdout.strip())


def ensure_binaries(*, build: bool = True, output: IO[str] | None = None) -> Path:
    """Return the directory holding etcd, kube-apiserver and kube-scheduler.

    With ``build`` (the default) this runs ``hack/build-k8s.sh``, which reuses cached
    binaries and builds them otherwise (minutes, the first time). Its progress goes to
    ``output`` (default: inherited stderr). Raises ``BuildError`` when the build fails or
    a binary is missing, never returns a directory without all three.
    """
    if build and not os.environ.get("MUSTER_K8S_BIN_DIR"):
        result = subprocess.run(
            [str(BUILD_SCRIPT)],
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            check=False,
        )
        if result.returncode != 0:
            raise BuildError(f"{BUILD_SCRIPT} failed with exit status {result.returncode}")
    bin_dir = default_bin_dir()
    missing = [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise BuildError(f"missing binaries in {bin_dir}: {', '.join(missing)}")
    return bin_dir


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a (possibly large) text file."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            block = min(size, max(4096, lines * 400))
            handle.seek(size - block)
            data = handle.read()
    except FileNotFoundError:
        return "(no log yet)"
    text = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class _Pki:
    ca_pem: bytes
    serving_cert_pem: bytes
    serving_key_pem: bytes
    sa_private_pem: bytes
    sa_public_pem: bytes


def _make_pki() -> _Pki:
    """A throw-away CA, a serving certificate for 127.0.0.1, and service-account keys."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=7)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "muster-local-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    service_ip = next(ipaddress.IPv4Network(SERVICE_CLUSTER_IP_RANGE).hosts())
    names: list[x509.GeneralName] = [
        x509.DNSName(name)
        for name in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    names += [
        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        x509.IPAddress(service_ip),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return _Pki(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        serving_cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        serving_key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        sa_private_pem=sa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        sa_public_pem=sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def _write_kubeconfig(path: Path, *, server: str, ca_pem: bytes, user: str, token: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "muster-local",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "muster-local", "context": {"cluster": "muster-local", "user": user}}
        ],
        "current-context": "muster-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------- REST


class RestClient:
    """A minimal JSON client for the Kubernetes API (dicts in, dicts out).

    The harness uses it instead of the generated client where it needs raw JSON
    (watch streams, strategic-merge patches of status, custom resources).
    """

    def __init__(self, server: str, token: str, ca_file: Path) -> None:
        self.server = server.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._pool = urllib3.PoolManager(
            num_pools=2, maxsize=8, cert_reqs="CERT_REQUIRED", ca_certs=str(ca_file)
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Json:
        """Send a request; return the decoded JSON body; raise ``ApiError`` unless 2xx."""
        url = self._url(path, query)
        headers = dict(self._headers)
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        response = self._pool.request(
            method,
            url,
            body=data,
            headers=headers,
            timeout=urllib3.Timeout(connect=5.0, read=timeout),
            retries=False,
        )
        text = response.data.decode("utf-8", errors="replace")
        if not 200 <= response.status < 300:
            raise ApiError(method, path, response.status, text)
        if not text:
            return {}
        decoded = json.loads(text)
        return decoded if isinstance(decoded, dict) else {"value": decoded}

    def get_text(self, path: str, *, timeout: float = 5.0) -> tuple[int, str]:
        """GET ``path`` and return (status, body text); no exception on non-2xx."""
        response = self._pool.request(
            "GET",
            self._url(path, None),
            headers=self._headers,
            timeout=urllib3.Timeout(connect=2.0, read=timeout),
            retries=False,
        )
        return response.status, response.data.decode("utf-8", errors="replace")

    def stream(
        self, path: str, query: Mapping[str, str | int | bool], *, timeout: float
    ) -> urllib3.BaseHTTPResponse:
        """Open a streaming GET (a watch); the caller reads and closes it."""
        response = self._pool.request(
            "GET",
            self._url(path, query),
            headers=self._headers,
            timeout=urllib3.Timeout(connect=5.0, read=timeout),
            retries=False,
            preload_content=False,
        )
        if response.status != 200:
            body = response.read().decode("utf-8", errors="replace")
            response.release_conn()
            raise ApiError("GET", path, response.status, body)
        return response

    def close(self) -> None:
        self._pool.clear()

    def _url(self, path: str, query: Mapping[str, str | int | bool] | None) -> str:
        url = self.server + path
        if query:
            encoded = {
                k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in query.items()
            }
            url += ("&" if "?" in path else "?") + urlencode(encoded)
        return url


# --------------------------------------------------------------------------- processes


class _Process:
    """One component: its command line, its log file, its OS process."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.running:
            raise ComponentError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = list(self.argv)
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            # Parent-death signal: the component gets SIGTERM if this process dies
            # without running its cleanup (e.g. SIGKILL). It is tied to the thread that
            # forks, hence main thread only.
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        with self.log_path.open("ab") as log:
            log.write(f"\n===== {_now()} starting: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def check_alive(self) -> None:
        if self.popen is None:
            raise ComponentError(f"{self.name} was never started")
        code = self.popen.poll()
        if code is not None:
            raise ComponentError(
                f"{self.name} exited with status {code}; log tail:\n{_tail(self.log_path, 40)}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
        popen = self.popen
        if popen is None:
            return
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    popen.kill()
                popen.wait(5.0)
        with contextlib.suppress(OSError), self.log_path.open("ab") as log:
            log.write(f"===== {_now()} stopped (exit status {popen.returncode})\n".encode())
        self.popen = None


# --------------------------------------------------------------------------- scheduler config


@dataclass(frozen=True)
class ManagedResource:
    """An extended resource the extender manages (``extenders[].managedResources``)."""

    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True)
class ExtenderConfig:
    """The ``extenders`` entry of the KubeSchedulerConfiguration.

    ``url_prefix`` is where the extender listens (e.g. ``http://127.0.0.1:8888`` or
    ``http://127.0.0.1:8888/scheduler``); the scheduler POSTs to ``{url_prefix}/{verb}``.
    ``bind`` delegates binding to the extender (``bindVerb``). A verb set to ``None`` is
    left out. ``http_timeout`` is a Go duration string.
    """

    url_prefix: str
    bind: bool = False
    filter_verb: str | None = "filter"
    prioritize_verb: str | None = "prioritize"
    preempt_verb: str | None = "preempt"
    bind_verb: str = "bind"
    weight: int = 1
    node_cache_capable: bool = True
    http_timeout: str = "5s"
    ignorable: bool = False
    managed_resources: tuple[ManagedResource, ...] = ()

    def to_config(self) -> Json:
        entry: Json = {"urlPrefix": self.url_prefix}
        if self.filter_verb:
            entry["filterVerb"] = self.filter_verb
        if self.prioritize_verb:
            entry["prioritizeVerb"] = self.prioritize_verb
            entry["weight"] = self.weight
        if self.preempt_verb:
            entry["preemptVerb"] = self.preempt_verb
        if self.bind:
            entry["bindVerb"] = self.bind_verb
        entry.update(
            {
                "enableHTTPS": False,
                "nodeCacheCapable": self.node_cache_capable,
                "httpTimeout": self.http_timeout,
                "ignorable": self.ignorable,
            }
        )
        if self.managed_resources:
            entry["managedResources"] = [
                {"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler}
                for r in self.managed_resources
            ]
        return entry


def _as_extender(value: ExtenderConfig | str | None) -> ExtenderConfig | None:
    if value is None or isinstance(value, ExtenderConfig):
        return value
    return ExtenderConfig(url_prefix=value)


class _Keep:
    """Sentinel type: "keep the current setting"."""


KEEP = _Keep()


# --------------------------------------------------------------------------- kubelet emulator


@dataclass
class _Task:
    kind: str  # "start" or "delete"
    namespace: str
    name: str
    uid: str
    when: float  # time.time() at which to act
    pod: Json = field(default_factory=dict)


class KubeletEmulator:
    """Plays the kubelet's part for every node (there is no kubelet).

    A background thread lists and then watches all pods (resuming from the last
    resourceVersion, relisting after "410 Gone" or a lost connection, e.g. while
    kube-apiserver restarts); a second thread acts on them:

    * a pod bound to an existing node (``spec.nodeName`` set) and still ``Pending``
      becomes ``Running``: its status subresource gets ``startTime``, pod/host IPs,
      the Initialized, PodReadyToStartContainers, ContainersReady, Ready (and
      PodScheduled) conditions and running ``containerStatuses``;
    * a pod with a ``deletionTimestamp`` (kube-apiserver deletes a pod bound to a node
      gracefully: it only sets ``deletionTimestamp`` = now + grace period) is deleted
      with grace period 0 (and a UID precondition) once ``deletionTimestamp`` has passed,
      or after ``max_grace_seconds`` if that is set and shorter.
    """

    def __init__(self, rest: RestClient, *, max_grace_seconds: float | None = None) -> None:
        self._rest = rest
        self.max_grace_seconds = max_grace_seconds
        self._events: queue.Queue[tuple[str, Json]] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._response_lock = threading.Lock()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._tasks: dict[str, _Task] = {}
        self._started: set[str] = set()
        self._node_ips: dict[str, str] = {}
        self._next_pod_ip = 1
        self.pods_started = 0
        self.pods_deleted = 0
        self.synced = threading.Event()
        self.errors: list[str] = []

    def start(self) -> None:
        if self._threads:
            return
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._watch_loop, name="kubelet-watch", daemon=True),
            threading.Thread(target=self._work_loop, name="kubelet-work", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._interrupt_watch()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def remember_node_ip(self, node: str, ip: str) -> None:
        self._node_ips[node] = ip

    # -- watching

    def _interrupt_watch(self) -> None:
        with self._response_lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()

    def _note_error(self, message: str) -> None:
        self.errors.append(f"{_now()} {message}")
        del self.errors[:-50]

    def _watch_loop(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                listing = self._rest.request("GET", "/api/v1/pods")
                for pod in listing.get("items", []):
                    self._events.put(("SYNC", pod))
                rv = str(listing["metadata"]["resourceVersion"])
                self.synced.set()
                backoff = 0.1
                while not self._stop.is_set():
                    rv = self._watch_once(rv)
            except _Gone:
                continue
            except Exception as exc:
                if self._stop.is_set():
                    break
                self._note_error(f"watch: {exc!r}")
                self._stop.wait(backoff)
                backoff = min(2.0, backoff * 2)

    def _watch_once(self, rv: str) -> str:
        query: dict[str, str | int | bool] = {
            "watch": True,
            "resourceVersion": rv,
            "allowWatchBookmarks": True,
            "timeoutSeconds": 300,
        }
        response = self._rest.stream("/api/v1/pods", query, timeout=330.0)
        with self._response_lock:
            self._response = response
        try:
            if self._stop.is_set():
                return rv
            buffer = b""
            for chunk in response.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        rv = self._on_event(json.loads(line), rv)
            return rv
        finally:
            with self._response_lock:
                self._response = None
            with contextlib.suppress(Exception):
                response.release_conn()

    def _on_event(self, event: Json, rv: str) -> str:
        kind = str(event.get("type"))
        obj: Json = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error event: {obj}")
        new_rv = obj.get("metadata", {}).get("resourceVersion")
        if kind != "BOOKMARK":
            self._events.put((kind, obj))
        return str(new_rv) if new_rv else rv

    # -- acting

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            due = [t for t in self._tasks.values() if t.when <= now]
            for task in due:
                self._run(task)
            waits = [t.when - time.time() for t in self._tasks.values()]
            timeout = min([0.5, *waits])
            try:
                kind, pod = self._events.get(timeout=max(0.01, timeout))
            except queue.Empty:
                continue
            try:
                self._on_pod(kind, pod)
            except Exception as exc:
                self._note_error(f"pod {kind}: {exc!r}")

    def _on_pod(self, kind: str, pod: Json) -> None:
        meta = pod.get("metadata", {})
        uid = str(meta.get("uid", ""))
        if kind == "DELETED":
            self._tasks.pop(uid, None)
            self._started.discard(uid)
            return
        node = pod.get("spec", {}).get("nodeName")
        if not node:
            return
        namespace, name = str(meta["namespace"]), str(meta["name"])
        deletion = meta.get("deletionTimestamp")
        if deletion:
            when = _parse_time(str(deletion))
            if self.max_grace_seconds is not None:
                when = min(when, time.time() + self.max_grace_seconds)
            existing = self._tasks.get(uid)
            if existing is None or existing.kind != "delete":
                self._tasks[uid] = _Task("delete", namespace, name, uid, when)
            return
        phase = pod.get("status", {}).get("phase", "Pending")
        if phase == "Pending" and uid not in self._started and uid not in self._tasks:
            self._tasks[uid] = _Task("start", namespace, name, uid, 0.0, pod)

    def _run(self, task: _Task) -> None:
        try:
            if task.kind == "start":
                self._start_pod(task)
            else:
                self._delete_pod(task)
        except ApiError as exc:
            if exc.status in (404, 409):  # gone, or replaced by another pod of that name
                self._tasks.pop(task.uid, None)
                return
            self._note_error(f"{task.kind} {task.namespace}/{task.name}: {exc}")
            task.when = time.time() + 0.5
        except Exception as exc:  # connection refused while kube-apiserver restarts, ...
            self._note_error(f"{task.kind} {task.namespace}/{task.name}: {exc!r}")
            task.when = time.time() + 0.5
        else:
            if self._tasks.get(task.uid) is task:
                del self._tasks[task.uid]

    def _node_ip(self, node: str) -> str | None:
        if node not in self._node_ips:
            try:
                obj = self._rest.request("GET", f"/api/v1/nodes/{quote(node)}")
            except ApiError as exc:
                if exc.status == 404:
                    return None
                raise
            addresses = obj.get("status", {}).get("addresses", [])
            ips = [a["address"] for a in addresses if a.get("type") == "InternalIP"]
            self._node_ips[node] = ips[0] if ips else ""
        return self._node_ips[node]

    def _start_pod(self, task: _Task) -> None:
        pod = task.pod
        node = str(pod["spec"]["nodeName"])
        host_ip = self._node_ip(node)
        if host_ip is None:  # bound to a node that does not exist: no kubelet would run it
            self._note_error(f"pod {task.namespace}/{task.name} is bound to unknown node {node}")
            return
        now = _now()
        serial = self._next_pod_ip
        self._next_pod_ip += 1
        pod_ip = f"10.244.{(serial >> 8) & 255}.{serial & 255}"
        spec = pod.get("spec", {})
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": now}
            for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
        ]
        existing = {c.get("type"): c for c in pod.get("status", {}).get("conditions", [])}
        if existing.get("PodScheduled", {}).get("status") != "True":
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now})

        def container_status(container: Json, running: bool) -> Json:
            state: Json
            if running:
                state = {"running": {"startedAt": now}}
            else:
                state = {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                }
            return {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "containerID": f"emulated://{task.uid}/{container['name']}",
                "ready": running,
                "started": running,
                "restartCount": 0,
                "state": state,
            }

        status: Json = {
            "phase": "Running",
            "startTime": now,
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "conditions": conditions,
            "containerStatuses": [container_status(c, True) for c in spec.get("containers", [])],
        }
        if host_ip:
            status["hostIP"] = host_ip
            status["hostIPs"] = [{"ip": host_ip}]
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                container_status(c, c.get("restartPolicy") == "Always")
                for c in spec["initContainers"]
            ]
        path = f"/api/v1/namespaces/{quote(task.namespace)}/pods/{quote(task.name)}/status"
        patch = {"metadata": {"uid": task.uid}, "status": status}
        self._rest.request(
            "PATCH", path, patch, content_type="application/strategic-merge-patch+json"
        )
        self._started.add(task.uid)
        self.pods_started += 1

    def _delete_pod(self, task: _Task) -> None:
        path = f"/api/v1/namespaces/{quote(task.namespace)}/pods/{quote(task.name)}"
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": task.uid},
        }
        self._rest.request("DELETE", path, options)
        self.pods_deleted += 1


class _Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


# --------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd + kube-apiserver + kube-scheduler on loopback, plus a kubelet emulator.

    Arguments:
        bin_dir: directory with the three binaries (default: ``ensure_binaries()``,
            which builds them if needed).
        workdir: where certificates, kubeconfigs, etcd data and logs go (default: a new
            temporary directory, removed by ``stop()`` unless ``keep_workdir``).
        extender: an ``ExtenderConfig``, or just its URL prefix, or ``None``.
        scheduler_config: extra top-level KubeSchedulerConfiguration fields, e.g.
            ``{"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 2}``.
        kubelet: run the ``KubeletEmulator``.
        kubelet_max_grace_seconds: cap on how long the emulator honours grace periods.
        crds_dir: CRDs to install at start (``None``: none).
        start_timeout: deadline for each component to become ready.
        verbosity: ``--v`` for kube-apiserver and kube-scheduler.
    """

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        workdir: Path | None = None,
        extender: ExtenderConfig | str | None = None,
        scheduler_config: Mapping[str, Any] | None = None,
        kubelet: bool = True,
        kubelet_max_grace_seconds: float | None = None,
        crds_dir: Path | None = DEFAULT_CRDS_DIR,
        start_timeout: float = 90.0,
        verbosity: int = 2,
        keep_workdir: bool = False,
    ) -> None:
        self._bin_dir = bin_dir
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="muster-k8s-"))
        self.keep_workdir = keep_workdir
        self.extender = _as_extender(extender)
        self.scheduler_overrides: dict[str, Any] = dict(scheduler_config or {})
        self.crds_dir = crds_dir
        self.start_timeout = start_timeout
        self.verbosity = verbosity
        self._want_kubelet = kubelet
        self._kubelet_max_grace = kubelet_max_grace_seconds

        etcd_client, etcd_peer, apiserver, scheduler = free_ports(4)
        self.etcd_client_port = etcd_client
        self.etcd_peer_port = etcd_peer
        self.apiserver_port = apiserver
        self.scheduler_port = scheduler
        self.server = f"https://127.0.0.1:{apiserver}"
        self.etcd_url = f"http://127.0.0.1:{etcd_client}"

        self.admin_token = secrets.token_urlsafe(32)
        self._scheduler_token = secrets.token_urlsafe(32)
        self.logs_dir = self.workdir / "logs"
        self.ca_file = self.workdir / "pki" / "ca.crt"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.scheduler_kubeconfig = self.workdir / "scheduler.kubeconfig"
        self.scheduler_config_path = self.workdir / "scheduler-config.yaml"
        self._pki: _Pki | None = None
        self._processes: dict[str, _Process] = {}
        self._rest: RestClient | None = None
        self._api_client: Any = None
        self.kubelet: KubeletEmulator | None = None
        self._node_serial = 0
        self._started = False

    # -- lifecycle

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Start every component and wait until each is ready; install the CRDs."""
        if self._started:
            return self
        self._started = True
        atexit.register(self.stop)
        try:
            bin_dir = self._bin_dir or ensure_binaries()
            self._bin_dir = bin_dir
            self._write_files()
            self._processes = {
                "etcd": _Process("etcd", self._etcd_argv(), self.logs_dir / "etcd.log"),
                "kube-apiserver": _Process(
                    "kube-apiserver", self._apiserver_argv(), self.logs_dir / "kube-apiserver.log"
                ),
                "kube-scheduler": _Process(
                    "kube-scheduler", self._scheduler_argv(), self.logs_dir / "kube-scheduler.log"
                ),
            }
            self._start_etcd()
            self._start_apiserver()
            if self.crds_dir is not None:
                self.install_crds(self.crds_dir)
            self.start_scheduler()
            if self._want_kubelet:
                self.kubelet = KubeletEmulator(self.rest, max_grace_seconds=self._kubelet_max_grace)
                self.kubelet.start()
                wait_until(
                    self.kubelet.synced.is_set, timeout=self.start_timeout, what="kubelet sync"
                )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop everything (kubelet emulator, scheduler, apiserver, etcd); idempotent."""
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        for name in ("kube-scheduler", "kube-apiserver", "etcd"):
            process = self._processes.get(name)
            if process is not None:
                process.stop()
        if self._api_client is not None:
            with contextlib.suppress(Exception):
                self._api_client.close()
            self._api_client = None
        if self._rest is not None:
            self._rest.close()
            self._rest = None
        if self._own_workdir and not self.keep_workdir and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._started = False
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    @property
    def pids(self) -> dict[str, int]:
        """The OS process id of each running component."""
        return {n: p.pid for n, p in self._processes.items() if p.running and p.pid is not None}

    def check_alive(self) -> None:
        """Raise ``ComponentError`` (with its log tail) if a component has exited."""
        for process in self._processes.values():
            process.check_alive()

    # -- etcd

    def _etcd_argv(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(self._binary("etcd")),
            "--name=muster",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=muster={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",  # test data: durability does not matter, speed does
            "--log-level=warn",
        ]

    def _start_etcd(self) -> None:
        process = self._processes["etcd"]
        process.start()
        pool = urllib3.PoolManager()

        def healthy() -> bool:
            process.check_alive()
            response = pool.request("GET", f"{self.etcd_url}/health", timeout=2.0, retries=False)
            return response.status == 200 and b'"health":"true"' in response.data

        wait_until(
            healthy,
            timeout=self.start_timeout,
            what="etcd /health",
            on_timeout=lambda: self.log_tail(components=["etcd"]),
        )

    # -- kube-apiserver

    def _apiserver_argv(self) -> list[str]:
        pki = self.workdir / "pki"
        return [
            str(self._binary("kube-apiserver")),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--cert-dir={pki}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # Nothing reconciles the kubernetes Service's endpoints to a loopback address.
            "--endpoint-reconciler-type=none",
            # No controller creates "default" service accounts or removes the not-ready
            # taint of new nodes (see the module docstring).
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            # Close watches when terminating instead of waiting for them to time out.
            "--shutdown-watch-termination-grace-period=2s",
            "--allow-privileged=true",
            "--profiling=false",
            f"--v={self.verbosity}",
        ]

    def _start_apiserver(self) -> None:
        self._processes["kube-apiserver"].start()
        self.wait_apiserver_ready()

    def wait_apiserver_ready(self, timeout: float | None = None) -> None:
        """Poll kube-apiserver's ``/readyz`` until it answers ``ok``."""
        process = self._processes["kube-apiserver"]

        def ready() -> bool:
            process.check_alive()
            status, body = self.rest.get_text("/readyz")
            return status == 200 and body.strip() == "ok"

        wait_until(
            ready,
            timeout=timeout or self.start_timeout,
            interval=0.2,
            what="kube-apiserver /readyz",
            on_timeout=lambda: self.log_tail(components=["kube-apiserver", "etcd"]),
        )

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM) and start it again on the same port and data."""
        process = self._processes["kube-apiserver"]
        process.stop()
        wait_until(
            lambda: _port_is_free(self.apiserver_port),
            timeout=30.0,
            what=f"port {self.apiserver_port} to be released",
        )
        self._start_apiserver()

    # -- kube-scheduler

    def _scheduler_argv(self) -> list[str]:
        return [
            str(self._binary("kube-scheduler")),
            f"--config={self.scheduler_config_path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.scheduler_port}",
            # Delegated authn/authz for its own endpoints: the admin token can read /metrics.
            f"--authentication-kubeconfig={self.scheduler_kubeconfig}",
            f"--authorization-kubeconfig={self.scheduler_kubeconfig}",
            "--authentication-skip-lookup=true",  # bearer tokens only, no client-CA lookup
            f"--v={self.verbosity}",
        ]

    def scheduler_configuration(self) -> Json:
        """The KubeSchedulerConfiguration the scheduler runs (or will run) with."""
        config: Json = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {
                "kubeconfig": str(self.scheduler_kubeconfig),
                "qps": 200,
                "burst": 400,
            },
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": "default-scheduler"}],
        }
        if self.extender is not None:
            config["extenders"] = [self.extender.to_config()]
        config.update(self.scheduler_overrides)
        return config

    def start_scheduler(self) -> None:
        """Write the scheduler configuration, start kube-scheduler, wait for ``/readyz``."""
        self.scheduler_config_path.write_text(
            yaml.safe_dump(self.scheduler_configuration(), sort_keys=False)
        )
        process = self._processes["kube-scheduler"]
        process.start()
        pool = urllib3.PoolManager(cert_reqs="CERT_NONE")  # its self-signed serving cert

        def ready() -> bool:
            process.check_alive()
            response = pool.request(
                "GET",
                f"https://127.0.0.1:{self.scheduler_port}/readyz",
                timeout=2.0,
                retries=False,
            )
            return response.status == 200

        with _quiet_insecure_warnings():
            wait_until(
                ready,
                timeout=self.start_timeout,
                interval=0.2,
                what="kube-scheduler /readyz",
                on_timeout=lambda: self.log_tail(components=["kube-scheduler"]),
            )

    def stop_scheduler(self) -> None:
        self._processes["kube-scheduler"].stop()

    def restart_scheduler(
        self,
        extender: ExtenderConfig | str | _Keep | None = KEEP,
        *,
        scheduler_config: Mapping[str, Any] | _Keep | None = KEEP,
    ) -> None:
        """Restart kube-scheduler, optionally with another extender / extra config.

        ``extender=None`` removes the extender; leaving an argument out keeps it.
        """
        if not isinstance(extender, _Keep):
            self.extender = _as_extender(extender)
        if not isinstance(scheduler_config, _Keep):
            self.scheduler_overrides = dict(scheduler_config or {})
        self.stop_scheduler()
        wait_until(
            lambda: _port_is_free(self.scheduler_port),
            timeout=30.0,
            what=f"port {self.scheduler_port} to be released",
        )
        self.start_scheduler()

    @contextlib.contextmanager
    def using_extender(
        self,
        extender: ExtenderConfig | str | None,
        *,
        scheduler_config: Mapping[str, Any] | _Keep | None = KEEP,
    ) -> Iterator[ControlPlane]:
        """Run kube-scheduler with ``extender`` (and ``scheduler_config``, if given) inside
        the block, then restore the previous configuration (e.g. around a test module that
        runs Muster)."""
        previous, previous_config = self.extender, self.scheduler_overrides
        self.restart_scheduler(extender, scheduler_config=scheduler_config)
        try:
            yield self
        finally:
            self.restart_scheduler(previous, scheduler_config=previous_config)

    # -- files

    def _binary(self, name: str) -> Path:
        assert self._bin_dir is not None
        return self._bin_dir / name

    def _write_files(self) -> None:
        pki_dir = self.workdir / "pki"
        pki_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        pki = self._pki = _make_pki()
        self.ca_file.write_bytes(pki.ca_pem)
        (pki_dir / "apiserver.crt").write_bytes(pki.serving_cert_pem + pki.ca_pem)
        (pki_dir / "apiserver.key").write_bytes(pki.serving_key_pem)
        (pki_dir / "sa.key").write_bytes(pki.sa_private_pem)
        (pki_dir / "sa.pub").write_bytes(pki.sa_public_pem)
        for key in ("apiserver.key", "sa.key"):
            (pki_dir / key).chmod(0o600)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(
            f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
            f"{self._scheduler_token},{SCHEDULER_USER},{SCHEDULER_USER}\n"
        )
        tokens.chmod(0o600)
        _write_kubeconfig(
            self.kubeconfig,
            server=self.server,
            ca_pem=pki.ca_pem,
            user=ADMIN_USER,
            token=self.admin_token,
        )
        _write_kubeconfig(
            self.scheduler_kubeconfig,
            server=self.server,
            ca_pem=pki.ca_pem,
            user=SCHEDULER_USER,
            token=self._scheduler_token,
        )

    # -- logs

    @property
    def log_paths(self) -> dict[str, Path]:
        return {name: self.logs_dir / f"{name}.log" for name in BINARIES}

    def log_tail(self, lines: int = 40, components: Sequence[str] | None = None) -> str:
        """The last ``lines`` lines of each component's log (for failure reports)."""
        parts = []
        for name in components or BINARIES:
            path = self.logs_dir / f"{name}.log"
            parts.append(f"----- {name} ({path}), last {lines} lines -----\n{_tail(path, lines)}")
        if self.kubelet is not None and self.kubelet.errors and components is None:
            errors = "\n".join(self.kubelet.errors[-10:])
            parts.append(f"----- kubelet emulator, last errors -----\n{errors}")
        return "\n".join(parts)

    # -- clients

    @property
    def rest(self) -> RestClient:
        """The admin ``RestClient`` (JSON dicts in and out)."""
        if self._rest is None:
            self._rest = RestClient(self.server, self.admin_token, self.ca_file)
        return self._rest

    def api_client(self) -> k8s.ApiClient:
        """The admin ``kubernetes.client.ApiClient`` (shared; built from the kubeconfig)."""
        if self._api_client is None:
            self._api_client = self.new_api_client(self.kubeconfig)
        client: k8s.ApiClient = self._api_client
        return client

    @staticmethod
    def new_api_client(kubeconfig: Path) -> k8s.ApiClient:
        """A fresh ``ApiClient`` for a kubeconfig this harness wrote (admin or a service
        account's: server, CA data and bearer token of its current context)."""
        config = yaml.safe_load(kubeconfig.read_text())
        context_name = config["current-context"]
        context = next(c for c in config["contexts"] if c["name"] == context_name)["context"]
        cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u for u in config["users"] if u["name"] == context["user"])["user"]
        configuration = k8s.Configuration(
            host=cluster["cluster"]["server"],
            api_key={"BearerToken": user["token"]},
            api_key_prefix={"BearerToken": "Bearer"},
            ca_cert_data=base64.b64decode(
                cluster["cluster"]["certificate-authority-data"]
            ).decode(),
        )
        return k8s.ApiClient(configuration)

    def core_v1(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api_client())

    def custom_objects(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api_client())

    # -- objects

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create a namespace (no error if it exists)."""
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": dict(labels or {})},
        }
        try:
            self.rest.request("POST", "/api/v1/namespaces", body)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def create_node(
        self,
        name: str,
        capacity: Mapping[str, str | int],
        *,
        allocatable: Mapping[str, str | int] | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        unschedulable: bool = False,
    ) -> Json:
        """Register a Ready node: create the Node, then write its status.

        ``capacity`` maps resource names to quantities (``{"cpu": "8", "memory": "32Gi",
        "nvidia.com/gpu": 4}``); ``pods`` defaults to 110; ``allocatable`` defaults to
        ``capacity``. ``taints`` are ``{"key", "value", "effect"}`` mappings. Returns the
        Node as the API server stored it.
        """
        self._node_serial += 1
        serial = self._node_serial
        ip = f"10.1.{(serial >> 8) & 255}.{serial & 255}"
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **(labels or {}),
        }
        cap = {"pods": "110", **{k: str(v) for k, v in capacity.items()}}
        alloc = {k: str(v) for k, v in (allocatable or cap).items()}
        alloc.setdefault("pods", cap["pods"])
        body: Json = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels},
            "spec": {"taints": [dict(t) for t in taints], "unschedulable": unschedulable},
        }
        self.rest.request("POST", "/api/v1/nodes", body)
        now = _now()
        conditions = [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "emulated by Muster's test harness",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ]
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure"):
            conditions.append(
                {
                    "type": kind,
                    "status": "False",
                    "reason": f"KubeletHasNo{kind}",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            )
        status = {
            "capacity": cap,
            "allocatable": alloc,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"muster-{serial}",
                "systemUUID": f"muster-{serial}",
                "bootID": f"muster-{serial}",
                "kernelVersion": "emulated",
                "osImage": "emulated",
                "containerRuntimeVersion": "emulated://0",
                "kubeletVersion": "emulated",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        if self.kubelet is not None:
            self.kubelet.remember_node_ip(name, ip)
        return self.rest.request(
            "PATCH",
            f"/api/v1/nodes/{quote(name)}/status",
            {"status": status},
            content_type="application/strategic-merge-patch+json",
        )

    def delete_node(self, name: str) -> None:
        try:
            self.rest.request("DELETE", f"/api/v1/nodes/{quote(name)}")
        except ApiError as exc:
            if exc.status != 404:
                raise

    def install_crds(self, directory: Path | None = None, *, timeout: float = 30.0) -> list[str]:
        """Create (or update) every CRD in ``directory``/*.yaml; wait until each is served.

        Returns the CRD names.
        """
        directory = directory or DEFAULT_CRDS_DIR
        names: list[str] = []
        for path in sorted(directory.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                names.append(self._apply_crd(doc))
        for name in names:
            self._wait_crd_served(name, timeout)
        return names

    def _apply_crd(self, crd: Json) -> str:
        name = str(crd["metadata"]["name"])
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        try:
            self.rest.request("POST", base, crd)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = self.rest.request("GET", f"{base}/{name}")
            crd = {**crd, "metadata": {**crd["metadata"]}}
            crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.rest.request("PUT", f"{base}/{name}", crd)
        return name

    def _wait_crd_served(self, name: str, timeout: float) -> None:
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        last: Json = {}

        def established() -> bool:
            nonlocal last
            last = self.rest.request("GET", f"{base}/{name}")
            conditions = last.get("status", {}).get("conditions", [])
            if not any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                return False
            spec = last["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    path = f"/apis/{spec['group']}/{version['name']}/{spec['names']['plural']}"
                    self.rest.request("GET", path, query={"limit": 1})
            return True

        wait_until(
            established,
            timeout=timeout,
            what=f"CRD {name} to be established and served",
            on_timeout=lambda: json.dumps(last.get("status", {}), indent=1),
        )

    # -- service accounts

    def service_account_kubeconfig(
        self,
        namespace: str,
        name: str,
        *,
        expiration_seconds: int = 24 * 3600,
        path: Path | None = None,
    ) -> Path:
        """Create the ServiceAccount (if needed), request a token for it (TokenRequest
        API) and write a kubeconfig that uses it; return the kubeconfig's path.

        The token is signed with the service-account key, which survives
        kube-apiserver restarts, so the kubeconfig keeps working after one. Grant the
        account what it needs with ordinary (Cluster)Roles and (Cluster)RoleBindings.
        """
        self.create_namespace(namespace)
        try:
            self.rest.request(
                "POST",
                f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            )
        except ApiError as exc:
            if exc.status != 409:
                raise
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        }
        answer = self.rest.request(
            "POST",
            f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts/{quote(name)}/token",
            request,
        )
        token = str(answer["status"]["token"])
        assert self._pki is not None
        target = path or self.workdir / f"sa-{namespace}-{name}.kubeconfig"
        return _write_kubeconfig(
            target,
            server=self.server,
            ca_pem=self._pki.ca_pem,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=token,
        )


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like Go's listeners: connections in TIME_WAIT do not keep the port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _quiet_insecure_warnings() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        yield
