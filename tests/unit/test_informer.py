"""The informer's list: page by page the first time, diffed afterwards; what it keeps."""

from __future__ import annotations

from typing import Any, cast

import pytest

from extender.kube.client import ApiError, KubeClient
from extender.kube.decoding import LEAN, WHOLE
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
    added = [e for e in events if not e.startswith("page")]
    assert added == [f"ADDED p{i}" for i in range(5)]
    # Each page is asked for before its pods are handed on, and the next one while they
    # are (in another thread): one page ahead, never two.
    assert [e for e in events if e.startswith("page")] == ["page 0", "page 2", "page 4"]
    for start in (0, 2, 4):
        assert events.index(f"page {start}") < events.index(f"ADDED p{start}")
    assert events.index("page 4") > events.index("ADDED p1")
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


class FailingClient(PagedClient):
    """Pages as :class:`PagedClient`, then ``status`` for the page at ``fail_at``."""

    def __init__(self, pods: list[dict[str, Any]], fail_at: int, status: int) -> None:
        super().__init__(pods, [])
        self.fail_at, self.status = fail_at, status

    def request(
        self, method: str, path: str, params: dict[str, str] | None = None, **_: Any
    ) -> Any:
        if int((params or {}).get("continue", "0")) == self.fail_at:
            raise ApiError(self.status, "no")
        return super().request(method, path, params)


def test_a_resource_gone_mid_list_is_not_installed_and_what_was_known_is_deleted() -> None:
    events: list[str] = []
    client = PagedClient([pod(f"p{i}", "1") for i in range(3)], [])
    informer = Informer(
        cast(KubeClient, client),
        "/apis/x/v1/things",
        lambda kind, obj: events.append(f"{kind} {obj['metadata']['name']}"),
    )
    informer._relist()
    events.clear()
    informer.client = cast(KubeClient, FailingClient(client.pods, fail_at=2, status=404))
    assert informer._relist() is None
    assert not informer.installed and not informer._store
    assert sorted(events) == ["DELETED p0", "DELETED p1", "DELETED p2"]


def test_an_expired_continue_token_ends_the_list_with_its_error() -> None:
    client = FailingClient([pod(f"p{i}", "1") for i in range(5)], fail_at=4, status=410)
    handed: list[str] = []
    informer = Informer(
        cast(KubeClient, client), "/api/v1/pods", lambda kind, obj: handed.append(kind)
    )
    with pytest.raises(ApiError) as raised:
        informer._relist()
    assert raised.value.status == 410 and handed == ["ADDED"] * 4
    assert not informer.synced.is_set()


def test_an_informer_asks_its_pages_with_its_decoding() -> None:
    seen: list[Any] = []

    class Recording(PagedClient):
        def request(
            self, method: str, path: str, params: dict[str, str] | None = None, **options: Any
        ) -> Any:
            seen.append(options.get("decode"))
            return super().request(method, path, params)

    client = Recording([pod("p0", "1")], [])
    Informer(cast(KubeClient, client), "/api/v1/pods", lambda k, o: None)._relist()
    Informer(cast(KubeClient, client), "/api/v1/pods", lambda k, o: None, decoding=LEAN)._relist()
    assert seen == [WHOLE.page, LEAN.page]
