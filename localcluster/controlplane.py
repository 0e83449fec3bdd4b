"""``ControlPlane``: etcd, kube-apiserver, kube-scheduler and kube-controller-manager on
loopback, plus a kubelet emulator.

It owns the lifecycle (start, stop, logs, clients); etcd's and kube-apiserver's part lives
in ``apiserver.ApiServerMixin``, kube-scheduler's in ``scheduler.SchedulerMixin``,
kube-controller-manager's in ``controllers.ControllerManagerMixin`` and object creation in
``objects.ObjectsMixin``.

The components run from the binaries built by ``hack/build-k8s.sh``, on 127.0.0.1, on free
ports, in a temporary directory:

* etcd and kube-apiserver (RBAC, static bearer tokens for an admin and the scheduler, the
  admin kubeconfig at ``<workdir>/admin.kubeconfig``): see ``apiserver``;
* kube-scheduler with a ``KubeSchedulerConfiguration`` (v1), leader election off and,
  optionally, an ``extenders`` entry (see ``ExtenderConfig``). It can be restarted with
  another extender configuration;
* kube-controller-manager with the controllers in ``controllers.CONTROLLERS`` (Jobs,
  ReplicaSets, Deployments, StatefulSets, disruption budgets, garbage collection,
  namespaces, pod GC, service accounts), or none (``controllers=()``).

There is no kubelet. Nodes are plain Node objects whose status the harness writes
(``create_node``), and ``KubeletEmulator`` plays the kubelet's part: pods bound to an
existing node become Running (and Succeeded after the run time they ask for), and a pod
being deleted gracefully ends Failed and is removed once its grace period has elapsed.
The node-lifecycle controller does not run (no heartbeats) and nothing removes the
``not-ready`` taint; kube-apiserver's admission plugins are set for that (see
``apiserver``).

Each component logs to ``<workdir>/logs/<component>.log``; ``log_tail()`` returns the end
of every log for failure reports. ``stop()`` sends SIGTERM, then SIGKILL after a
deadline; it is also registered with ``atexit``, and the children get a parent-death
signal, so no process outlives the Python process that started it.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import secrets
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from .apiserver import ApiServerMixin
from .binaries import BINARIES, ensure_binaries
from .controllers import CONTROLLERS, ControllerManagerMixin, controller_manager_argv
from .kubelet import KubeletEmulator
from .objects import DEFAULT_CRDS_DIR, ObjectsMixin
from .pki import Pki
from .processes import Process, free_ports, tail
from .rest import RestClient
from .scheduler import ExtenderConfig, SchedulerMixin, as_extender
from .waiting import wait_until


class ControlPlane(ApiServerMixin, SchedulerMixin, ControllerManagerMixin, ObjectsMixin):
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager on loopback, plus a
    kubelet emulator.

    Arguments:
        bin_dir: directory with the binaries (default: ``ensure_binaries()``,
            which builds them if needed).
        workdir: where certificates, kubeconfigs, etcd data and logs go (default: a new
            temporary directory, removed by ``stop()`` unless ``keep_workdir``).
        extender: an ``ExtenderConfig``, or just its URL prefix, or ``None``.
        scheduler_config: extra top-level KubeSchedulerConfiguration fields, e.g.
            ``{"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 2}``.
        kubelet: run the ``KubeletEmulator``.
        controllers: the kube-controller-manager controllers to run (default
            ``CONTROLLERS``); empty: no kube-controller-manager.
        kubelet_max_grace_seconds: cap on how long the emulator honours grace periods.
        crds_dir: CRDs to install at start (``None``: none).
        feature_gates: ``--feature-gates`` for kube-apiserver, kube-scheduler and
            kube-controller-manager, e.g. ``{"GenericWorkload": True}``.
        runtime_config: kube-apiserver ``--runtime-config`` entries, e.g.
            ``("scheduling.k8s.io/v1beta1=true",)``.
        scheduler_binary: another scheduler to run in kube-scheduler's place (a peer
            built by ``hack/build-peers.sh``, such as scheduler-plugins' kube-scheduler).
        scheduler_rbac: ClusterRoles and ClusterRoleBindings to create before the
            scheduler starts (what such a peer reads beyond kube-scheduler's own rights).
        start_timeout: deadline for each component to become ready.
        verbosity: ``--v`` for kube-apiserver and kube-scheduler.
        audit_policy: an audit ``Policy`` (a dict) for kube-apiserver; its log (JSON lines)
            goes to ``audit_log`` and survives ``restart_apiserver()``. ``None``: no audit.
    """

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        workdir: Path | None = None,
        extender: ExtenderConfig | str | None = None,
        scheduler_config: Mapping[str, Any] | None = None,
        kubelet: bool = True,
        controllers: Sequence[str] = CONTROLLERS,
        kubelet_max_grace_seconds: float | None = None,
        crds_dir: Path | None = DEFAULT_CRDS_DIR,
        start_timeout: float = 90.0,
        verbosity: int = 2,
        keep_workdir: bool = False,
        audit_policy: Mapping[str, Any] | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        runtime_config: Sequence[str] = (),
        scheduler_binary: Path | None = None,
        scheduler_rbac: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self._bin_dir = bin_dir
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="muster-k8s-"))
        self.keep_workdir = keep_workdir
        self.extender = as_extender(extender)
        self.scheduler_overrides: dict[str, Any] = dict(scheduler_config or {})
        self.crds_dir = crds_dir
        self.start_timeout = start_timeout
        self.verbosity = verbosity
        self._want_kubelet = kubelet
        self.controllers = tuple(controllers)
        self._kubelet_max_grace = kubelet_max_grace_seconds

        etcd_client, etcd_peer, apiserver, scheduler, controller_manager = free_ports(5)
        self.etcd_client_port = etcd_client
        self.etcd_peer_port = etcd_peer
        self.apiserver_port = apiserver
        self.scheduler_port = scheduler
        self.controller_manager_port = controller_manager
        self.server = f"https://127.0.0.1:{apiserver}"
        self.etcd_url = f"http://127.0.0.1:{etcd_client}"

        self.admin_token = secrets.token_urlsafe(32)
        self._scheduler_token = secrets.token_urlsafe(32)
        self.logs_dir = self.workdir / "logs"
        self.ca_file = self.workdir / "pki" / "ca.crt"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.scheduler_kubeconfig = self.workdir / "scheduler.kubeconfig"
        self.scheduler_config_path = self.workdir / "scheduler-config.yaml"
        self.audit_policy = dict(audit_policy) if audit_policy is not None else None
        self.feature_gates: dict[str, bool] = dict(feature_gates or {})
        self.runtime_config = tuple(runtime_config)
        self.scheduler_binary = scheduler_binary
        self.scheduler_rbac = tuple(scheduler_rbac)
        self.audit_log = self.logs_dir / "audit.log"
        self._pki: Pki | None = None
        self._processes: dict[str, Process] = {}
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
                "etcd": Process("etcd", self._etcd_argv(), self.logs_dir / "etcd.log"),
                "kube-apiserver": Process(
                    "kube-apiserver", self._apiserver_argv(), self.logs_dir / "kube-apiserver.log"
                ),
                "kube-scheduler": Process(
                    "kube-scheduler", self._scheduler_argv(), self.logs_dir / "kube-scheduler.log"
                ),
            }
            if self.controllers:
                self._processes["kube-controller-manager"] = Process(
                    "kube-controller-manager",
                    controller_manager_argv(
                        self._binary("kube-controller-manager"),
                        kubeconfig=self.kubeconfig,
                        port=self.controller_manager_port,
                        workdir=self.workdir,
                        controllers=self.controllers,
                        verbosity=self.verbosity,
                        extra=self.feature_gates_argv(),
                    ),
                    self.logs_dir / "kube-controller-manager.log",
                )
            self._start_etcd()
            self._start_apiserver()
            if self.crds_dir is not None:
                self.install_crds(self.crds_dir)
            for obj in self.scheduler_rbac:
                plural = {
                    "ClusterRole": "clusterroles",
                    "ClusterRoleBinding": "clusterrolebindings",
                }
                path = f"/apis/rbac.authorization.k8s.io/v1/{plural[obj['kind']]}"
                self.rest.request("POST", path, dict(obj))
            self.start_scheduler()
            if self.controllers:
                self.start_controller_manager()
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
        """Stop everything (kubelet emulator, controllers, scheduler, apiserver, etcd);
        idempotent."""
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        for name in ("kube-controller-manager", "kube-scheduler", "kube-apiserver", "etcd"):
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

    # -- every component: its binary, the feature gates

    def _binary(self, name: str) -> Path:
        if name == "kube-scheduler" and self.scheduler_binary is not None:
            return self.scheduler_binary
        assert self._bin_dir is not None
        return self._bin_dir / name

    def feature_gates_argv(self) -> list[str]:
        """``--feature-gates`` for every component (none: the release's defaults)."""
        if not self.feature_gates:
            return []
        gates = ",".join(f"{name}={str(on).lower()}" for name, on in self.feature_gates.items())
        return [f"--feature-gates={gates}"]

    # -- logs

    @property
    def log_paths(self) -> dict[str, Path]:
        return {name: self.logs_dir / f"{name}.log" for name in BINARIES}

    def log_tail(self, lines: int = 40, components: Sequence[str] | None = None) -> str:
        """The last ``lines`` lines of each component's log (for failure reports)."""
        parts = []
        for name in components or BINARIES:
            path = self.logs_dir / f"{name}.log"
            parts.append(f"----- {name} ({path}), last {lines} lines -----\n{tail(path, lines)}")
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
