"""bench.dra builds a DRA twin of a cluster that the planner sees as the same cluster."""

from __future__ import annotations

import pytest

from bench.dra import main, measure


def test_the_dra_twin_gets_the_same_plan_as_the_extended_resource_cluster() -> None:
    # The twins charge every quota alike (measure checks it) and hold the same GPUs on
    # the same nodes, so the planner must choose the same victims for the same gang.
    result = measure(nodes=30, gang=4, repeat=2)
    assert result["outcome"]["dra"] == result["outcome"]["extended"]
    assert result["outcome"]["dra"].startswith("plan")
    assert result["same_victims"] is True


@pytest.mark.parametrize("argv", [["--repeat", "1"], ["--nodes", "0"], ["--gang", "0"]])
def test_bad_arguments_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "--" in capsys.readouterr().err
