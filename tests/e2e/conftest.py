"""Fixtures for the e2e tier: a real etcd + kube-apiserver + kube-scheduler.

* ``k8s_bin_dir`` (session): runs ``hack/build-k8s.sh`` (reuses cached binaries, builds
  them otherwise). A failed build is an ERROR, never a skip: the e2e tier must run.
* ``control_plane`` (session): one ``localcluster.ControlPlane`` for the whole session,
  with the kubelet emulator and the CRDs from ``manifests/crds`` (and, test-only,
  ``tests/e2e/crds``: Volcano's PodGroup); its workdir (logs,
  kubeconfigs) is under pytest's ``tmp_path_factory`` so it survives the run.
* ``cluster`` (function): an ``e2e_support.Cluster`` bound to a fresh namespace; it creates
  nodes and pods and waits for conditions, and at teardown force-deletes its pods and
  deletes its nodes, so tests do not see each other's nodes.

When a test fails, the tail of every component's log is attached to its report.
Every test in this directory gets the ``e2e`` marker.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from e2e_support import Cluster

import localcluster as lc

E2E_DIR = Path(__file__).resolve().parent
_PLANE: lc.ControlPlane | None = None
_NAMESPACE_SERIAL = itertools.count(1)


# --------------------------------------------------------------------------- hooks


#: ``make test`` runs the e2e tier in two halves at once (pytest-xdist's ``loadgroup``: one
#: worker and one control plane each; most of an e2e test is waiting on the cluster).
#: These modules are the first half, about as long as the rest.
FIRST_HALF = frozenset({"test_jobs.py", "test_decisions_follow.py", "test_requeue.py"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.e2e)
            half = "e2e-1" if Path(item.path).name in FIRST_HALF else "e2e-2"
            item.add_marker(pytest.mark.xdist_group(half))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.failed and _PLANE is not None and E2E_DIR in Path(item.path).resolve().parents:
        with contextlib.suppress(Exception):
            report.sections.append(("control plane logs (tail)", _PLANE.log_tail(60)))
            report.sections.append(("control plane workdir", str(_PLANE.workdir)))
    return report


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def k8s_bin_dir(request: pytest.FixtureRequest) -> Path:
    """The directory with etcd, kube-apiserver and kube-scheduler (built if needed)."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    # Show the build's progress (a cold build takes minutes) instead of capturing it.
    quiet = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with quiet:
        return lc.ensure_binaries()


@pytest.fixture(scope="session")
def control_plane(
    k8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[lc.ControlPlane]:
    global _PLANE
    plane = lc.ControlPlane(bin_dir=k8s_bin_dir, workdir=tmp_path_factory.mktemp("k8s"))
    _PLANE = plane
    try:
        plane.start()
        plane.install_crds(E2E_DIR / "crds")  # APIs the ecosystem's gangs use (test-only)
        yield plane
    finally:
        plane.stop()
        _PLANE = None


@pytest.fixture
def cluster(control_plane: lc.ControlPlane, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    namespace = f"e2e-{next(_NAMESPACE_SERIAL)}-{name}".rstrip("-")
    helper = Cluster(control_plane, namespace)
    control_plane.create_namespace(namespace)
    yield helper
    helper.cleanup()
