"""The gate between the merge's session-wide commit properties and the jobs beside the
appends (:class:`actors.sinks.spark.actor.CommitPropertiesGate`): merges share it (two at
once, as two sessions racing), a job beside the appends holds it alone, each waiting for
the other; the order is seen through events, not timing."""

from __future__ import annotations

import threading

from actors.sinks.spark.actor import CommitPropertiesGate


def test_merges_share_the_gate_and_a_job_beside_the_appends_waits_for_them() -> None:
    gate = CommitPropertiesGate()
    both_in = threading.Barrier(3, timeout=30)
    release = threading.Event()
    seen: list[str] = []

    def merge(name: str) -> None:
        with gate.shared():
            both_in.wait()  # the two merges are inside together
            release.wait(30)
            seen.append(f"{name} out")

    merges = [threading.Thread(target=merge, args=(n,)) for n in ("one", "two")]
    for thread in merges:
        thread.start()
    both_in.wait()
    entered = threading.Event()

    def job() -> None:
        with gate.alone():
            entered.set()
            seen.append("job in")

    aside = threading.Thread(target=job)
    aside.start()
    assert not entered.wait(0.2)  # held off while the merges are in (a bound, not a pace)
    release.set()
    for thread in (*merges, aside):
        thread.join(30)
    assert sorted(seen[:2]) == ["one out", "two out"] and seen[2] == "job in"


def test_a_merge_waits_for_a_job_beside_the_appends() -> None:
    gate = CommitPropertiesGate()
    inside, release, merged = threading.Event(), threading.Event(), threading.Event()

    def job() -> None:
        with gate.alone():
            inside.set()
            release.wait(30)

    def merge() -> None:
        with gate.shared():
            merged.set()

    aside = threading.Thread(target=job)
    aside.start()
    assert inside.wait(30)
    merging = threading.Thread(target=merge)
    merging.start()
    assert not merged.wait(0.2)  # held off while the job runs
    release.set()
    assert merged.wait(30)
    for thread in (aside, merging):
        thread.join(30)
