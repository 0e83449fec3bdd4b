"""``muster check-scheduler-config`` and ``muster serve --scheduler-config``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli import serve
from extender.cli.errors import InputError
from extender.cli.main import main
from extender.cli.scheduler_config import Finding, check_scheduler_config, muster_extender
from extender.cli.scheduler_config_shape import load_scheduler_config

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "scheduler-config.yaml"
SNAPSHOT = ROOT / "tests" / "scenarios" / "gang-fits-after-eviction.yaml"
#: The Service URL the chart renders (HTTPS by default), the sample's urlPrefix.
MUSTER = "https://muster.muster-system.svc:8888"
PREFIX = "muster check-scheduler-config: "


def config(**extender: Any) -> dict[str, Any]:
    """A minimal configuration whose only extender is Muster with filter and preempt."""
    entry: dict[str, Any] = {"urlPrefix": MUSTER, "filterVerb": "filter", "preemptVerb": "preempt"}
    for key, value in extender.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "extenders": [entry],
    }


def write(tmp_path: Path, document: Any, name: str = "sched.yaml") -> str:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    return str(path)


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check-scheduler-config", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def disabled_in(point: str, name: str = "DefaultPreemption") -> dict[str, Any]:
    return {"plugins": {point: {"disabled": [{"name": name}]}}}


# --- the sample and the OK line ---------------------------------------------------------


def test_sample_config_has_no_findings(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_scheduler_config(load_scheduler_config(str(SAMPLE))) == []
    code, out, err = check(capsys, str(SAMPLE))
    assert code == 0
    assert err == ""
    assert out == (
        f"{SAMPLE}: Muster is the only preemption authority (filter and preempt verbs set)\n"
    )


def test_sample_config_passes_when_named_by_url_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = check(capsys, str(SAMPLE), "--url-prefix", MUSTER + "/")
    assert code == 0
    assert "only preemption authority" in out


def test_tls_config_inline_or_by_files_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chart's two shapes of kube-scheduler's ``tlsConfig``: the CA, client certificate
    and key inline (base64, as the chart's Secret carries them), or files on its host."""
    inline = {"serverName": "muster.muster-system.svc", "caData": "Y2E=", "certData": "Y2VydA=="}
    files = {"caFile": "/pki/ca.crt", "certFile": "/pki/client.crt", "keyFile": "/pki/client.key"}
    for tls in ({**inline, "keyData": "a2V5"}, files):
        path = write(tmp_path, config(enableHTTPS=True, tlsConfig=tls))
        code, out, err = check(capsys, path)
        assert (code, err) == (0, ""), out
        assert "only preemption authority" in out


# --- findings a-d ------------------------------------------------------------------------


def test_no_filter_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, config(filterVerb=None))
    code, out, err = check(capsys, path)
    assert code == 1
    assert err == ""
    lines = out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{PREFIX}{path}: extenders[0].filterVerb: not set")
    for words in ("quotas", "gang admission", "reserved room", "not enforced at all"):
        assert words in lines[0]


def test_empty_filter_verb_counts_as_unset(tmp_path: Path) -> None:
    findings = check_scheduler_config(load_scheduler_config(write(tmp_path, config(filterVerb=""))))
    assert [f.field for f in findings] == ["extenders[0].filterVerb"]


def test_no_preempt_verb_with_default_preemption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, config(preemptVerb=None))
    code, out, _ = check(capsys, path)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{PREFIX}{path}: extenders[0].preemptVerb: not set")
    for words in (
        "the default profile",
        "in-tree preemption runs unguarded",
        "deletes pods in Muster's quotas and gangs",
        "without the soft-eviction mark",
        "below its min",
        "two victims where one was needed",
    ):
        assert words in lines[0]


def test_ignorable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, config(ignorable=True))
    code, out, _ = check(capsys, path)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{PREFIX}{path}: extenders[0].ignorable: true")
    assert "unreachable" in lines[0]
    assert "past their quotas" in lines[0]
    assert "preempts on its own" in lines[0]


def test_ignorable_false_is_fine(tmp_path: Path) -> None:
    document = load_scheduler_config(write(tmp_path, config(ignorable=False)))
    assert check_scheduler_config(document) == []


def test_managed_resources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    resources = [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}, {"name": "example/fpga"}]
    path = write(tmp_path, config(managedResources=resources))
    code, out, _ = check(capsys, path)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{PREFIX}{path}: extenders[0].managedResources: ")
    assert "nvidia.com/gpu, example/fpga" in lines[0]
    assert "other pods bypass Muster's quotas" in lines[0]
    assert "preempts for them unguarded" in lines[0]


