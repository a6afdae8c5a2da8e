"""The per-session lock against a real Redis: exclusivity, heartbeat, loss, token checks."""

from __future__ import annotations

import functools
import threading

import pytest
import redis

from om_workers.coordination import keys, liveness, timing
from om_workers.coordination.heartbeats import Heartbeats
from om_workers.coordination.liveness import Liveness
from om_workers.coordination.locks import SessionLock
from om_workers.coordination.timing import HEARTBEAT_DIVISOR
from om_workers.errors import CoordinationError, LockLostError
from tests.redis.helpers import ManualHeartbeats, wait_until

SHORT_TTL_S = 0.3


def test_acquire_then_busy_then_release(client: redis.Redis) -> None:
    first = SessionLock(client, "t1", "s1")
    second = SessionLock(client, "t1", "s1")
    assert first.acquire()
    assert client.get(first.key) == first.token
    assert 0 < client.pttl(first.key) <= 60_000
    assert not second.acquire()
    first.check()
    result = first.release()
    assert result.released
    assert result.pending_job_id is None
    assert client.get(first.key) is None
    assert second.acquire()
    second.release()


def test_locks_of_other_sessions_and_tenants_are_independent(client: redis.Redis) -> None:
    locks = [SessionLock(client, t, s) for t, s in [("t1", "s1"), ("t1", "s2"), ("t2", "s1")]]
    assert all(lock.acquire() for lock in locks)
    assert len({lock.key for lock in locks}) == 3
    for lock in locks:
        lock.release()


def test_extend_resets_the_ttl(client: redis.Redis) -> None:
    lock = SessionLock(client, "t1", "s1", ttl_s=5)
    assert lock.acquire()
    client.pexpire(lock.key, 100)
    assert lock.extend()
    assert client.pttl(lock.key) > 1000
    lock.release()


def test_wrong_token_cannot_extend_or_release(client: redis.Redis) -> None:
    holder = SessionLock(client, "t1", "s1", ttl_s=5)
    intruder = SessionLock(client, "t1", "s1", ttl_s=5)
    assert holder.acquire()
    assert not intruder.acquire()
    client.pexpire(holder.key, 2000)
    # The scripts themselves refuse another token...
    extend = client.register_script(keys.EXTEND_LOCK)
    assert extend(keys=[holder.key], args=["not-the-token", 60_000]) == 0
    assert client.pttl(holder.key) <= 2000
    release = client.register_script(keys.RELEASE_LOCK)
    assert release(keys=[holder.key, holder.pending_key], args=["not-the-token"])[0] == 0
    # ...and so does a lock instance that never held it.
    assert not intruder.release().released
    assert client.get(holder.key) == holder.token
    holder.check(confirm=True)
    holder.release()


def test_heartbeat_keeps_a_lock_alive_across_several_ttls(client: redis.Redis) -> None:
    # The beats run when the test says and the lock's clock is the test's, so a stalled
    # process on a loaded machine cannot expire the lock between two beats.
    now = [100.0]
    beats = ManualHeartbeats()
    lock = SessionLock(client, "t1", "s1", ttl_s=30, clock=lambda: now[0])
    assert lock.acquire()
    lock.start_heartbeat(beats)
    for _ in range(3 * HEARTBEAT_DIVISOR):  # three TTLs of beats
        client.pexpire(lock.key, 2000)  # most of the TTL has passed on Redis's side
        now[0] += timing.heartbeat_interval_s(30)
        assert beats.run_due() == 1
        assert client.pttl(lock.key) > 2000  # the beat reset it
        lock.check(confirm=True)
    assert now[0] - 100.0 >= 3 * 30 and not lock.lost
    assert not SessionLock(client, "t1", "s1").acquire()
    assert lock.release().released
    beats.run_due()  # a released lock's beat runs no more and asks for no other
    assert beats.run_due() == 0


def test_deleted_lock_is_noticed_by_the_heartbeat(client: redis.Redis) -> None:
    lost_calls: list[str] = []
    beats = ManualHeartbeats()
    lock = SessionLock(client, "t1", "s1", ttl_s=30, on_lost=lambda: lost_calls.append("lost"))
    assert lock.acquire()
    lock.start_heartbeat(beats)
    client.delete(lock.key)
    assert beats.run_due() == 1
    assert lock.lost
    with pytest.raises(LockLostError) as info:
        lock.check()
    assert info.value.key == lock.key
    assert not lock.release().released
    assert lost_calls == ["lost"]


def test_confirm_notices_a_deleted_lock_before_the_next_beat(client: redis.Redis) -> None:
    lock = SessionLock(client, "t1", "s1", ttl_s=30)
    assert lock.acquire()
    lock.check()
    client.delete(lock.key)
    with pytest.raises(LockLostError):
        lock.check(confirm=True)
    assert lock.lost


