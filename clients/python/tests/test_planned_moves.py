"""Planned moves keep every counter (issue 32's check, moves_check.py): with real processes
(ZooKeeper, three nodes, two routers), 1,800 exhausted (service, user) pairs of token_bucket,
fixed_window and gcra, a client asking for them through both routers all along, a rolling
restart (SIGTERM), a fourth node joining and an rl-rebalance: after each step no pair has a
fresh allowance; during it no answer was other than LIMITED, none was a policy answer, none
came later than the deadline plus the margin a planned move may take (handoff_wait 2 s +
slack: the product's promise, not a speed figure); every stopped node and rl-rebalance exit 0.

Not for: a move cut by a real failure (rl-chaos handoff-interrupted), nor speed
(bench/planned_moves_check.sh prints the figures for docs/BENCHMARKS.md).
"""

import os
import shutil

import pytest

import harness
import moves_check


def test_planned_moves_keep_every_counter(tmp_path):
    harness.need_binaries("rl-node", "rl-router", "rl-rebalance", "rl-genlog")
    if shutil.which("java") is None or not os.path.exists("/usr/share/java/zookeeper.jar"):
        pytest.skip("no ZooKeeper (Debian's zookeeper package) on this machine")
    lines = []
    out = moves_check.run(tmp_path / "moves", say=lines.append)
    print("\n".join(lines))
    pairs = moves_check.USERS * len(moves_check.SERVICES)
    assert out["pairs"] == pairs
    # the setup really exhausted every pair, and both routers refuse every one of them
    assert out["allowed_before"] == pairs * moves_check.LIMIT, lines
    assert out["refused_before"] == 2 * pairs, lines
    bound = moves_check.DEADLINE_MS / 1000.0 + moves_check.MARGIN_S
    assert [s["step"] for s in out["steps"]] == ["rolling", "join", "rebalance"]
    for s in out["steps"]:
        assert s["answers"] > 0, s  # the client asked during the step
        assert s["fresh_pairs"] == 0, s
        assert s["extra"] == 0, s
        assert s["policy"] == 0 and s["probe_policy"] == 0, s
        assert s["errors"] == 0, s
        assert s["slowest_s"] <= bound, s
        assert s["router"]["move_expired"] == 0, s  # no request held past handoff_wait
    rolling, join, rebalance = out["steps"]
    assert rolling["exit_status"] == {"a": 0, "b": 0, "c": 0}, rolling
    # the new node took its shards with their keys (the step moved something), none failed
    assert join["d_keys_in"] > 0 and join["d_handoffs_in"] > 0, join
    assert join["d_handoffs_in_failed"] == 0, join
    assert rebalance["rebalance_status"] == 0, rebalance
    assert rebalance["written"] == "zk", rebalance
    assert rebalance["moved_shards"] > 0, rebalance  # the step moved something
    assert out["final_exit_status"] == {"a": 0, "b": 0, "c": 0, "d": 0}, out
