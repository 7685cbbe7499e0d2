"""The learner's background publisher: newest version first, superseded ones skipped, failures survived."""

import threading

from swarmnode.learner.publish_worker import LatestPublisher


def test_versions_superseded_while_a_publish_runs_are_skipped_and_the_newest_is_published():
    started, release = threading.Event(), threading.Event()
    published: list[int] = []

    def publish(version: int, state: dict) -> None:
        started.set()
        release.wait(30)
        published.append(version)

    worker = LatestPublisher(publish)
    worker.submit(1, {})
    assert started.wait(30)  # version 1 is being written; 2..5 arrive meanwhile
    for version in range(2, 6):
        worker.submit(version, {})
    release.set()
    assert worker.flush(30)
    assert published == [1, 5] and worker.skipped == 3 and worker.published == 2
    worker.close()


def test_a_failing_publish_is_counted_and_the_next_version_is_still_published():
    published: list[int] = []

    def publish(version: int, state: dict) -> None:
        if version == 1:
            raise OSError("disk full")
        published.append(version)

    worker = LatestPublisher(publish)
    worker.submit(1, {})
    assert worker.flush(30)
    worker.submit(2, {})
    worker.close()
    assert published == [2] and worker.failures == 1
