"""The watch stream's line splitting: events come back whole however the bytes are chunked."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from extender.kube.client import stream_lines

events = st.lists(
    st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=20), max_size=4),
    min_size=0,
    max_size=6,
)


@given(events=events, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_events_survive_any_chunking(events: list[dict[str, str]], cuts: list[int]) -> None:
    stream = b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in events)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in itertools.pairwise(points)]
    assert [json.loads(line) for line in stream_lines(chunks)] == events


def test_a_last_line_without_newline_is_kept() -> None:
    assert list(stream_lines([b'{"a": 1}\n{"b"', b": 2}"])) == [b'{"a": 1}', b'{"b": 2}']
