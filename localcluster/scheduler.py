"""kube-scheduler: its configuration and how ``ControlPlane`` runs it.

``ExtenderConfig`` / ``ManagedResource`` describe the ``extenders`` entry of the
KubeSchedulerConfiguration; ``SchedulerMixin`` is the part of ``ControlPlane`` that writes
that configuration and starts, stops and restarts kube-scheduler.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import urllib3
import yaml

from .common import Json
from .processes import Process, wait_port_released
from .waiting import wait_until


@dataclass(frozen=True)
class ManagedResource:
    """An extended resource the extender manages (``extenders[].managedResources``)."""

    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True)
class ExtenderTLS:
    """Files on this machine for an extender's ``tlsConfig``."""

    ca_file: Path
    cert_file: Path
    key_file: Path


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
    #: HTTPS: kube-scheduler checks the extender's certificate against ``ca_file`` and
    #: presents ``cert_file``/``key_file`` (its ``tlsConfig``); ``url_prefix`` is https.
    tls: ExtenderTLS | None = None

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
        if self.tls is not None:
            entry["tlsConfig"] = {
                "caFile": str(self.tls.ca_file),
                "certFile": str(self.tls.cert_file),
                "keyFile": str(self.tls.key_file),
            }
        entry.update(
            {
                "enableHTTPS": self.tls is not None,
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


def as_extender(value: ExtenderConfig | str | None) -> ExtenderConfig | None:
    if value is None or isinstance(value, ExtenderConfig):
        return value
    return ExtenderConfig(url_prefix=value)


class Keep:
    """Sentinel type: "keep the current setting"."""


KEEP = Keep()


class SchedulerMixin:
    """``ControlPlane``'s kube-scheduler methods (see ``ControlPlane`` for the attributes)."""

    extender: ExtenderConfig | None
    scheduler_overrides: dict[str, Any]
    scheduler_config_path: Path
    scheduler_kubeconfig: Path
    scheduler_port: int
    start_timeout: float
    verbosity: int
    _processes: dict[str, Process]
    scheduler_binary: Path | None

    if TYPE_CHECKING:

        def _binary(self, name: str) -> Path: ...

        def feature_gates_argv(self) -> list[str]: ...

        def log_tail(self, lines: int = 40, components: Sequence[str] | None = None) -> str: ...

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
            *self.feature_gates_argv(),
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

    #: What the scheduler answers 200 on once it is ready (a peer may serve another path).
    scheduler_ready_path = "/readyz"

    def start_scheduler(self) -> None:
        """Write the scheduler configuration, start kube-scheduler, wait until
        ``scheduler_ready_path`` answers."""
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
                f"https://127.0.0.1:{self.scheduler_port}{self.scheduler_ready_path}",
                timeout=2.0,
                retries=False,
            )
            return response.status == 200

        with quiet_insecure_warnings():
            wait_until(
                ready,
                timeout=self.start_timeout,
                interval=0.2,
                what=f"the scheduler's {self.scheduler_ready_path}",
                on_timeout=lambda: self.log_tail(components=["kube-scheduler"]),
            )

    def stop_scheduler(self) -> None:
        self._processes["kube-scheduler"].stop()

    def restart_scheduler(
        self,
        extender: ExtenderConfig | str | Keep | None = KEEP,
        *,
        scheduler_config: Mapping[str, Any] | Keep | None = KEEP,
    ) -> None:
        """Restart kube-scheduler, optionally with another extender / extra config.

        ``extender=None`` removes the extender; leaving an argument out keeps it.
        """
        if not isinstance(extender, Keep):
            self.extender = as_extender(extender)
        if not isinstance(scheduler_config, Keep):
            self.scheduler_overrides = dict(scheduler_config or {})
        self.stop_scheduler()
        wait_port_released(self.scheduler_port)
        self.start_scheduler()

    @contextlib.contextmanager
    def using_extender(
        self,
        extender: ExtenderConfig | str | None,
        *,
        scheduler_config: Mapping[str, Any] | Keep | None = KEEP,
    ) -> Iterator[Self]:
        """Run kube-scheduler with ``extender`` (and ``scheduler_config``, if given) inside
        the block, then restore the previous configuration (e.g. around a test module that
        runs Muster)."""
        previous, previous_config = self.extender, self.scheduler_overrides
        self.restart_scheduler(extender, scheduler_config=scheduler_config)
        try:
            yield self
        finally:
            self.restart_scheduler(previous, scheduler_config=previous_config)

    @contextlib.contextmanager
    def using_stock_scheduler(self) -> Iterator[Self]:
        """Run the stock kube-scheduler of this plane's release (kube-scheduler's default
        configuration, no extender) in place of the configured scheduler (a peer's binary,
        or kube-scheduler with an extender) inside the block, then the configured one
        again: the same plane, alone and with what is measured (``bench.peers``)."""
        process = self._processes["kube-scheduler"]
        saved = (self.scheduler_binary, self.extender, self.scheduler_overrides, process.argv)
        self.stop_scheduler()
        wait_port_released(self.scheduler_port)
        self.scheduler_binary, self.extender, self.scheduler_overrides = None, None, {}
        process.argv = SchedulerMixin._scheduler_argv(self)  # not a peer's own flags
        try:
            self.start_scheduler()
            yield self
        finally:
            self.stop_scheduler()
            wait_port_released(self.scheduler_port)
            self.scheduler_binary, self.extender, self.scheduler_overrides, process.argv = saved
            self.start_scheduler()


@contextlib.contextmanager
def quiet_insecure_warnings() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        yield
