"""`mnemo_mpc.ros.sim_launch` without starting nodes: `claim_domain_id` gives each live test and dds-loop run a
ROS_DOMAIN_ID no other process holds, whatever the global `random` state (two pytest workers seeded alike once joined
one domain and drove each other's robots); `_ros_args` writes parameters rcl parses."""

from __future__ import annotations

import fcntl
import random
import tempfile

import pytest

from mnemo_mpc.ros import sim_launch


@pytest.fixture
def claims(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sim_launch, "_held_claims", type(sim_launch._held_claims)())
    yield tmp_path / "mnemo_mpc_ros_domains"
    for handle in sim_launch._held_claims:
        handle.close()


def test_claims_are_distinct_even_after_the_same_seed(claims):
    ids = []
    for _ in range(10):
        random.seed(0)  # what an experiment does to the global state before the next live test
        ids.append(sim_launch.claim_domain_id())
    assert len(set(ids)) == len(ids)
    assert all(i in sim_launch.DOMAIN_IDS for i in ids)


def test_an_id_another_process_holds_is_skipped_and_none_left_is_an_error(claims, monkeypatch):
    monkeypatch.setattr(sim_launch, "DOMAIN_IDS", range(1, 3))
    claims.mkdir()
    other = open(claims / "1.lock", "a")  # another open file: flock conflicts as it would across processes
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert sim_launch.claim_domain_id() == 2
        with pytest.raises(RuntimeError, match=r"every ROS_DOMAIN_ID in 1\.\.2 is claimed"):
            sim_launch.claim_domain_id()
    finally:
        other.close()


def test_the_oldest_claim_is_released_past_the_cap(claims, monkeypatch):
    monkeypatch.setattr(sim_launch, "MAX_HELD_CLAIMS", 2)
    monkeypatch.setattr(sim_launch, "DOMAIN_IDS", range(1, 4))
    first = sim_launch.claim_domain_id()
    sim_launch.claim_domain_id()
    sim_launch.claim_domain_id()  # a third claim releases the first
    probe = open(claims / f"{first}.lock", "a")
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the first were still held
    finally:
        probe.close()


def test_ros_args_quote_an_empty_string_and_lower_booleans():
    args = sim_launch._ros_args({"map_frame_id": "", "exit_on_goal": True, "rate": 2.5})
    assert args == ["--ros-args", "-p", "map_frame_id:=''", "-p", "exit_on_goal:=true", "-p", "rate:=2.5"]