def test_empty_managed_resources_is_fine(tmp_path: Path) -> None:
    document = load_scheduler_config(write(tmp_path, config(managedResources=[])))
    assert check_scheduler_config(document) == []


def test_bind_verb_is_no_finding(tmp_path: Path) -> None:
    document = load_scheduler_config(write(tmp_path, config(bindVerb="bind")))
    assert check_scheduler_config(document) == []


def test_findings_come_in_a_stable_order(tmp_path: Path) -> None:
    document = config(
        filterVerb=None,
        preemptVerb=None,
        ignorable=True,
        managedResources=[{"name": "nvidia.com/gpu"}],
    )
    findings = check_scheduler_config(load_scheduler_config(write(tmp_path, document)))
    assert [f.field for f in findings] == [
        "extenders[0].filterVerb",
        "extenders[0].preemptVerb",
        "extenders[0].ignorable",
        "extenders[0].managedResources",
    ]
    assert all(isinstance(f, Finding) for f in findings)


# --- DefaultPreemption disabled ---------------------------------------------------------


@pytest.mark.parametrize(
    "profile",
    [
        disabled_in("postFilter"),
        disabled_in("multiPoint"),
        disabled_in("postFilter", "*"),
        disabled_in("multiPoint", "*"),
    ],
    ids=["postFilter", "multiPoint", "postFilter-star", "multiPoint-star"],
)
def test_default_preemption_disabled_everywhere_needs_no_preempt_verb(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], profile: dict[str, Any]
) -> None:
    document = config(preemptVerb=None)
    document["profiles"] = [
        {"schedulerName": "default-scheduler", **profile},
        {"schedulerName": "batch", **profile},
    ]
    code, out, _ = check(capsys, write(tmp_path, document))
    assert code == 0
    assert "DefaultPreemption disabled in every profile" in out


def test_default_preemption_disabled_in_one_profile_of_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = config(preemptVerb=None)
    document["profiles"] = [
        {"schedulerName": "default-scheduler", **disabled_in("postFilter")},
        {"schedulerName": "batch"},
    ]
    code, out, _ = check(capsys, write(tmp_path, document))
    assert code == 1
    assert "extenders[0].preemptVerb: not set" in out
    assert "profiles[1] (batch)" in out
    assert "profiles[0]" not in out


def test_default_preemption_re_enabled_in_post_filter(tmp_path: Path) -> None:
    document = config(preemptVerb=None)
    profile = disabled_in("multiPoint", "*")
    profile["plugins"]["postFilter"] = {"enabled": [{"name": "DefaultPreemption"}]}
    document["profiles"] = [profile]
    findings = check_scheduler_config(load_scheduler_config(write(tmp_path, document)))
    assert [f.field for f in findings] == ["extenders[0].preemptVerb"]


def test_other_plugins_disabled_do_not_count(tmp_path: Path) -> None:
    document = config(preemptVerb=None)
    document["profiles"] = [disabled_in("postFilter", "SomethingElse")]
    findings = check_scheduler_config(load_scheduler_config(write(tmp_path, document)))
    assert [f.field for f in findings] == ["extenders[0].preemptVerb"]


def test_empty_profiles_list_is_the_default_profile(tmp_path: Path) -> None:
    document = config(preemptVerb=None)
    document["profiles"] = []
    findings = check_scheduler_config(load_scheduler_config(write(tmp_path, document)))
    assert [f.field for f in findings] == ["extenders[0].preemptVerb"]
    assert "the default profile" in findings[0].message


def test_messages_drop_preemption_when_it_is_off(tmp_path: Path) -> None:
    document = config(ignorable=True, managedResources=[{"name": "nvidia.com/gpu"}])
    document["profiles"] = [disabled_in("postFilter")]
    findings = check_scheduler_config(load_scheduler_config(write(tmp_path, document)))
    assert [f.field for f in findings] == [
        "extenders[0].ignorable",
        "extenders[0].managedResources",
    ]
    assert all("preempt" not in f.message for f in findings)


# --- choosing Muster's entry ------------------------------------------------------------


def several_extenders() -> dict[str, Any]:
    document = config()
    document["extenders"] = [
        {"urlPrefix": "http://other:1234", "filterVerb": "filter"},
        {"urlPrefix": MUSTER + "/", "filterVerb": "filter", "preemptVerb": "preempt"},
        {"urlPrefix": "http://third:99", "prioritizeVerb": "score", "weight": 1},
    ]
    return document


def test_url_prefix_selects_musters_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, several_extenders())
    code, out, _ = check(capsys, path, "--url-prefix", MUSTER)
    assert code == 0
    assert "(extenders[1]: filter and preempt verbs set)" in out
    code, out, _ = check(capsys, path, "--url-prefix", "http://other:1234/")
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{PREFIX}{path}: extenders[0].preemptVerb: not set")
    index, entry = muster_extender(load_scheduler_config(path), "http://third:99")
    assert (index, entry["prioritizeVerb"]) == (2, "score")


