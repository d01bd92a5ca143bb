"""What a Redis failover costs a live conversation, next to the same conversation
with no failover, measured in the same run.

    .venv/bin/python bench/failover.py [--quick] [--trials N] [--down-after-ms MS]
                                      [--faults none,crash,deposed]

Each trial starts a primary, two replicas and a Sentinel (``tests/redis_server.py``:
real valkey/redis processes on 127.0.0.1) and one tone gateway on their
``redis+sentinel://`` URL (one replica ack per durable write, the default). The
client speaks; the reply is 64 words, 12.8 s of audio streamed in real time. Two
seconds into the reply the trial does one of:

  none      nothing: the baseline
  crash     SIGKILL the primary. Sentinel notices after ``--down-after-ms``
            (Sentinel's own default is 30,000; here 2,000) and promotes a replica
  deposed   ``SENTINEL FAILOVER`` with the primary up: it goes on taking writes,
            unreplicated, until Sentinel demotes it ~10 s later

The client sends ``session.heartbeat`` every 100 ms throughout, so journaling is
probed even while the reply is quiet. Columns (median over the trials):

  silence     the longest gap between two journaled events the client got, from
              1 s before the fault to the end of the reply (ms)
  refused     ``store_unavailable`` errors the client got: events that could not
              be journaled, so were never sent (heartbeat answers included)
  audio       reply audio the client got, of the 12,800 ms
  next turn   a turn spoken once the reply is over: its last audio frame sent ->
              the first audio of its answer (ms)
  repaired    trials in which Redis lost acknowledged events and the gateway
              journaled them again (``duplex_journal_repairs_total``)
  intact      every trial: seqs in order, none twice, none skipped, and each one
              on the final primary byte for byte (I4 across the failover)

Figures, not a verdict: the client, the gateway and all Redis processes share
the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "e2e"),
                str(REPO / "tests" / "faults")]

from fault_helpers import Msg, Stream, assert_ordered_exactly_once, journal  # noqa: E402
from gateway_process import GatewayProcess  # noqa: E402
from redis_server import ReplicatedRedis  # noqa: E402

FAULTS = ("none", "crash", "deposed")
WORDS = 60  # + "answer to turn N:" = 64 words of 200 ms
REPLY_MS = (WORDS + 4) * 200
FAULT_AFTER_S = 2.0
BYTES_PER_MS = 48  # PCM16 mono at 24 kHz


def inject(fault: str, redis: ReplicatedRedis) -> None:
    if fault == "crash":
        redis.primary.kill()
    elif fault == "deposed":
        redis.request_failover()


async def heartbeats(s: Stream, every_s: float = 0.1) -> None:
    while not s.closed.is_set():
        await s.send("session.heartbeat")
        await asyncio.sleep(every_s)  # a probe's cadence, not a synchronisation


def longest_gap_ms(messages: list[Msg], since: float) -> float:
    times = [m.t for m in messages if m.seq is not None and m.t >= since]
    return 1000 * max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def audio_ms(messages: list[Msg], response_id: str) -> float:
    got = sum(len(base64.b64decode(m.event["delta"])) for m in messages
              if m.type == "response.output_audio.delta" and m.event["response_id"] == response_id)
    return got / BYTES_PER_MS


async def intact(s: Stream, redis: ReplicatedRedis, sid: str) -> str:
    try:
        assert_ordered_exactly_once([m for m in s.messages if m.code is None])
    except AssertionError as exc:
        return f"no: {exc}"[:120]
    kept = dict(await journal(redis.current_primary().url, sid))
    oldest = min(kept, default=0)
    for m in s.messages:
        if m.seq is not None and m.seq >= oldest and kept.get(m.seq) != m.raw:
            return f"no: seq {m.seq} is not on the final primary"
    return "yes"


async def converse(gw: GatewayProcess, redis: ReplicatedRedis, fault: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    s = await Stream.open(gw.ws)
    await s.until_type("session.created")
    sid = s.messages[0].event["session"]["id"]
    await s.send("session.update", session={"instructions": f"words={WORDS}"})
    await s.speak(1.0)
    first = await s.until_type("response.output_audio.delta", timeout=15)
    response_id = s.messages[first].event["response_id"]
    started = s.messages[first].t
    probe = asyncio.create_task(heartbeats(s))
    try:
        await s.wait(lambda: loop.time() >= started + FAULT_AFTER_S, "the fault's moment")
        fault_at = loop.time()
        await asyncio.to_thread(inject, fault, redis)
        end = started + REPLY_MS / 1000 + 1.0
        await s.wait(lambda: loop.time() >= end, "the end of the reply", timeout=30)
        silence = longest_gap_ms(s.messages, fault_at - 1.0)
        refused = sum(m.code == "store_unavailable" for m in s.messages)
        got_ms = audio_ms(s.messages, response_id)
        mark = len(s.messages)
        await s.speak(1.0)
        spoken = loop.time()
        answer = await s.until(lambda m: m.type == "response.output_audio.delta"
                               and m.event["response_id"] != response_id,
                               "the next turn's first audio", start=mark, timeout=30)
        next_ms = 1000 * (s.messages[answer].t - spoken)
    finally:
        probe.cancel()
    verdict = await intact(s, redis, sid)
    repaired = await gw.metric("duplex_journal_repairs_total")
    await s.close()
    return {"silence": silence, "refused": refused, "audio": got_ms, "next": next_ms,
            "repaired": repaired > 0, "intact": verdict}


def trial(fault: str, down_after_ms: int) -> dict[str, Any]:
    redis = ReplicatedRedis(replicas=2, down_after_ms=down_after_ms).start()
    data = Path(tempfile.mkdtemp(prefix="dg-bench-"))
    gw = GatewayProcess(data, args=["--plugin", "tone", "--redis-url", redis.url])
    try:
        gw.start()
        return asyncio.run(converse(gw, redis, fault))
    except Exception:
        print(f"--- trial {fault} failed; gateway log tail ---\n" + "".join(gw.output[-30:]))
        redis.print_logs()
        raise
    finally:
        gw.stop()
        redis.close()
        shutil.rmtree(data, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one trial per fault")
    parser.add_argument("--trials", type=int, default=None, help="per fault; default 3")
    parser.add_argument("--down-after-ms", type=int, default=2000,
                        help="Sentinel's down-after-milliseconds (default 2000)")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"which, comma-separated (default {','.join(FAULTS)})")
    args = parser.parse_args(argv)
    faults = [f for f in args.faults.split(",") if f]
    if unknown := set(faults) - set(FAULTS):
        parser.error(f"unknown fault(s) {sorted(unknown)}; choose from {FAULTS}")
    trials = args.trials or (1 if args.quick else 3)
    print(f"bench/failover.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  ({trials} trial(s) per "
          f"fault, down-after {args.down_after_ms} ms, reply {REPLY_MS} ms, fault "
          f"{FAULT_AFTER_S:g} s into it)")
    results: dict[str, list[dict[str, Any]]] = {f: [] for f in faults}
    for i in range(trials):
        for fault in faults:  # interleaved, so drift hits every fault alike
            r = trial(fault, args.down_after_ms)
            results[fault].append(r)
            print(f"  trial {i + 1} {fault:<8} silence {r['silence']:7.0f} ms  refused "
                  f"{r['refused']:3d}  audio {r['audio']:6.0f} ms  next turn {r['next']:5.0f} ms"
                  f"  repaired {'yes' if r['repaired'] else 'no ':<3}  intact {r['intact']}",
                  flush=True)
    print()
    print(f"  {'fault':<8} {'silence (ms)':>13} {'refused':>8} {'audio (ms)':>11} "
          f"{'next turn (ms)':>15} {'repaired':>9}  intact")
    for fault, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("silence", "refused", "audio",
                                                                 "next")}
        ok = all(r["intact"] == "yes" for r in rs)
        repaired = f"{sum(r['repaired'] for r in rs)}/{len(rs)}"
        print(f"  {fault:<8} {med['silence']:>13.0f} {med['refused']:>8.0f} "
              f"{med['audio']:>11.0f} {med['next']:>15.0f} {repaired:>9}  "
              f"{'yes' if ok else 'NO'}")
    if "none" in results:
        base = statistics.median(r["silence"] for r in results["none"])
        for fault in faults:
            if fault != "none":
                worst = statistics.median(r["silence"] for r in results[fault])
                print(f"\n  {fault}: {worst - base:+.0f} ms of silence over the baseline", end="")
        print()
    return 0 if all(r["intact"] == "yes" for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
