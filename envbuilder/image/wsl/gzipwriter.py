"""A deterministic, parallel gzip writer (pigz-like): the bytes depend only on the data, the level
and the block size, never on the number of threads."""

from __future__ import annotations

import hashlib
import io
import os
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO

from envbuilder.image.wsl.conventions import COMPRESSLEVEL


class ParallelGzipWriter(io.RawIOBase):
    """A gzip writer that compresses fixed-size blocks on several threads (zlib releases the
    GIL), like pigz: each block is raw deflate primed with the previous block's last 32 KiB and
    ended by a sync flush, the last one by a final block. The bytes depend only on the data,
    the level and BLOCK, never on the number of threads. Header: no name, mtime 0, OS 255."""

    BLOCK = 1 << 20
    _WINDOW = 1 << 15

    def __init__(
        self, fh: IO[bytes], compresslevel: int = COMPRESSLEVEL, threads: int | None = None
    ) -> None:
        self.fh = fh
        self.level = compresslevel
        self.threads = max(1, threads or min(4, os.cpu_count() or 1))
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="wsl-gzip")
        self._pending: deque[Future[bytes]] = deque()
        self._buf = bytearray()
        self._prev_tail = b""
        self._crc = 0
        self._size = 0
        self._finished = False
        xfl = 2 if compresslevel == 9 else 4 if compresslevel == 1 else 0
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + bytes([xfl, 255]))

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._size

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        data = bytes(b)
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._buf += data
        while len(self._buf) > self.BLOCK:  # keep a remainder: the last block must be final
            block = bytes(self._buf[: self.BLOCK])
            del self._buf[: self.BLOCK]
            self._submit(block, last=False)
        return len(data)

    def _submit(self, block: bytes, last: bool) -> None:
        self._pending.append(self._pool.submit(_deflate, block, self._prev_tail, self.level, last))
        self._prev_tail = block[-self._WINDOW :]
        while len(self._pending) > 2 * self.threads:
            self.fh.write(self._pending.popleft().result())

    def close(self) -> None:
        if not self._finished:
            self._finished = True
            try:
                self._submit(bytes(self._buf), last=True)
                self._buf.clear()
                while self._pending:
                    self.fh.write(self._pending.popleft().result())
                self.fh.write(
                    self._crc.to_bytes(4, "little")
                    + (self._size & 0xFFFFFFFF).to_bytes(4, "little")
                )
            finally:
                self._pool.shutdown(wait=True, cancel_futures=True)
        super().close()


def _deflate(block: bytes, dictionary: bytes, level: int, last: bool) -> bytes:
    if dictionary:
        comp = zlib.compressobj(level, zlib.DEFLATED, -15, zdict=dictionary)
    else:
        comp = zlib.compressobj(level, zlib.DEFLATED, -15)
    return comp.compress(block) + comp.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


class HashingWriter(io.RawIOBase):
    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self.sha.update(b)
        self.fh.write(b)
        n = len(b)
        self.size += n
        return n
