"""The Go toolchain the dev cluster is built with, and where the dev cluster caches things.

:func:`find_go` takes ``go`` from PATH when it is Go >= 1.26, else the toolchain cached
under ``~/.cache/reconciler/go-<version>``. :func:`ensure_go` fetches that toolchain when
neither is there: the zip the Go module proxy serves as ``golang.org/toolchain`` (what
``go`` itself downloads when it switches toolchains), its ``h1:`` hash checked against the
one pinned here. Every ``go`` the project runs gets :func:`go_env` (``GOTOOLCHAIN=local``:
the go that was checked is the go that builds, it never switches to another).

Standard library only: ``scripts/bootstrap`` runs ``python3 -m
reconciler.devcluster.toolchain`` before the package and its dependencies are installed.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

GO_MIN = (1, 26)
GO_VERSION = "1.26.8"
DEFAULT_PROXY = "https://proxy.golang.org"
BY_HAND = "install Go >= 1.26 from https://go.dev/dl and put its bin/ on PATH"
# The proxy's toolchain zips' h1: hashes (go.sum's form). Another version or platform has
# no pin, so it is never fetched: install Go by hand. A new GO_VERSION's pins are the "Sum"
# of `go mod download -json golang.org/toolchain@v0.0.1-go<version>.<platform>`.
PINNED_H1: dict[tuple[str, str], str] = {
    ("1.26.8", "linux-amd64"): "h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM=",
    ("1.26.8", "linux-arm64"): "h1:sYL/O6MqS68ML0kjsQ36WoYIpJqkw60TxizWUYUKQMc=",
}
# A toolchain zip is about 70 MB; a proxy that sends more is not serving one.
MAX_ZIP_BYTES = 512 * 1024 * 1024

Say = Callable[[str], None]


class ToolchainError(RuntimeError):
    """No usable Go and none could be fetched; the message is one line saying what to do."""


def cache_root() -> Path:
    """``$RECONCILER_CACHE_DIR``, else ``$XDG_CACHE_HOME/reconciler`` (``~/.cache``)."""
    override = os.environ.get("RECONCILER_CACHE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reconciler"


def cached_go(version: str = GO_VERSION) -> Path:
    return cache_root() / f"go-{version}" / "bin" / "go"


def parse_version(text: str) -> tuple[int, int] | None:
    """``(1, 26)`` from ``go version``'s output (``go version go1.26.8 linux/amd64``,
    ``go version devel go1.27-abc ...``, ``go1.26rc1``)."""
    m = re.search(r"\bgo(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def go_version(go: Path | str) -> tuple[int, int] | None:
    """The version of the go at ``go``, None when it does not run."""
    try:
        out = subprocess.run(
            [str(go), "version"],
            env=go_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(out.stdout) if out.returncode == 0 else None


def _usable(go: Path | str) -> bool:
    if not Path(go).is_file():
        return False
    version = go_version(go)
    return version is not None and version >= GO_MIN


def find_go() -> Path | None:
    """Go >= 1.26: the one on PATH, else the cached toolchain; None when neither is."""
    for candidate in (shutil.which("go"), cached_go()):
        if candidate and _usable(candidate):
            return Path(candidate)
    return None


def go_env(go: Path | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment to run ``go`` in: ``GOTOOLCHAIN=local``, and ``go``'s bin directory
    first on PATH (so a tool that runs ``go`` by name gets the same one)."""
    env = dict(os.environ if base is None else base)
    env["GOTOOLCHAIN"] = "local"
    if go is not None:
        env["PATH"] = os.pathsep.join(p for p in (str(go.parent), env.get("PATH")) if p)
    return env


def host_platform() -> str:
    """The toolchain zip's platform suffix, ``linux-amd64`` style."""
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
    machine = platform.machine().lower()
    return f"{sys.platform}-{arch.get(machine, machine)}"


def proxy_url(goproxy: str | None = None) -> str:
    """The module proxy to fetch from: the first URL in ``$GOPROXY`` (its entries split by
    ``,`` or ``|``; ``direct`` is skipped, a toolchain comes from a proxy), else
    proxy.golang.org. ``off`` before any URL refuses, as it does for ``go``."""
    value = os.environ.get("GOPROXY", "") if goproxy is None else goproxy
    for entry in re.split(r"[,|]", value):
        entry = entry.strip()
        if entry == "off":
            raise ToolchainError(f"GOPROXY=off forbids fetching Go: {BY_HAND}")
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    return DEFAULT_PROXY


def zip_h1(zip_path: Path) -> str:
    """The ``h1:`` hash Go records for a module zip (golang.org/x/mod/sumdb/dirhash
    Hash1): SHA-256 over the lines ``<sha256 hex>  <name>\\n`` of its entries, by name."""
    lines: list[str] = []
    with zipfile.ZipFile(zip_path) as archive:
        for info in sorted(archive.infolist(), key=lambda i: i.filename.encode()):
            if "\n" in info.filename:
                raise ToolchainError(f"a file name in {zip_path.name} has a newline")
            digest = hashlib.sha256()
            with archive.open(info) as member:
                for chunk in iter(lambda: member.read(1 << 20), b""):
                    digest.update(chunk)
            lines.append(f"{digest.hexdigest()}  {info.filename}\n")
    summary = hashlib.sha256("".join(lines).encode()).digest()
    return "h1:" + base64.b64encode(summary).decode()


