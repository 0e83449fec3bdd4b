"""The informer's list: page by page the first time, diffed afterwards; what it keeps."""

from __future__ import annotations

from typing import Any, cast

from extender.kube.client import KubeClient
from extender.kube.informer import Informer


def pod(name: str, version: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"u-{name}",
            "resourceVersion": version,
        },
        "spec": {"containers": [{"name": "c", "image": "big" * 100}]},
    }


class PagedClient:
    """Answers a list with ``pages`` (two items each), recording the order of events."""

    def __init__(self, pods: list[dict[str, Any]], events: list[str]) -> None:
        self.pods = pods
        self.events = events

    def request(
        self, method: str, path: str, params: dict[str, str] | None = None, **_: Any
    ) -> Any:
        start = int((params or {}).get("continue", "0"))
        self.events.append(f"page {start}")
        chunk = self.pods[start : start + 2]
        more = start + 2 < len(self.pods)
        metadata = {"resourceVersion": "100", **({"continue": str(start + 2)} if more else {})}
        return {"items": chunk, "metadata": metadata}


def test_the_first_list_is_handed_on_page_by_page_and_a_relist_is_diffed() -> None:
    events: list[str] = []
    client = PagedClient([pod(f"p{i}", "1") for i in range(5)], events)
    informer = Informer(
        cast(KubeClient, client),
        "/api/v1/pods",
        lambda kind, obj: events.append(f"{kind} {obj['metadata']['name']}"),
        keep_objects=False,
    )
    assert informer._relist() == "100"
    assert events == [
        "page 0",
        "ADDED p0",
        "ADDED p1",
        "page 2",
        "ADDED p2",
        "ADDED p3",
        "page 4",
        "ADDED p4",
    ]
    assert informer.synced.is_set()
    # Only identity and version are kept.
    assert informer._store["ns/p0"] == {
        "metadata": {"name": "p0", "namespace": "ns", "uid": "u-p0", "resourceVersion": "1"}
    }
    # A relist: p1 changed, p3 gone, p5 new; deletions first, then the changes.
    events.clear()
    client.pods = [pod("p0", "1"), pod("p1", "2"), pod("p2", "1"), pod("p4", "1"), pod("p5", "1")]
    informer._relist()
    assert [e for e in events if not e.startswith("page")] == [
        "DELETED p3",
        "MODIFIED p1",
        "ADDED p5",
    ]
    assert set(informer._store) == {"ns/p0", "ns/p1", "ns/p2", "ns/p4", "ns/p5"}


def test_a_pod_re_created_under_its_name_between_lists_is_deleted_then_added() -> None:
    # p0 was deleted and created again (a new UID) while no watch ran: the relist reports
    # the old one DELETED (its reservation and room must not pass to the new pod) and the
    # new one ADDED.
    events: list[str] = []
    client = PagedClient([pod("p0", "1")], events)
    informer = Informer(
        cast(KubeClient, client),
        "/api/v1/pods",
        lambda kind, obj: events.append(f"{kind} {obj['metadata']['uid']}"),
        keep_objects=False,
    )
    informer._relist()
    events.clear()
    again = pod("p0", "7")
    again["metadata"]["uid"] = "u-p0-new"
    client.pods = [again]
    informer._relist()
    assert [e for e in events if not e.startswith("page")] == ["DELETED u-p0", "ADDED u-p0-new"]


def test_an_informer_keeps_whole_objects_by_default() -> None:
    client = PagedClient([pod("p0", "1")], [])
    informer = Informer(cast(KubeClient, client), "/api/v1/pods", lambda kind, obj: None)
    informer._relist()
    assert informer._store["ns/p0"] == pod("p0", "1")
