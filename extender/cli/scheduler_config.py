"""``muster check-scheduler-config``: is kube-scheduler set up so Muster is in charge?

Muster enforces quotas, gang admission and reserved room through kube-scheduler's
``filterVerb``, and is the only preemption authority for the pods it governs only while
its ``preemptVerb`` guards kube-scheduler's in-tree preemption (the DefaultPreemption
plugin), or that plugin is off.  Nothing in the extender protocol tells Muster how
kube-scheduler is configured, so this module reads the admin's KubeSchedulerConfiguration
file and reports each setting that lets kube-scheduler schedule past Muster or preempt
without it, as a :class:`Finding`.  ``muster check-scheduler-config FILE`` prints them;
``muster serve --scheduler-config FILE`` logs them as warnings at start-up.  Pure
functions over the parsed document (read and shape-checked by
:mod:`extender.cli.scheduler_config_shape`): no cluster access.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from base.errors import ManifestError
from extender.cli.errors import InputError
from extender.cli.scheduler_config_shape import extender_entries, load_scheduler_config

DEFAULT_PREEMPTION = "DefaultPreemption"
GANG_SCHEDULING = "GangScheduling"
#: The newest minor release of Kubernetes Muster is tested on: what ``--kubernetes-version``
#: defaults to.
NEWEST_MINOR = 37
#: From this minor release on, GenericWorkload alone turns GangScheduling on, and
#: DefaultPreemption also preempts for pod groups, at ``podGroupPostFilter``.
GROUP_PREEMPTION_FROM = 37


@dataclass(frozen=True)
class Finding:
    """A setting that takes authority from Muster: where (a dotted path) and why."""

    field: str
    message: str


def _without_slash(url: str) -> str:
    return url[:-1] if url.endswith("/") else url


def muster_extender(
    document: Mapping[str, Any], url_prefix: str | None, *, flag: str = "--url-prefix"
) -> tuple[int, Mapping[str, Any]]:
    """Muster's ``extenders`` entry (its index and itself); raises :class:`InputError`.

    With ``url_prefix``, the entry with that ``urlPrefix`` (one trailing ``/`` aside);
    without, the only entry.  ``flag`` names the option that passes ``url_prefix``.
    """
    try:
        extenders = extender_entries(document)
    except ManifestError as error:
        raise InputError(str(error)) from None
    if not extenders:
        raise InputError(
            "extenders: no entries: kube-scheduler never calls Muster; add Muster's entry "
            "(manifests/scheduler-config.yaml is a sample)"
        )
    if url_prefix is None:
        if len(extenders) > 1:
            raise InputError(
                f"extenders: {len(extenders)} extenders: say which is Muster's with {flag}"
            )
        return 0, extenders[0]
    wanted = _without_slash(url_prefix)
    matches = [
        index
        for index, entry in enumerate(extenders)
        if isinstance(entry.get("urlPrefix"), str) and _without_slash(entry["urlPrefix"]) == wanted
    ]
    if not matches:
        known = ", ".join(repr(e.get("urlPrefix")) for e in extenders if "urlPrefix" in e)
        raise InputError(
            f"extenders: no entry has urlPrefix {url_prefix!r} (they have: {known or 'none'}); "
            f"pass Muster's urlPrefix to {flag}"
        )
    if len(matches) > 1:
        where = ", ".join(f"extenders[{index}]" for index in matches)
        raise InputError(f"extenders: {where} all have urlPrefix {url_prefix!r}: expected one")
    return matches[0], extenders[matches[0]]


def _plugin_names(plugin_set: Mapping[str, Any], key: str) -> set[str]:
    return {str(plugin["name"]) for plugin in plugin_set.get(key) or []}


def plugin_enabled(profile: Mapping[str, Any], plugin: str, point: str) -> bool:
    """Whether kube-scheduler runs ``plugin`` at ``point`` in this (shape-checked) profile,
    given that it is among the defaults there.

    The specific extension point's plugin set takes precedence over ``multiPoint``'s, and
    in each, an explicit ``enabled`` entry over ``disabled`` (by name or ``"*"``).
    """
    plugins = profile.get("plugins") or {}
    for where in (point, "multiPoint"):
        plugin_set = plugins.get(where) or {}
        if plugin in _plugin_names(plugin_set, "enabled"):
            return True
        if _plugin_names(plugin_set, "disabled") & {plugin, "*"}:
            return False
    return True


def default_preemption_enabled(profile: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler runs DefaultPreemption (per pod, at ``postFilter``)."""
    return plugin_enabled(profile, DEFAULT_PREEMPTION, "postFilter")