def test_lock_taken_by_another_worker_after_expiry_is_lost(client: redis.Redis) -> None:
    lock = SessionLock(client, "t1", "s1", ttl_s=SHORT_TTL_S)
    assert lock.acquire()
    # No heartbeat: a stalled worker. Its lock expires and another worker takes it.
    other = SessionLock(client, "t1", "s1", ttl_s=30)
    assert wait_until(other.acquire)
    with pytest.raises(LockLostError):
        lock.check()
    assert not lock.extend()
    assert not lock.release().released
    # The loser's release left the winner's lock alone.
    assert client.get(other.key) == other.token
    other.release()


def test_expired_lock_fails_the_local_check_without_asking_redis(client: redis.Redis) -> None:
    now = [100.0]
    lock = SessionLock(client, "t1", "s1", ttl_s=30, clock=lambda: now[0])
    assert lock.acquire()
    now[0] += 29.9
    lock.check()
    now[0] += 0.1
    assert lock.lost
    with pytest.raises(LockLostError):
        lock.check()
    # Still in Redis (its real TTL has not passed), yet this holder must not write any more.
    assert client.get(lock.key) == lock.token
    lock.release()


def test_misuse_is_refused(client: redis.Redis) -> None:
    lock = SessionLock(client, "t1", "s1")
    with pytest.raises(LockLostError):
        lock.check()
    with pytest.raises(CoordinationError):
        lock.start_heartbeat()
    assert lock.acquire()
    with pytest.raises(CoordinationError):
        lock.acquire()
    lock.start_heartbeat()
    with pytest.raises(CoordinationError):
        lock.start_heartbeat()
    assert lock.release().released
    assert not lock.release().released
    with pytest.raises(LockLostError):
        lock.check()
    with pytest.raises(CoordinationError):
        lock.acquire()


def test_ttl_must_be_positive(client: redis.Redis) -> None:
    with pytest.raises(ValueError):
        SessionLock(client, "t1", "s1", ttl_s=0)


def test_acquire_claims_the_pending_marker_in_the_same_step(client: redis.Redis) -> None:
    client.set(keys.pending_key("t1", "s1"), "job-1")
    lock = SessionLock(client, "t1", "s1")
    assert lock.acquire(claim_pending=True)
    assert lock.claimed_job_id == "job-1"
    assert client.get(keys.pending_key("t1", "s1")) is None
    # Busy: nothing is touched, not even a marker set meanwhile.
    client.set(keys.pending_key("t1", "s1"), "job-2")
    busy = SessionLock(client, "t1", "s1")
    assert not busy.acquire(claim_pending=True)
    assert busy.claimed_job_id is None
    assert client.get(keys.pending_key("t1", "s1")) == "job-2"
    lock.release()


def test_a_retried_acquire_finds_its_own_token_and_takes_the_lock(client: redis.Redis) -> None:
    # redis-py re-sends a script whose reply was lost: the second run must not report "busy".
    script = client.register_script(keys.ACQUIRE_LOCK)
    lock_key, pending_key = keys.lock_key("t1", "s1"), keys.pending_key("t1", "s1")
    mine, theirs = keys.worker_key("w-a"), keys.worker_key("w-b")
    client.set(pending_key, "job-1")
    client.set(theirs, "1")

    def acquire(token: str, worker: str) -> object:
        return script(
            keys=[lock_key, pending_key, worker], args=[token, 5000, "1", keys.WORKER_PREFIX, 900]
        )

    assert acquire("w-a/1", mine) == [1, "job-1"]
    assert acquire("w-a/1", mine) == [1, None]
    assert acquire("w-b/2", theirs) == [0, None]  # w-a's key lives: busy
    assert client.get(lock_key) == "w-a/1"
    assert 0 < client.pttl(lock_key) <= 5000
    assert 0 < client.pttl(mine) <= 900  # taking a lock marks the taker alive


def test_one_heartbeat_thread_keeps_many_locks_alive(client: redis.Redis) -> None:
    beats = ManualHeartbeats()
    locks = [SessionLock(client, "t1", f"s{i}", ttl_s=30) for i in range(6)]
    for lock in locks:
        assert lock.acquire()
        lock.start_heartbeat(beats)
    for _ in range(3):
        for lock in locks:
            client.pexpire(lock.key, 2000)
        assert beats.run_due() == len(locks)
        assert all(client.pttl(lock.key) > 2000 for lock in locks)
    for lock in locks:
        lock.check(confirm=True)
    assert all(lock.release().released for lock in locks)


