"""The results channel: how the grading plugin tells the grader what happened, where the code under
test cannot forge it.

The grader's `Receiver` opens a file outside the sandbox's view and hands the child only its
descriptor and a pipe holding a one-time key (`DOJO_CHANNEL=<results fd>:<key fd>`). The plugin's
`Sender` takes the key before candidate code is imported and signs each record (HMAC-SHA256).
`records()` accepts a stream only if every line is signed, numbered 0, 1, 2 ... and ends at `end`.
It does not stop code that reads the key out of the plugin's memory: the integrity scan flags that.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path

ENV = "DOJO_CHANNEL"


class ChannelError(ValueError):
    """The stream holds a record the plugin did not write, or records out of order."""


def _mac(key: bytes, seq: int, body: str) -> str:
    return hmac.new(key, f"{seq}:{body}".encode(), hashlib.sha256).hexdigest()


class Receiver:
    """The grader's end: `env` for the child, `pass_fds` for Popen, then `records()` once it has ended.

    Use as a context manager; it closes both descriptors and deletes the file."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._dir = tempfile.mkdtemp(prefix="dojo-channel-")  # 0700, never in the sandbox's view
        self._path = Path(self._dir) / "results.jsonl"
        self._write_fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._key_read, key_write = os.pipe()
        os.write(key_write, self._key.hex().encode())  # 64 bytes: far below a pipe's buffer
        os.close(key_write)
        self._open = True

    @property
    def pass_fds(self) -> tuple[int, int]:
        return self._write_fd, self._key_read

    @property
    def env(self) -> dict[str, str]:
        return {ENV: f"{self._write_fd}:{self._key_read}"}

    def close_child_ends(self) -> None:
        """After the child started: the grader keeps neither of the child's descriptors."""
        if self._open:  # once only: another thread may reuse the numbers after a close
            os.close(self._write_fd)
            os.close(self._key_read)
            self._open = False

    def records(self) -> list[dict]:
        """The plugin's records in order. Raises ChannelError on a forged, repeated, missing or
        trailing record; a last line cut short (the process died mid-write) is dropped."""
        try:
            raw = self._path.read_bytes()
        except OSError:
            return []
        lines = raw.split(b"\n")
        if lines and lines[-1]:  # no newline at the end: cut short by a crash
            lines = lines[:-1]
        out: list[dict] = []
        for number, line in enumerate(ln for ln in lines if ln):
            try:
                doc = json.loads(line)
                seq, body, mac = doc["seq"], doc["record"], doc["mac"]
            except (ValueError, KeyError, TypeError):
                raise ChannelError(
                    f"line {number + 1} of the results stream is not a signed record"
                ) from None
            text = json.dumps(body, sort_keys=True)
            if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(self._key, seq, text)):
                raise ChannelError(f"results record {number + 1} was not written by the grading plugin")
            if seq != number:
                raise ChannelError(
                    f"results record {seq} arrived in place {number}: a record is repeated or missing"
                )
            if out and "end" in out[-1]:
                raise ChannelError("a results record follows the end of the session")
            out.append(body)
        return out

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc) -> None:
        self.close_child_ends()
        self._path.unlink(missing_ok=True)
        os.rmdir(self._dir)


class Sender:
    """The plugin's end, built from DOJO_CHANNEL (None when the variable is unset)."""

    def __init__(self, results_fd: int, key: bytes) -> None:
        self._fd, self._key, self._seq = results_fd, key, 0

    @classmethod
    def from_env(cls) -> Sender | None:
        value = os.environ.pop(ENV, None)
        if not value:
            return None
        results_fd, key_fd = (int(part) for part in value.split(":"))
        key = bytes.fromhex(os.read(key_fd, 64).decode())
        os.close(key_fd)
        os.set_inheritable(results_fd, False)  # processes the candidate starts do not get it
        return cls(results_fd, key)

    def send(self, record: dict) -> None:
        text = json.dumps(record, sort_keys=True)
        line = json.dumps({"seq": self._seq, "record": record, "mac": _mac(self._key, self._seq, text)})
        os.write(self._fd, (line + "\n").encode())  # one write per record: O_APPEND keeps lines whole
        self._seq += 1