def _profile_names(document: Mapping[str, Any], plugin: str, point: str) -> list[str]:
    """The profiles running ``plugin`` at ``point``, as ``profiles[i] (schedulerName)``.

    No ``profiles`` (or an empty list) is kube-scheduler's one default profile.
    """
    profiles = document.get("profiles") or []
    if not profiles:
        return ["the default profile"]
    return [
        f"profiles[{index}] ({profile.get('schedulerName') or 'default-scheduler'})"
        for index, profile in enumerate(profiles)
        if plugin_enabled(profile, plugin, point)
    ]


def preempting_profiles(document: Mapping[str, Any]) -> list[str]:
    """The profiles in which DefaultPreemption runs per pod."""
    return _profile_names(document, DEFAULT_PREEMPTION, "postFilter")


def parse_feature_gates(text: str) -> dict[str, bool]:
    """``--feature-gates`` as kube-scheduler takes it (``A=true,B=false``); raises
    :class:`InputError` naming the bad entry."""
    gates: dict[str, bool] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = entry.partition("=")
        if not sep or not name or value.lower() not in ("true", "false"):
            raise InputError(f"--feature-gates: {entry!r} is not NAME=true or NAME=false")
        gates[name] = value.lower() == "true"
    return gates


def parse_kubernetes_version(text: str) -> int:
    """``1.37`` or ``v1.37.2`` → its minor release; raises :class:`InputError`."""
    parts = text.strip().lstrip("v").split(".")
    if len(parts) < 2 or parts[0] != "1" or not parts[1].isdigit():
        raise InputError(f"--kubernetes-version: {text!r} is not a version such as 1.37")
    return int(parts[1])


def _gang_api_findings(
    document: Mapping[str, Any], gates: Mapping[str, bool], minor: int
) -> list[Finding]:
    """What kube-scheduler's own gang scheduling (KEP-4671) would do past Muster with these
    feature gates on: with ``GenericWorkload`` it schedules a pod group's pods in a group
    cycle, and its in-tree gang plugin and group preemption act without Muster."""
    if not gates.get("GenericWorkload"):
        return []
    findings: list[Finding] = []
    waiting = _profile_names(document, GANG_SCHEDULING, "permit")
    if waiting and (minor >= GROUP_PREEMPTION_FROM or gates.get("GangScheduling")):
        findings.append(
            Finding(
                "profiles[].plugins.multiPoint.disabled",
                f"{GANG_SCHEDULING} runs in {', '.join(waiting)} with GenericWorkload on: "
                "kube-scheduler holds a pod group's pods at Permit and decides the gang "
                "itself, beside Muster; disable it (multiPoint.disabled: GangScheduling, as "
                "the chart does)",
            )
        )
    if minor >= GROUP_PREEMPTION_FROM:
        grouped = _profile_names(document, DEFAULT_PREEMPTION, "podGroupPostFilter")
        if grouped:
            findings.append(
                Finding(
                    "profiles[].plugins.podGroupPostFilter.disabled",
                    f"{DEFAULT_PREEMPTION} runs at podGroupPostFilter in "
                    f"{', '.join(grouped)} with GenericWorkload on: kube-scheduler's group "
                    "preemption evicts for a pod group without calling Muster's preempt "
                    "verb; disable it there (the chart: schedulerConfig.genericWorkload: true)",
                )
            )
    if gates.get("WorkloadAwarePreemption"):
        findings.append(
            Finding(
                "--feature-gates",
                "WorkloadAwarePreemption is on: kube-scheduler's group preemption evicts for "
                "a pod group without calling Muster's preempt verb; turn it off",
            )
        )
    return findings


