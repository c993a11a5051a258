"""Host words the device writes: mapped host memory that a kernel stores a count or a state into,
which the host reads as soon as it lands (a driver synchronisation costs several microseconds
more than a look at memory), watched for a bounded time, then waited for on the stream."""
from __future__ import annotations

import time


def watch(words, i: int, unset: int, stream, seconds: float) -> bool:
    """True once words[i] (mapped host memory) is no longer `unset`: looked at for `seconds`, then
    `stream` is synchronised (raising any fault of its kernels) and it is looked at once more."""
    clock = time.perf_counter
    deadline = clock() + seconds
    while words[i] == unset and clock() < deadline:
        pass
    if words[i] == unset:
        stream.synchronize()
    return bool(words[i] != unset)
