"""Cluster objects the harness creates for tests: namespaces, nodes, CRDs, service accounts.

``ObjectsMixin`` is the part of ``ControlPlane`` that writes them through its admin
``RestClient`` (a Ready node is a Node plus the status a kubelet would report).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import yaml

from .common import REPO_ROOT, Json, timestamp
from .kubelet import KubeletEmulator
from .pki import Pki, write_kubeconfig
from .rest import ApiError, RestClient
from .waiting import wait_until

DEFAULT_CRDS_DIR = REPO_ROOT / "manifests" / "crds"
RBAC_MANIFEST = REPO_ROOT / "manifests" / "rbac.yaml"
#: Where the kinds of the RBAC manifest are created.
_RBAC_COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
}


class ObjectsMixin:
    """``ControlPlane``'s methods that create objects (see ``ControlPlane`` for the attributes)."""

    workdir: Path
    server: str
    kubelet: KubeletEmulator | None
    _node_serial: int
    _pki: Pki | None

    if TYPE_CHECKING:

        @property
        def rest(self) -> RestClient: ...

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
        now = timestamp()
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

    def muster_kubeconfigs(self, manifest: Path = RBAC_MANIFEST) -> dict[str, Path]:
        """Apply Muster's RBAC manifest (objects already there are kept) and return
        kubeconfigs with the ``muster`` and ``muster-evictor`` ServiceAccounts' tokens:
        Muster and its evictor then run with exactly the access the manifest grants."""
        for obj in yaml.safe_load_all(manifest.read_text()):
            namespace = obj["metadata"].get("namespace")
            path = _RBAC_COLLECTIONS[obj["kind"]].format(namespace=namespace)
            try:
                self.rest.request("POST", path, obj)
            except ApiError as exc:
                if exc.status != 409:
                    raise
        return {
            name: self.service_account_kubeconfig("muster-system", name)
            for name in ("muster", "muster-evictor")
        }

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
        return write_kubeconfig(
            target,
            server=self.server,
            ca_pem=self._pki.ca_pem,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=token,
        )