def _entry_findings(entry: Mapping[str, Any], where: str, preempting: list[str]) -> list[Finding]:
    """What Muster's ``extenders`` entry (at ``where``) lets kube-scheduler do past Muster,
    given the profiles in which DefaultPreemption runs (``preempting``)."""
    findings: list[Finding] = []
    if not entry.get("filterVerb"):
        findings.append(
            Finding(
                f"{where}.filterVerb",
                "not set: kube-scheduler never asks Muster to filter nodes, so quotas, gang "
                "admission and reserved room are not enforced at all; set filterVerb: filter",
            )
        )
    if not entry.get("preemptVerb") and preempting:
        findings.append(
            Finding(
                f"{where}.preemptVerb",
                f"not set while DefaultPreemption is enabled in {', '.join(preempting)}: "
                "kube-scheduler's in-tree preemption runs unguarded: it deletes pods in "
                "Muster's quotas and gangs itself, without the soft-eviction mark, can take "
                "a quota below its min, and races Muster's own plans (two victims where one "
                "was needed); set preemptVerb: preempt, or disable DefaultPreemption in "
                "every profile",
            )
        )
    if entry.get("ignorable") is True:
        also = ", and preempts on its own" if preempting else ""
        findings.append(
            Finding(
                f"{where}.ignorable",
                "true: while Muster is unreachable kube-scheduler skips it, schedules pods "
                f"past their quotas and gangs{also}; set ignorable: false",
            )
        )
    resources = entry.get("managedResources") or []
    if resources:
        names = ", ".join(str(resource["name"]) for resource in resources)
        also = (
            ", and kube-scheduler preempts for them unguarded (their victims can be pods in "
            "Muster's quotas and gangs)"
            if preempting
            else ""
        )
        findings.append(
            Finding(
                f"{where}.managedResources",
                f"set ({names}): kube-scheduler calls Muster only for pods that request one "
                f"of these; other pods bypass Muster's quotas and gang admission{also}; "
                "remove managedResources",
            )
        )
    return findings


def check_scheduler_config(
    document: Mapping[str, Any],
    url_prefix: str | None = None,
    *,
    flag: str = "--url-prefix",
    feature_gates: Mapping[str, bool] | None = None,
    minor: int = NEWEST_MINOR,
) -> list[Finding]:
    """What in this KubeSchedulerConfiguration takes authority from Muster, in a stable order.

    ``feature_gates`` and ``minor``: kube-scheduler's ``--feature-gates`` and its release
    (the configuration file holds neither); with ``GenericWorkload`` on, its in-tree gang
    scheduling is checked too.  Raises :class:`InputError` for a malformed document or when
    Muster's ``extenders`` entry cannot be told (see :func:`muster_extender`).
    """
    index, entry = muster_extender(document, url_prefix, flag=flag)
    findings = _entry_findings(entry, f"extenders[{index}]", preempting_profiles(document))
    findings.extend(_gang_api_findings(document, feature_gates or {}, minor))
    return findings


def _load_and_check(
    path: str,
    url_prefix: str | None,
    flag: str,
    feature_gates: Mapping[str, bool] | None = None,
    minor: int = NEWEST_MINOR,
) -> tuple[dict[str, Any], list[Finding]]:
    document = load_scheduler_config(path)
    try:
        findings = check_scheduler_config(
            document, url_prefix, flag=flag, feature_gates=feature_gates, minor=minor
        )
    except InputError as error:
        raise InputError(f"{path}: {error}") from None
    return document, findings


def check_scheduler_config_file(
    path: str, url_prefix: str | None = None, *, flag: str = "--url-prefix"
) -> list[Finding]:
    """Load and check a file; every :class:`InputError` names the file."""
    return _load_and_check(path, url_prefix, flag)[1]


def _authority(document: Mapping[str, Any], url_prefix: str | None) -> str:
    """Why a configuration without findings leaves Muster the only preemption authority."""
    index, entry = muster_extender(document, url_prefix)
    where = f"extenders[{index}]: " if len(document.get("extenders") or []) > 1 else ""
    if entry.get("preemptVerb"):
        return f"{where}filter and preempt verbs set"
    return f"{where}filter verb set, DefaultPreemption disabled in every profile"


def run(
    path: str,
    url_prefix: str | None,
    feature_gates: str = "",
    kubernetes_version: str = f"1.{NEWEST_MINOR}",
) -> int:
    """The ``check-scheduler-config`` command: 0 fine, 1 findings, 2 bad input."""
    try:
        gates = parse_feature_gates(feature_gates)
        minor = parse_kubernetes_version(kubernetes_version)
        document, findings = _load_and_check(path, url_prefix, "--url-prefix", gates, minor)
    except InputError as error:
        print(f"muster check-scheduler-config: {error}", file=sys.stderr)
        return 2
    for finding in findings:
        print(f"muster check-scheduler-config: {path}: {finding.field}: {finding.message}")
    if findings:
        return 1
    print(f"{path}: Muster is the only preemption authority ({_authority(document, url_prefix)})")
    return 0