def _download(url: str, out: Path, timeout: float) -> int:
    """``url`` into ``out``; the bytes written."""
    written = 0
    with urllib.request.urlopen(url, timeout=timeout) as response, out.open("wb") as sink:
        for chunk in iter(lambda: response.read(1 << 20), b""):
            written += len(chunk)
            if written > MAX_ZIP_BYTES:
                raise ToolchainError(f"{url} sent more than {MAX_ZIP_BYTES >> 20} MiB: {BY_HAND}")
            sink.write(chunk)
    return written


def _extract(zip_path: Path, prefix: str, into: Path) -> None:
    """The files under ``prefix`` into ``into``, with exec bits on bin/ and pkg/tool/
    (module zips keep no modes). Names that climb out, and symlinks, are refused."""
    with zipfile.ZipFile(zip_path) as archive:
        for info in archive.infolist():
            if not info.filename.startswith(prefix):
                raise ToolchainError(f"{info.filename!r} is outside {prefix!r}")
            rel = PurePosixPath(info.filename[len(prefix) :])
            if rel.is_absolute() or ".." in rel.parts or "\\" in info.filename:
                raise ToolchainError(f"{info.filename!r} is not a plain relative path")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise ToolchainError(f"{info.filename!r} is a symlink")
            target = into.joinpath(*rel.parts)
            if info.is_dir() or not rel.parts:
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as member, target.open("wb") as sink:
                shutil.copyfileobj(member, sink, 1 << 20)
            runnable = rel.parts[0] == "bin" or rel.parts[:2] == ("pkg", "tool")
            target.chmod(0o755 if runnable else 0o644)


def fetch_go(
    version: str = GO_VERSION,
    *,
    plat: str | None = None,
    proxy: str | None = None,
    expected_h1: str | None = None,
    timeout: float = 120.0,
) -> Path:
    """Fetch go``version`` from the module proxy into ``cache_root()/go-<version>`` and
    return its ``bin/go``. The zip's hash must be ``expected_h1`` (default: the pin)."""
    plat = plat or host_platform()
    proxy = proxy or proxy_url()
    expected = expected_h1 or PINNED_H1.get((version, plat))
    if expected is None:
        raise ToolchainError(f"no pinned checksum for go{version} on {plat}: {BY_HAND}")
    module = f"golang.org/toolchain@v0.0.1-go{version}.{plat}"
    url = f"{proxy}/golang.org/toolchain/@v/v0.0.1-go{version}.{plat}.zip"
    dest = cached_go(version).parents[1]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"go-{version}-", dir=dest.parent) as tmp:
        archive = Path(tmp) / "go.zip"
        try:
            _download(url, archive, timeout)
        except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError is an OSError
            reason = getattr(exc, "reason", None) or exc
            raise ToolchainError(f"fetching {url} failed ({reason}): {BY_HAND}") from None
        try:
            got = zip_h1(archive)
        except zipfile.BadZipFile:
            raise ToolchainError(f"{url} is not a zip: {BY_HAND}") from None
        if got != expected:
            raise ToolchainError(f"{url} has hash {got}, not the pinned {expected}: {BY_HAND}")
        unpacked = Path(tmp) / "go"
        _extract(archive, f"{module}/", unpacked)
        archive.unlink()
        go = dest / "bin" / "go"
        if dest.exists() and not _usable(go):  # what an interrupted copy left: replace it
            dest.rename(Path(tmp) / "broken")
        try:
            unpacked.rename(dest)
        except OSError:
            if not dest.is_dir():  # else a concurrent fetch got there first: keep its copy
                raise
    if not _usable(go):
        raise ToolchainError(f"the fetched {go} does not run as Go >= 1.26: {BY_HAND}")
    return go


def ensure_go(say: Say = print) -> Path:
    """Go >= 1.26 (:func:`find_go`), fetched into the cache first when there is none; what
    it fetches is said in one line before, and a failure is one line saying what to do."""
    found = find_go()
    if found is not None:
        return found
    dest = cached_go().parents[1]
    proxy = proxy_url()
    say(
        f"Go >= 1.26 is not on PATH: fetching go{GO_VERSION} from {proxy} into {dest} "
        f"(to use your own instead: {BY_HAND})"
    )
    started = time.monotonic()
    go = fetch_go(proxy=proxy)
    say(f"go{GO_VERSION} ready in {time.monotonic() - started:.0f}s: {go}")
    return go


def main() -> int:
    """``python3 -m reconciler.devcluster.toolchain``: make sure Go is there, say which."""
    try:
        go = ensure_go(lambda line: print(line, file=sys.stderr, flush=True))
    except ToolchainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = subprocess.run([str(go), "version"], env=go_env(go), capture_output=True, text=True)
    print(f"{out.stdout.strip()} ({go})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
