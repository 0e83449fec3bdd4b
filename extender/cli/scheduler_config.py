"""``muster check-scheduler-config``: is kube-scheduler set up so Muster is in charge?

Muster enforces quotas, gang admission and reserved room through kube-scheduler's
``filterVerb``, and is the only preemption authority for the pods it governs only while
its ``preemptVerb`` guards kube-scheduler's in-tree preemption (the DefaultPreemption
plugin), or that plugin is off.  Nothing in the extender protocol tells Muster how
kube-scheduler is configured, so this module reads the admin's KubeSchedulerConfiguration
file and reports each setting that lets kube-scheduler schedule past Muster or preempt
without it, as a :class:`Finding`.  ``muster check-scheduler-config FILE`` prints them;
``muster serve --scheduler-config FILE`` logs them as warnings at start-up.  Pure
functions over the parsed document: no cluster access.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from base.errors import ManifestError
from extender.cli.manifests import InputError

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
DEFAULT_PREEMPTION = "DefaultPreemption"
GANG_SCHEDULING = "GangScheduling"
#: The newest minor release of Kubernetes Muster is tested on: what ``--kubernetes-version``
#: defaults to.
NEWEST_MINOR = 37
#: From this minor release on, GenericWorkload alone turns GangScheduling on, and
#: DefaultPreemption also preempts for pod groups, at ``podGroupPostFilter``.
GROUP_PREEMPTION_FROM = 37

_STRING_FIELDS = ("urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "bindVerb")
_BOOL_FIELDS = ("ignorable", "nodeCacheCapable", "enableHTTPS")
# The extension points whose plugin sets decide whether the plugins checked here run.
_CHECKED_POINTS = ("multiPoint", "postFilter", "permit", "podGroupPostFilter")


@dataclass(frozen=True)
class Finding:
    """A setting that takes authority from Muster: where (a dotted path) and why."""

    field: str
    message: str


def _describe(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _list(value: object, field: str) -> list[Any]:
    """A list field; absent or null is the empty list (as Go decodes it)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(field, f"expected a list, got {_describe(value)}")
    return value


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    """A mapping field; absent or null is the empty mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(field, f"expected a mapping, got {_describe(value)}")
    return value


def _validate_extender(entry: object, field: str) -> None:
    if not isinstance(entry, Mapping):
        raise ManifestError(field, f"expected a mapping, got {_describe(entry)}")
    for key in _STRING_FIELDS:
        if key in entry and not isinstance(entry[key], str):
            raise ManifestError(f"{field}.{key}", f"expected a string, got {_describe(entry[key])}")
    for key in _BOOL_FIELDS:
        if key in entry and not isinstance(entry[key], bool):
            raise ManifestError(
                f"{field}.{key}", f"expected true or false, got {_describe(entry[key])}"
            )
    resources = _named_entries(entry.get("managedResources"), f"{field}.managedResources")
    for index, resource in enumerate(resources):
        where = f"{field}.managedResources[{index}]"
        ignored = resource.get("ignoredByScheduler")
        if ignored is not None and not isinstance(ignored, bool):
            raise ManifestError(
                f"{where}.ignoredByScheduler", f"expected true or false, got {_describe(ignored)}"
            )


def _named_entries(value: object, field: str) -> list[Mapping[str, Any]]:
    """A list of mappings, each with a string ``name`` (plugins, managed resources)."""
    entries = _list(value, field)
    for index, entry in enumerate(entries):
        where = f"{field}[{index}]"
        if not isinstance(entry, Mapping):
            raise ManifestError(where, f"expected a mapping with a name, got {_describe(entry)}")
        if not isinstance(entry.get("name"), str):
            raise ManifestError(
                f"{where}.name", f"expected a string, got {_describe(entry.get('name'))}"
            )
    return entries


def _validate_profile(profile: object, field: str) -> None:
    if not isinstance(profile, Mapping):
        raise ManifestError(field, f"expected a mapping, got {_describe(profile)}")
    name = profile.get("schedulerName")
    if name is not None and not isinstance(name, str):
        raise ManifestError(f"{field}.schedulerName", f"expected a string, got {_describe(name)}")
    plugins = _mapping(profile.get("plugins"), f"{field}.plugins")
    for point in _CHECKED_POINTS:
        where = f"{field}.plugins.{point}"
        plugin_set = _mapping(plugins.get(point), where)
        for key in ("enabled", "disabled"):
            _named_entries(plugin_set.get(key), f"{where}.{key}")


def _validate(document: object) -> Mapping[str, Any]:
    if not isinstance(document, Mapping):
        raise ManifestError("", f"expected a {KIND} mapping, got {_describe(document)}")
    if document.get("apiVersion") != API_VERSION:
        raise ManifestError(
            "apiVersion", f"expected {API_VERSION!r}, got {_describe(document.get('apiVersion'))}"
        )
    if document.get("kind") != KIND:
        raise ManifestError("kind", f"expected {KIND!r}, got {_describe(document.get('kind'))}")
    for index, entry in enumerate(_list(document.get("extenders"), "extenders")):
        _validate_extender(entry, f"extenders[{index}]")
    for index, profile in enumerate(_list(document.get("profiles"), "profiles")):
        _validate_profile(profile, f"profiles[{index}]")
    return document


def load_scheduler_config(path: str) -> dict[str, Any]:
    """Read and shape-check a KubeSchedulerConfiguration file; raises :class:`InputError`.

    The message is one line naming the file and the field.
    """
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: cannot read: not UTF-8 text ({error.reason})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).replace("\n", " ")
        raise InputError(f"{path}: invalid YAML{line}: {problem}") from None
    try:
        _validate(document)
    except ManifestError as error:
        raise InputError(f"{path}: {error}") from None
    return dict(document)


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
        extenders = _list(_validate(document).get("extenders"), "extenders")
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
    where = f"extenders[{index}]"
    preempting = preempting_profiles(document)
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
