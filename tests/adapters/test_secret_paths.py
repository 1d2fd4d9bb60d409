"""Which paths of the server's own files every sandbox is denied (`_command._secrets`): each
file by name and as resolved, and a directory whole only when it is the secrets' own."""

from __future__ import annotations

import os
from pathlib import Path

from execproto.adapters._command._secrets import denied, directories


def _volume(where: Path, names: tuple[str, ...] = ("token", "tls.key")) -> Path:
    """A Kubernetes Secret volume as its atomic writer leaves it."""
    data = where / "..2026_12_04_10_00_00.1"
    data.mkdir(parents=True)
    (where / "..data").symlink_to(data.name)
    for name in names:
        (data / name).write_text(name)
        (where / name).symlink_to(f"..data/{name}")
    return data


def test_a_secret_volume_is_denied_whole(tmp_path: Path) -> None:
    volume = tmp_path / "secrets"
    data = _volume(volume)
    (data / "ca.crt").write_text("another key of the Secret")  # still the volume's
    found = denied([volume / "token", volume / "tls.key"])
    assert set(found) == {str(volume / "token"), str(data / "token"), str(volume),
                          str(volume / "tls.key"), str(data / "tls.key")}
    assert directories(found) == [str(volume)]


def test_a_directory_of_the_servers_files_alone_is_denied_whole(tmp_path: Path) -> None:
    own = tmp_path / "execproto"
    own.mkdir()
    for name in ("token", "tls.crt", "tls.key"):
        (own / name).write_text(name)
    found = denied([own / "token", own / "tls.key"], beside=[own / "tls.crt"])
    assert str(own) in found
    # Without the certificate among the server's files, the directory holds something else.
    assert str(own) not in denied([own / "token", own / "tls.key"])


def test_a_shared_directory_is_not_denied_only_its_files(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "token").write_text("t")
    (shared / "notes").write_text("n")
    assert denied([shared / "token"]) == (str(shared / "token"),)
    alone = tmp_path / "tmp"
    alone.mkdir()
    (alone / "token").write_text("t")
    alone.chmod(0o1777)  # as /tmp: anyone may write there
    assert denied([alone / "token"]) == (str(alone / "token"),)


def test_the_directory_a_link_leads_into_is_denied_when_it_is_the_secrets_own(
        tmp_path: Path) -> None:
    volume = tmp_path / "run" / "secrets"
    data = _volume(volume, ("token",))
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "settings.toml").write_text("")
    (conf / "token").symlink_to(volume / "token")
    found = denied([conf / "token"])
    assert set(found) == {str(conf / "token"), str(data / "token"), str(volume), str(data)}


def test_a_link_on_the_way_is_not_denied_as_such(tmp_path: Path) -> None:
    # /var/run -> /run: what the link leads to holds much besides the secret.
    real = tmp_path / "run"
    (real / "app").mkdir(parents=True)
    (real / "app" / "token").write_text("t")
    (real / "app" / "pid").write_text("1")
    (real / "resolv.conf").write_text("")
    os.symlink("run", tmp_path / "varrun")
    found = denied([tmp_path / "varrun" / "app" / "token"])
    assert found == (str(tmp_path / "varrun" / "app" / "token"), str(real / "app" / "token"))