def test_several_extenders_without_url_prefix_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, several_extenders())
    code, out, err = check(capsys, path)
    assert code == 2
    assert out == ""
    assert err.startswith(f"{PREFIX}{path}: extenders: 3 extenders: ")
    assert "--url-prefix" in err


def test_unknown_url_prefix_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, several_extenders())
    code, out, err = check(capsys, path, "--url-prefix", "http://nowhere")
    assert (code, out) == (2, "")
    assert "no entry has urlPrefix 'http://nowhere'" in err
    assert "'http://other:1234'" in err


def test_no_extenders_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = config()
    del document["extenders"]
    code, out, err = check(capsys, write(tmp_path, document))
    assert (code, out) == (2, "")
    assert "extenders: no entries" in err
    with pytest.raises(InputError, match="never calls Muster"):
        check_scheduler_config(document)


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("kind: [unclosed\n", "invalid YAML at line"),
        ("- a list\n", "expected a KubeSchedulerConfiguration mapping"),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
            "apiVersion: expected 'kubescheduler.config.k8s.io/v1'",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeProxyConfiguration\n",
            "kind: expected 'KubeSchedulerConfiguration', got 'KubeProxyConfiguration'",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "extenders: {urlPrefix: x}\n",
            "extenders: expected a list, got a mapping",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "extenders: [x]\n",
            "extenders[0]: expected a mapping, got 'x'",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "extenders: [{urlPrefix: x, filterVerb: filter, preemptVerb: 3}]\n",
            "extenders[0].preemptVerb: expected a string, got 3",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "extenders: [{urlPrefix: x, filterVerb: filter, ignorable: 'yes'}]\n",
            "extenders[0].ignorable: expected true or false, got 'yes'",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "extenders: [{urlPrefix: x, managedResources: [nvidia.com/gpu]}]\n",
            "extenders[0].managedResources[0]: expected a mapping with a name",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "extenders: [{urlPrefix: x, managedResources: [{name: 7}]}]\n",
            "extenders[0].managedResources[0].name: expected a string, got 7",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "profiles: {schedulerName: x}\n",
            "profiles: expected a list, got a mapping",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            "profiles: [{plugins: {postFilter: {disabled: DefaultPreemption}}}]\n",
            "profiles[0].plugins.postFilter.disabled: expected a list, got 'DefaultPreemption'",
        ),
    ],
    ids=[
        "bad-yaml",
        "not-a-mapping",
        "old-api-version",
        "wrong-kind",
        "extenders-not-a-list",
        "extender-not-a-mapping",
        "preempt-verb-3",
        "ignorable-yes",
        "managed-resource-not-a-mapping",
        "managed-resource-name-7",
        "profiles-not-a-list",
        "plugin-set-not-a-list",
    ],
)
def test_bad_input_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str
) -> None:
    path = write(tmp_path, text, "bad.yaml")
    code, out, err = check(capsys, path)
    assert code == 2
    assert out == ""
    assert err.startswith(f"{PREFIX}{path}: ")
    assert field in err
    assert err.count("\n") == 1


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "missing.yaml")
    code, out, err = check(capsys, path)
    assert (code, out) == (2, "")
    assert err == f"{PREFIX}{path}: cannot read: No such file or directory\n"


