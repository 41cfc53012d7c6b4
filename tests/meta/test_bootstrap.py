"""scripts/bootstrap's decisions, run with bash on a PATH of fake commands: what it installs
and how (root, sudo, neither), what it says when it cannot, and that it hands Go to
reconciler.devcluster.toolchain. No package is installed and nothing is fetched."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bootstrap"
TOOLS = ("git", "curl", "unzip", "chromedriver")


class Machine:
    """A fake machine: a bin dir with the commands given, every call logged."""

    def __init__(self, tmp: Path, *, uid: int = 0, sudo: str | None = None) -> None:
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.log = tmp / "calls.log"
        self.log.touch()
        self.chromium = tmp / "usr-bin-chromium"
        for real in ("dirname", "env"):
            found = shutil.which(real)
            assert found, real
            (self.bin / real).symlink_to(found)
        self.fake("id", f'[ "$1" = -u ] && echo {uid}')
        self.fake("python3", 'echo "python3 $* PYTHONPATH=$PYTHONPATH" >> "$LOG"')
        if sudo == "no password":
            self.fake("sudo", 'echo "sudo $*" >> "$LOG"; [ "$1" = -n ] && exit 0; exec "$@"')
        elif sudo == "password":
            self.fake("sudo", 'echo "sudo $*" >> "$LOG"; exit 1')

    def fake(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    def has(self, *names: str) -> Machine:
        for name in names:
            self.fake(name, "exit 0")
        return self

    def with_chromium(self) -> Machine:
        self.chromium.write_text("#!/bin/sh\n")
        self.chromium.chmod(0o755)
        return self

    def with_apt(self, *, installs_chromium: bool = True) -> Machine:
        # the fakes run on the fake PATH: real tools by their full path
        touch, chmod = shutil.which("touch"), shutil.which("chmod")
        make = f'{touch} "{self.chromium}"; {chmod} +x "{self.chromium}"'
        make = make if installs_chromium else ""
        self.fake(
            "apt-get",
            'echo "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> "$LOG"\n'
            f'case " $* " in *" install "*) {make} ;; esac',
        )
        return self

    def run(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [shutil.which("bash") or "/bin/bash", str(SCRIPT)],
            env={
                "PATH": str(self.bin),
                "LOG": str(self.log),
                "BOOTSTRAP_CHROMIUM": str(self.chromium),
                "HOME": str(self.bin.parent),
            },
            capture_output=True,
            text=True,
            timeout=60,
        )

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()


TOOLCHAIN = f"python3 -m reconciler.devcluster.toolchain PYTHONPATH={ROOT}"


def test_everything_there_installs_nothing_and_checks_go(tmp_path: Path) -> None:
    machine = Machine(tmp_path).has(*TOOLS).with_chromium().with_apt()
    out = machine.run()
    assert out.returncode == 0, out.stderr
    assert machine.calls() == [TOOLCHAIN]
    assert out.stderr == ""


def test_as_root_the_missing_packages_are_installed_with_apt(tmp_path: Path) -> None:
    machine = Machine(tmp_path).has("git", "unzip").with_apt()
    out = machine.run()
    assert out.returncode == 0, out.stderr
    apt = "apt-get -o DPkg::Lock::Timeout=900 -q"
    assert machine.calls() == [
        f"{apt} update -qq DEBIAN_FRONTEND=",
        f"{apt} install -y -qq curl chromium chromium-driver DEBIAN_FRONTEND=noninteractive",
        TOOLCHAIN,
    ]
    assert "bootstrap: apt-get install -y curl chromium chromium-driver" in out.stderr


def test_not_root_uses_sudo_when_it_needs_no_password(tmp_path: Path) -> None:
    machine = Machine(tmp_path, uid=1000, sudo="no password").has(*TOOLS).with_apt()
    out = machine.run()
    assert out.returncode == 0, out.stderr
    calls = machine.calls()
    assert calls[0] == "sudo -n true"
    assert calls[-1] == TOOLCHAIN
    assert "sudo env DEBIAN_FRONTEND=noninteractive apt-get" in calls[3]
    assert calls[4].startswith("apt-get -o DPkg::Lock::Timeout=900 -q install -y -qq chromium ")
    assert "bootstrap: sudo apt-get install -y chromium" in out.stderr


@pytest.mark.parametrize("sudo", ["password", None], ids=["sudo-asks-a-password", "no-sudo"])
def test_not_root_without_sudo_prints_the_apt_line_and_stops(
    tmp_path: Path, sudo: str | None
) -> None:
    machine = Machine(tmp_path, uid=1000, sudo=sudo).has("git", "curl", "unzip").with_apt()
    out = machine.run()
    assert out.returncode == 1
    assert out.stderr == (
        "bootstrap: missing: chromium chromium-driver; run as root: "
        "apt-get update && apt-get install -y chromium chromium-driver\n"
    )
    assert not any(c.startswith(("apt-get", "python3")) for c in machine.calls())


def test_no_apt_get_names_what_to_install_and_stops(tmp_path: Path) -> None:
    machine = Machine(tmp_path).has("git", "curl", "chromedriver").with_chromium()
    out = machine.run()
    assert out.returncode == 1
    assert "missing: unzip, and this machine has no apt-get" in out.stderr
    assert machine.calls() == []


def test_chromium_still_missing_after_apt_fails(tmp_path: Path) -> None:
    machine = Machine(tmp_path).has(*TOOLS).with_apt(installs_chromium=False)
    out = machine.run()
    assert out.returncode == 1
    assert "apt-get installed chromium but" in out.stderr
    assert not any(c.startswith("python3") for c in machine.calls())


def test_a_failed_go_check_fails_the_bootstrap(tmp_path: Path) -> None:
    machine = Machine(tmp_path).has(*TOOLS).with_chromium()
    machine.fake("python3", 'echo "error: no Go" >&2; exit 1')
    out = machine.run()
    assert out.returncode == 1
    assert out.stderr == "error: no Go\n"