def test_one_scheduler_thread_runs_every_beat_again_and_again() -> None:
    heartbeats = Heartbeats(name="om-test-heartbeats")
    ran: dict[int, list[str]] = {n: [] for n in range(6)}

    def counting(n: int) -> float | None:
        ran[n].append(threading.current_thread().name)
        return 0.01 if len(ran[n]) < 3 else None

    for n in ran:
        heartbeats.schedule(0.0, functools.partial(counting, n))
    assert wait_until(lambda: all(len(names) == 3 for names in ran.values()), timeout_s=60)
    assert {name for names in ran.values() for name in names} == {"om-test-heartbeats"}


def test_a_failing_beat_does_not_stop_the_others() -> None:
    heartbeats = Heartbeats()
    ran: list[str] = []

    def broken() -> float | None:
        ran.append("broken")
        raise RuntimeError("boom")

    def counting() -> float | None:
        ran.append("ok")
        return 0.01 if ran.count("ok") < 3 else None

    heartbeats.schedule(0.0, broken)
    heartbeats.schedule(0.01, counting)
    assert wait_until(lambda: ran.count("ok") == 3)
    assert ran.count("broken") == 1


def _process() -> Liveness:
    """The identity of another worker process (its own id; beats on a thread of its own)."""
    return Liveness()


def test_a_lock_whose_holder_died_is_taken_over_at_once(client: redis.Redis) -> None:
    dead, alive = _process(), _process()
    holder = SessionLock(client, "t1", "s1", worker=dead)
    assert holder.acquire() and not holder.took_over
    busy = SessionLock(client, "t1", "s1", worker=alive)
    assert not busy.acquire()  # the holder's process is alive
    assert liveness.held_by_live_workers(client, [holder.key]) == [True]
    client.delete(keys.worker_key(dead.worker_id))  # its process died: the key expired
    assert liveness.held_by_live_workers(client, [holder.key]) == [False]
    assert liveness.takeover_wait_ms(client, holder.key) == 0
    taker = SessionLock(client, "t1", "s1", worker=alive)
    assert taker.acquire() and taker.took_over
    assert client.get(taker.key) == taker.token and taker.token.startswith(alive.worker_id + "/")
    with pytest.raises(LockLostError):
        holder.check(confirm=True)  # a holder that was only slow finds out before writing
    taker.release()


def test_a_token_naming_no_worker_is_waited_out(client: redis.Redis) -> None:
    lock_key = keys.lock_key("t1", "s1")
    client.set(lock_key, "0123abcd", px=3000)  # a token without a worker id
    assert not SessionLock(client, "t1", "s1", worker=_process()).acquire()
    assert liveness.held_by_live_workers(client, [lock_key, keys.lock_key("t1", "free")]) == [
        True,
        False,
    ]
    assert 0 < liveness.takeover_wait_ms(client, lock_key) <= 3000


def test_takeover_wait_is_the_sooner_of_lock_and_liveness_expiry(client: redis.Redis) -> None:
    worker = _process()
    lock = SessionLock(client, "t1", "s1", ttl_s=30, worker=worker)
    assert lock.acquire()
    client.pexpire(keys.worker_key(worker.worker_id), 1500)
    assert 0 < liveness.takeover_wait_ms(client, lock.key) <= 1500
    client.pexpire(lock.key, 700)
    assert 0 < liveness.takeover_wait_ms(client, lock.key) <= 700
    lock.release()
    assert liveness.takeover_wait_ms(client, lock.key) == 0


def test_the_liveness_key_outlives_its_ttl_while_the_process_lives(client: redis.Redis) -> None:
    beats = ManualHeartbeats()
    worker = Liveness(beats)
    lock = SessionLock(client, "t1", "s1", ttl_s=0.6, worker=worker)
    assert lock.acquire()
    assert liveness.ttl_s(0.6) == 0.6 and liveness.ttl_s(600) == keys.LIVENESS_TTL_S
    for _ in range(3):  # past several liveness TTLs: only the beat keeps the key
        # A TTL the beat would never set: seeing it replaced shows the beat ran.
        client.pexpire(keys.worker_key(worker.worker_id), 100_000)
        assert beats.run_due() == 1
        assert 0 < client.pttl(keys.worker_key(worker.worker_id)) <= 600
    lock.release()


def test_worker_ids_are_safe_key_parts() -> None:
    assert keys.worker_key("host-1.local-42-ab12") == "om:worker:host-1.local-42-ab12"
    for bad in ("", "a/b", "a:b", "a b"):
        with pytest.raises(ValueError):
            keys.worker_key(bad)
    assert keys.lock_holder("w-1/abc") == "w-1" and keys.lock_holder("abc") is None
    assert "/" not in _process().worker_id
