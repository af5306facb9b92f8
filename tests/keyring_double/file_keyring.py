"""A TEST DOUBLE of the system keyring (no Secret Service or Keychain runs here): a keyring backend
reading `{service: {username: password}}` from the JSON file `$BK_TEST_KEYRING`. Chosen with
`PYTHON_KEYRING_BACKEND=file_keyring.FileKeyring` and this folder on PYTHONPATH, as any backend is."""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.credentials import SimpleCredential


class FileKeyring(KeyringBackend):
    priority = 1  # type: ignore[assignment]

    def _data(self) -> dict[str, dict[str, str]]:
        path = Path(os.environ["BK_TEST_KEYRING"])
        return json.loads(path.read_text()) if path.is_file() else {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._data().get(service, {}).get(username)

    def get_credential(self, service: str, username: str | None) -> SimpleCredential | None:
        """As the Secret Service and Keychain backends do: without a username, the service's first entry."""
        users = self._data().get(service, {})
        if username is None:
            username = next(iter(users), None)
        if username is None or username not in users:
            return None
        return SimpleCredential(username, users[username])

    def set_password(self, service: str, username: str, password: str) -> None:
        raise NotImplementedError("read-only test keyring")

    def delete_password(self, service: str, username: str) -> None:
        raise NotImplementedError("read-only test keyring")
