"""Binding pods for kube-scheduler's ``bind`` verb: a ``Binding`` through the API."""

from __future__ import annotations

from extender.kube.client import ApiError, KubeClient
from extender.service import BindError


class KubeBinder:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.client.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body)
        except ApiError as error:
            raise BindError(f"binding {namespace}/{name} to {node}: {error}") from None