# --- serve --scheduler-config -----------------------------------------------------------


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record the apps uvicorn would serve instead of serving them."""
    calls: list[Any] = []

    class Recorder:
        def __init__(self, config: Any) -> None:
            self.config = config
            self.started = False

        def run(self, sockets: Any = None) -> None:
            calls.append(self.config.app)
            self.started = True

    monkeypatch.setattr(serve.uvicorn, "Server", Recorder)
    # Serving a snapshot freezes the heap: not the test worker's.
    monkeypatch.setattr(serve, "freeze_long_lived", lambda: 0)
    return calls


def test_serve_rejects_a_bad_scheduler_config_before_anything_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_server: list[Any]
) -> None:
    bad = write(tmp_path, config(ignorable="yes"), "bad.yaml")
    # A TLS mistake and a missing snapshot would each fail too: the scheduler config is first.
    code = main(
        ["serve", "--scheduler-config", bad, "--snapshot", "x", "--tls-cert", "only-cert.pem"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert no_server == []
    assert (
        err == f"muster serve: {bad}: extenders[0].ignorable: expected true or false, got 'yes'\n"
    )


def test_serve_names_its_own_flag_for_several_extenders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_server: list[Any]
) -> None:
    path = write(tmp_path, several_extenders())
    code = main(["serve", "--scheduler-config", path, "--snapshot", str(SNAPSHOT)])
    err = capsys.readouterr().err
    assert code == 2
    assert no_server == []
    assert "with --scheduler-url-prefix" in err


def test_serve_warns_about_findings_and_starts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    no_server: list[Any],
) -> None:
    path = write(tmp_path, several_extenders())
    with caplog.at_level(logging.WARNING, logger="extender.cli.serve"):
        code = main(
            [
                "serve",
                "--scheduler-config",
                path,
                "--scheduler-url-prefix",
                "http://other:1234",
                "--snapshot",
                str(SNAPSHOT),
            ]
        )
    err = capsys.readouterr().err
    assert code == 0
    assert len(no_server) == 1
    assert "muster serve: warning: extenders[0].preemptVerb: not set" in err
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("extenders[0].preemptVerb: not set") for m in warnings)


def test_serve_with_the_sample_config_is_quiet(
    capsys: pytest.CaptureFixture[str], no_server: list[Any]
) -> None:
    code = main(["serve", "--scheduler-config", str(SAMPLE), "--snapshot", str(SNAPSHOT)])
    err = capsys.readouterr().err
    assert code == 0
    assert len(no_server) == 1
    assert "warning" not in err


# --- Kubernetes' own gang scheduling (GenericWorkload, issue 26) -------------------------
#
# Expectations from kube-scheduler's source (v1.36.3, v1.37.2): with GenericWorkload on,
# GangScheduling is a default plugin in 1.37 (in 1.36 only with its own GangScheduling
# gate), and in 1.37 DefaultPreemption also runs at podGroupPostFilter, the group
# preemption that never calls an extender's preempt verb; WorkloadAwarePreemption (1.36)
# is that group preemption too.

GANG_OFF = {"name": "GangScheduling"}


def gang_config(*points: tuple[str, str]) -> dict[str, Any]:
    """Muster's entry and one profile with these (point, plugin) disabled."""
    document = config()
    plugins: dict[str, Any] = {}
    for point, name in points:
        plugins.setdefault(point, {"disabled": []})["disabled"].append({"name": name})
    document["profiles"] = [{"schedulerName": "default-scheduler", "plugins": plugins}]
    return document


def test_without_generic_workload_the_gang_plugins_are_not_checked() -> None:
    assert check_scheduler_config(gang_config()) == []


def test_generic_workload_on_1_37_needs_gang_scheduling_and_group_preemption_off() -> None:
    gates = {"GenericWorkload": True}
    fields = [f.field for f in check_scheduler_config(gang_config(), feature_gates=gates)]
    assert fields == [
        "profiles[].plugins.multiPoint.disabled",
        "profiles[].plugins.podGroupPostFilter.disabled",
    ]
    fixed = gang_config(
        ("multiPoint", "GangScheduling"), ("podGroupPostFilter", "DefaultPreemption")
    )
    assert check_scheduler_config(fixed, feature_gates=gates) == []


def test_generic_workload_on_1_36_checks_its_own_gates() -> None:
    # 1.36: no podGroupPostFilter; GangScheduling only with its gate; WorkloadAwarePreemption
    # is the group preemption.
    plain = gang_config()
    assert check_scheduler_config(plain, feature_gates={"GenericWorkload": True}, minor=36) == []
    gates = {"GenericWorkload": True, "GangScheduling": True, "WorkloadAwarePreemption": True}
    fields = [f.field for f in check_scheduler_config(plain, feature_gates=gates, minor=36)]
    assert fields == ["profiles[].plugins.multiPoint.disabled", "--feature-gates"]


def test_the_sample_config_and_the_chart_switch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The sample turns GangScheduling off; on 1.37 with the gate, group preemption remains.
    code, out, _ = check(capsys, str(SAMPLE), "--feature-gates", "GenericWorkload=true")
    assert code == 1 and "podGroupPostFilter" in out and "GangScheduling" not in out
    code, out, _ = check(
        capsys, str(SAMPLE), "--feature-gates=GenericWorkload=true", "--kubernetes-version=1.36"
    )
    assert code == 0, out


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--feature-gates", "GenericWorkload=yes"], "--feature-gates: 'GenericWorkload=yes'"),
        (["--feature-gates", "=true"], "--feature-gates: '=true'"),
        (["--kubernetes-version", "2.1"], "--kubernetes-version: '2.1'"),
        (["--kubernetes-version", "v1.x"], "--kubernetes-version: 'v1.x'"),
    ],
)
def test_bad_gates_or_versions_exit_2_naming_them(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    code, out, err = check(capsys, str(SAMPLE), *argv)
    assert code == 2 and out == "" and named in err, err
