"""Where a login is kept: the user's config dir, one JSON file readable by its owner only.

`SCHEDCTL_CONFIG_DIR` overrides the directory (tests, several identities); otherwise
`$XDG_CONFIG_HOME/schedctl` or `~/.config/schedctl`. The file holds the server URL, the
username, the tenant and the JWT pair, never a password or an API key (a key comes from
`SCHEDCTL_API_KEY` each time). Writes go to a new 0600 file renamed over the old one, so a
reader never sees half a file and the tokens are never readable by others, not even for an
instant; refreshes are serialised with a lock file because a refresh token may be rotated
(each refresh returns a new one and blacklists the old), and two processes refreshing with
the same one would log each other out.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

FILE_NAME = "credentials.json"


def config_dir() -> Path:
    explicit = os.environ.get("SCHEDCTL_CONFIG_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "schedctl"


@dataclass
class Credentials:
    url: str
    username: str = ""
    tenant: str | None = None
    access: str = ""
    refresh: str = ""


class CredentialStore:
    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or config_dir()
        self.path = self.directory / FILE_NAME

    def load(self) -> Credentials | None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not data.get("url"):
            return None
        known = Credentials.__dataclass_fields__
        return Credentials(**{key: value for key, value in data.items() if key in known})

    def save(self, credentials: Credentials) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.path.with_name(f".{FILE_NAME}.{os.getpid()}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(descriptor, 0o600)  # whatever the umask or a leftover file said
            with os.fdopen(descriptor, "w") as handle:
                json.dump(asdict(credentials), handle, indent=2)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            raise
        os.replace(temporary, self.path)

    def clear(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Held while refreshing, so one process at a time spends the refresh token."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
            os.close(descriptor)
