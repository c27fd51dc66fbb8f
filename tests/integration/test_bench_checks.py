"""The benchmark's own checks (bench/flowbench): a window where flowfs's usage report
counts more requests than the counting proxy saw is explained only by requests the mount
cancelled, never by bytes or by a kind of request the proxy saw more of."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from flowbench.workloads import cancelled_unseen  # noqa: E402

MINE = ({"LIST": 195, "GET*": 48}, 1000, 2000)
SEEN = ({"LIST": 194, "GET*": 48}, 1000, 2000)


def test_a_request_the_proxy_missed_is_explained_by_a_cancelled_one():
    assert cancelled_unseen(MINE, SEEN, cancelled=1) == 1
    assert cancelled_unseen(MINE, SEEN, cancelled=3) == 1


def test_without_enough_cancellations_or_with_other_differences_it_is_not_explained():
    assert cancelled_unseen(MINE, SEEN, cancelled=0) is None
    assert cancelled_unseen(MINE, MINE, cancelled=2) is None  # nothing to explain
    assert cancelled_unseen(SEEN, MINE, cancelled=5) is None  # the proxy saw more
    more_bytes = (MINE[0], 1001, 2000)
    assert cancelled_unseen(more_bytes, SEEN, cancelled=5) is None
    other_kind = ({"LIST": 195, "GET*": 48}, 1000, 2000), ({"LIST": 194, "PUT": 1}, 1000, 2000)
    assert cancelled_unseen(*other_kind, cancelled=5) is None
