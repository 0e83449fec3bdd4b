"""What a benchmark's window cost, read before and after it: CPU and API traffic.

:class:`CpuMeter` reads ``/proc`` for the CPU seconds of named processes (etcd,
kube-apiserver, kube-scheduler, Muster and its event-loop thread, the benchmark itself)
and of everything else on the machine; :func:`process_cpu_seconds` reads one process.
:func:`apiserver_counters` reads kube-apiserver's request and watch-event counters from its
``/metrics``, and :func:`counter_delta` what grew between two reads.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import localcluster as lc

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds of a process (all its threads), or of one of its threads;
    0 if it is gone."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        stat = Path(path).read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def all_processes_cpu() -> dict[int, tuple[str, float]]:
    """Every process's command name and CPU seconds, from /proc."""
    out: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[int(entry.name)] = (comm, (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return out


class CpuMeter:
    """CPU seconds used by named processes, and by everything else, between two reads.

    ``others`` is the machine's busy time not used by the named processes (other users'
    work, kernel time not charged to a process); ``others_top`` names the biggest other
    processes that lived through the interval (short-lived ones are missed)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self._start = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
        self._machine = machine_busy_seconds()
        self._everyone = all_processes_cpu()

        #: Main threads counted apart (``<name>.main``): Muster's event loop.
        self._main = {
            name: process_cpu_seconds(pid, pid) for name, pid in pids.items() if name == "muster"
        }

    def add(self, name: str, pid: int) -> None:
        """Count a process started after the meter, from its start."""
        self.pids[name] = pid
        self._start[name] = 0.0

    def read(self) -> dict[str, float]:
        used = {
            name: process_cpu_seconds(pid) - self._start[name] for name, pid in self.pids.items()
        }
        busy = machine_busy_seconds() - self._machine
        used["others"] = max(0.0, busy - sum(used.values()))
        for name, start in self._main.items():
            pid = self.pids[name]
            used[f"{name}.main"] = process_cpu_seconds(pid, pid) - start
        return {name: round(value, 2) for name, value in used.items()}

    def others_top(self, count: int = 3) -> list[tuple[str, float]]:
        mine = set(self.pids.values())
        by_name: dict[str, float] = {}
        for pid, (comm, seconds) in all_processes_cpu().items():
            if pid in mine:
                continue
            before = self._everyone.get(pid)
            delta = seconds - before[1] if before is not None and before[0] == comm else seconds
            if delta > 0:
                by_name[comm] = by_name.get(comm, 0.0) + delta
        ranked = sorted(by_name.items(), key=lambda item: -item[1])[:count]
        return [(name, round(value, 2)) for name, value in ranked]


# --------------------------------------------------------------------------- API traffic


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def apiserver_counters(rest: lc.RestClient) -> Counter[str]:
    """kube-apiserver's request and watch-event counters from its ``/metrics``:
    ``"<verb> <resource>[/<subresource>]"`` → requests served (``apiserver_request_total``,
    all codes), ``"events <kind>"`` → watch events sent (``apiserver_watch_events_total``,
    one per event per watcher) and ``"event-bytes <kind>"`` → their encoded size."""
    status, text = rest.get_text("/metrics", timeout=10)
    counters: Counter[str] = Counter()
    if status != 200:
        return counters
    for line in text.splitlines():
        name, _, rest_of_line = line.partition("{")
        if name not in (
            "apiserver_request_total",
            "apiserver_watch_events_total",
            "apiserver_watch_events_sizes_sum",
        ):
            continue
        labels_text, _, value = rest_of_line.rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        if name == "apiserver_request_total":
            sub = labels.get("subresource", "")
            key = f"{labels.get('verb')} {labels.get('resource')}{'/' + sub if sub else ''}"
        elif name == "apiserver_watch_events_total":
            key = f"events {labels.get('kind') or labels.get('resource')}"
        else:
            key = f"event-bytes {labels.get('kind') or labels.get('resource')}"
        counters[key] += float(value)
    return counters


def counter_delta(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    """What grew between two reads of :func:`apiserver_counters`, biggest first."""
    grown = {key: int(after[key] - before.get(key, 0)) for key in after}
    return dict(sorted(((k, v) for k, v in grown.items() if v > 0), key=lambda kv: -kv[1]))
