"""How big an oversized answer's `result` is, measured in a child process.

An HTTP answer longer than the listing limit may still be within it as compact JSON (whitespace),
so it is measured before it is refused (`CappedBody`). The standard library's parse and the
re-encoding that counts it take a third of a second of a 20 MB answer on a quiet machine, seconds
on a busy one, and hold the interpreter lock all the while: on a worker thread they still stalled
the event loop, so every other poll and the web app waited. A child process measures instead: this
one writes the answer to the child's stdin, which the event loop does a pipe's worth at a time, and
reads one number back.

A child is started for each measure and ends with it. Starting one costs under a tenth of a second
(this file, run by the same interpreter, isolated: `-I` keeps this directory, whose `http.py` would
shadow the standard library's, off its import path). In return no process outlives the poll that
needed it (stopping the monitor, or a poll's deadline, kills and reaps it), the memory the parse
took (several times the answer) goes back to the system at once, and a child that is killed or
runs out of memory fails that one poll (`MeasureFailed`), the next measure starting a fresh one.
Measures of answers past `http.LARGE_ANSWER_BYTES` take turns: their polls hold the process's
large-answer turn (`http.large_answer_turns`).

Run as a script, this file is that child: it reads one answer on stdin and writes `result_size`
of it to stdout, as digits, or `none`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from typing import Any

import anyio

MEASURER = [sys.executable, "-I", __file__]
"""The child's command line."""
OUT_OF_MEMORY = 3
"""The child's exit status when the parse ran out of memory."""


class MeasureFailed(Exception):
    """The child ended without a measure; the message says how, as the end of a sentence."""


async def measure_result(body: bytes) -> int | None:
    """`result_size(body)`, computed in a child process; `MeasureFailed` if it gives none."""
    try:
        child = await asyncio.create_subprocess_exec(
            *MEASURER, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
    except OSError as exc:
        raise MeasureFailed(f"could not start the process measuring it: {exc}") from exc
    try:
        output, _ = await child.communicate(body)
    except BaseException:  # cancelled (the poll's deadline, or the monitor stopping): the child too
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        with anyio.CancelScope(shield=True):  # reaped before this returns, whatever cancels it again
            await child.wait()
        raise
    if child.returncode != 0:
        raise MeasureFailed(_how_it_ended(child.returncode))
    answer = output.strip()
    if answer == b"none":
        return None
    if not answer.isdigit():
        raise MeasureFailed("the process measuring it gave no measure")
    return int(answer)


def _how_it_ended(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"the process measuring it was killed ({name})"
    if status == OUT_OF_MEMORY:
        return "the process measuring it ran out of memory"
    return f"the process measuring it exited with status {status}"


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def json_size(value: Any) -> int:
    """Compact-JSON size in UTF-8, counted chunk by chunk: a 20 MB answer is not copied twice more
    (as one string, then as its bytes) just to be measured."""
    return sum(
        len(chunk) if chunk.isascii() else len(chunk.encode("utf-8", "surrogatepass"))
        for chunk in _COMPACT.iterencode(value)
    )


def result_size(body: bytes) -> int | None:
    """`json_size` of a JSON-RPC answer's `result`; None for a body that is not one (the SDK then
    reports it as it would any other)."""
    try:
        message = json.loads(body)
        result = message.get("result") if isinstance(message, dict) else None
        return json_size(result) if isinstance(result, dict) else None
    except (ValueError, RecursionError):  # not JSON, or nested past what Python's parser takes
        return None


def main() -> None:
    """The child: one answer in, its measure out."""
    body = sys.stdin.buffer.read()
    try:
        size = result_size(body)
    except MemoryError:
        os._exit(OUT_OF_MEMORY)  # no unwinding: there may be no memory left for it
    sys.stdout.write("none" if size is None else str(size))


if __name__ == "__main__":
    main()
