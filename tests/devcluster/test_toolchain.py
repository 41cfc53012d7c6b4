"""Go for the dev cluster (reconciler/devcluster/toolchain.py): which go is used, the fetch
from a module proxy (a local HTTP server serving a fake toolchain zip: no network), its
hash check, and what the build and ``reconciler demo`` say when there is no Go."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.helpers import refused_port

from reconciler.devcluster import build, toolchain
from reconciler.devcluster.toolchain import ToolchainError

VERSION = toolchain.GO_VERSION
PLAT = "linux-amd64"
PREFIX = f"golang.org/toolchain@v0.0.1-go{VERSION}.{PLAT}/"


def _fake_go(version: str) -> str:
    return f'#!/bin/sh\necho "go version go{version} linux/amd64"\n'


def _toolchain_zip(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def _good_zip(path: Path) -> Path:
    return _toolchain_zip(
        path,
        {
            PREFIX + "bin/go": _fake_go(VERSION),
            PREFIX + "pkg/tool/linux_amd64/compile": "#!/bin/sh\n",
            PREFIX + "src/fmt/print.go": "package fmt\n",
            PREFIX + "VERSION": f"go{VERSION}\n",
        },
    )


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache and a PATH with no go: a bin dir the test may fill."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("RECONCILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GOPROXY", raising=False)
    return bin_dir


def _put(bin_dir: Path, name: str, text: str) -> Path:
    path = bin_dir / name
    path.write_text(text)
    path.chmod(0o755)
    return path


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A module proxy on 127.0.0.1 serving ``root``; returns its URL and the zip's path."""
    root = tmp_path / "proxy"
    at = root / "golang.org" / "toolchain" / "@v"
    at.mkdir(parents=True)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield (
            f"http://127.0.0.1:{server.server_address[1]}",
            at / f"v0.0.1-go{VERSION}.{PLAT}.zip",
        )
    finally:
        server.shutdown()
        server.server_close()


# --- which go -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("go version go1.26.8 linux/amd64", (1, 26)),
        ("go version go1.27rc1 linux/arm64", (1, 27)),
        ("go version devel go1.28-abc123 Tue Jan 1 linux/amd64", (1, 28)),
        ("go version go1.9 linux/amd64", (1, 9)),
        ("bash: go: command not found", None),
    ],
)
def test_the_version_is_read_from_go_version(output: str, version: tuple[int, int]) -> None:
    assert toolchain.parse_version(output) == version


def test_the_minimum_covers_every_wrapper_modules_go_directive() -> None:
    """The build runs with GOTOOLCHAIN=local, so a go older than a wrapper's ``go`` line
    would refuse it: GO_MIN must be at least each of them."""
    for mod in sorted(build.GO_DIR.glob("*/go.mod")):
        m = re.search(r"^go (\d+)\.(\d+)", mod.read_text(), flags=re.M)
        assert m, mod
        assert (int(m.group(1)), int(m.group(2))) <= toolchain.GO_MIN, mod
    assert toolchain.parse_version(f"go{toolchain.GO_VERSION}") == toolchain.GO_MIN


def test_go_on_path_is_used_when_new_enough(isolated: Path) -> None:
    go = _put(isolated, "go", _fake_go("1.27.1"))
    assert toolchain.find_go() == go


def test_a_go_too_old_on_path_gives_way_to_the_cached_toolchain(isolated: Path) -> None:
    _put(isolated, "go", _fake_go("1.22.5"))
    assert toolchain.find_go() is None
    cached = toolchain.cached_go()
    cached.parent.mkdir(parents=True)
    _put(cached.parent, "go", _fake_go(VERSION))
    assert toolchain.find_go() == cached


def test_a_go_that_does_not_run_is_not_used(isolated: Path) -> None:
    _put(isolated, "go", "#!/bin/sh\nexit 3\n")
    assert toolchain.find_go() is None


def test_go_runs_with_gotoolchain_local_and_its_bin_first_on_path(isolated: Path) -> None:
    env = toolchain.go_env(Path("/opt/go/bin/go"), {"PATH": "/usr/bin", "GOTOOLCHAIN": "auto"})
    assert env["GOTOOLCHAIN"] == "local"
    assert env["PATH"] == f"/opt/go/bin{os.pathsep}/usr/bin"


@pytest.mark.parametrize(
    ("goproxy", "url"),
    [
        ("", "https://proxy.golang.org"),
        ("https://goproxy.example/,direct", "https://goproxy.example"),
        ("direct|http://127.0.0.1:9/x", "http://127.0.0.1:9/x"),
        ("direct", "https://proxy.golang.org"),
    ],
)
def test_the_proxy_is_the_first_url_of_goproxy(goproxy: str, url: str) -> None:
    assert toolchain.proxy_url(goproxy) == url


def test_goproxy_off_forbids_the_fetch_and_says_what_to_do() -> None:
    with pytest.raises(ToolchainError, match=r"GOPROXY=off .*https://go\.dev/dl"):
        toolchain.proxy_url("off")


# --- the hash -------------------------------------------------------------------------------


def test_the_zip_hash_is_the_one_go_computes(tmp_path: Path) -> None:
    """``go mod download`` from a file proxy (no network) reports the zip's ``Sum``."""
    go = toolchain.find_go()
    if go is None:
        pytest.skip("needs Go >= 1.26 on PATH or in the cache: run scripts/bootstrap")
    version = "v0.0.1-go1.99.0.linux-amd64"
    at = tmp_path / "proxy" / "golang.org" / "toolchain" / "@v"
    at.mkdir(parents=True)
    prefix = f"golang.org/toolchain@{version}/"
    # names chosen so that sorting the lines (hash first) differs from sorting by name
    _toolchain_zip(
        at / f"{version}.zip",
        {prefix + "b": "first\n", prefix + "a/z": "second\n", prefix + "VERSION": "go1.99.0\n"},
    )
    (at / f"{version}.mod").write_text("module golang.org/toolchain\n")
    (at / f"{version}.info").write_text(f'{{"Version": "{version}"}}\n')
    env = toolchain.go_env(go) | {
        "GOPROXY": (tmp_path / "proxy").as_uri(),
        "GOSUMDB": "off",
        "GOMODCACHE": str(tmp_path / "modcache"),
        "GOFLAGS": "-modcacherw",
    }
    out = subprocess.run(
        [str(go), "mod", "download", "-json", f"golang.org/toolchain@{version}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f'"Sum": "{toolchain.zip_h1(at / f"{version}.zip")}"' in out.stdout


def test_every_pin_is_an_h1_hash() -> None:
    for (version, plat), h1 in toolchain.PINNED_H1.items():
        assert version == toolchain.GO_VERSION and re.fullmatch(r"linux-(amd64|arm64)", plat)
        assert re.fullmatch(r"h1:[A-Za-z0-9+/]{43}=", h1), h1


# --- the fetch ------------------------------------------------------------------------------


def test_the_toolchain_is_fetched_into_the_cache_and_found_there(
    isolated: Path, proxy: tuple[str, Path]
) -> None:
    url, zip_path = proxy
    _good_zip(zip_path)
    go = toolchain.fetch_go(plat=PLAT, proxy=url, expected_h1=toolchain.zip_h1(zip_path))
    assert go == toolchain.cached_go()
    root = go.parents[1]
    # module zips keep no modes: the tools are made runnable, the rest is not
    assert os.access(go, os.X_OK)
    assert os.access(root / "pkg/tool/linux_amd64/compile", os.X_OK)
    assert stat.S_IMODE((root / "src/fmt/print.go").stat().st_mode) == 0o644
    assert (root / "VERSION").read_text() == f"go{VERSION}\n"
    assert [p.name for p in root.parent.iterdir()] == [root.name]  # no temp dir left
    assert toolchain.find_go() == go


def test_a_broken_cached_toolchain_is_replaced(isolated: Path, proxy: tuple[str, Path]) -> None:
    """What an interrupted copy left (a go that does not run) is not kept."""
    url, zip_path = proxy
    _good_zip(zip_path)
    broken = toolchain.cached_go()
    broken.parent.mkdir(parents=True)
    _put(broken.parent, "go", "#!/bin/sh\nexit 1\n")
    assert toolchain.find_go() is None
    go = toolchain.fetch_go(plat=PLAT, proxy=url, expected_h1=toolchain.zip_h1(zip_path))
    assert go == broken and toolchain.find_go() == go
    assert (go.parents[1] / "VERSION").is_file()


def test_a_zip_whose_hash_is_not_the_pinned_one_is_refused(
    isolated: Path, proxy: tuple[str, Path]
) -> None:
    url, zip_path = proxy
    _good_zip(zip_path)
    pinned = "h1:" + "A" * 43 + "="
    with pytest.raises(ToolchainError, match=r"not the pinned .*https://go\.dev/dl"):
        toolchain.fetch_go(plat=PLAT, proxy=url, expected_h1=pinned)
    assert not toolchain.cached_go().exists()
    assert list(toolchain.cache_root().iterdir()) == []


@pytest.mark.parametrize(
    "name", ["golang.org/toolchain@v0.0.1-go1.26.8.linux-amd64/../../evil", "elsewhere/bin/go"]
)
def test_a_zip_with_a_path_outside_the_toolchain_is_refused(
    isolated: Path, proxy: tuple[str, Path], name: str
) -> None:
    url, zip_path = proxy
    _toolchain_zip(zip_path, {PREFIX + "bin/go": _fake_go(VERSION), name: "x"})
    with pytest.raises(ToolchainError, match=r"not a plain relative path|is outside"):
        toolchain.fetch_go(plat=PLAT, proxy=url, expected_h1=toolchain.zip_h1(zip_path))
    assert not toolchain.cached_go().exists()
    assert not (isolated.parent / "evil").exists()


def test_a_platform_without_a_pin_is_not_fetched(isolated: Path) -> None:
    with pytest.raises(ToolchainError, match=r"no pinned checksum .* https://go\.dev/dl"):
        toolchain.fetch_go(plat="plan9-386", proxy="http://127.0.0.1:9")


def test_an_unreachable_proxy_says_how_to_get_go_in_one_line(isolated: Path) -> None:
    with refused_port() as port, pytest.raises(ToolchainError) as err:
        toolchain.fetch_go(plat=PLAT, proxy=f"http://127.0.0.1:{port}")
    assert "\n" not in str(err.value)
    assert "https://go.dev/dl" in str(err.value)


def test_ensure_go_says_what_it_fetches_before_it_fetches(
    isolated: Path, proxy: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, zip_path = proxy
    _good_zip(zip_path)
    monkeypatch.setenv("GOPROXY", f"{url},direct")
    monkeypatch.setattr(toolchain, "host_platform", lambda: PLAT)
    monkeypatch.setitem(toolchain.PINNED_H1, (VERSION, PLAT), toolchain.zip_h1(zip_path))
    said: list[str] = []
    go = toolchain.ensure_go(said.append)
    assert go == toolchain.cached_go()
    assert said[0].startswith(f"Go >= 1.26 is not on PATH: fetching go{VERSION} from {url} ")
    assert "https://go.dev/dl" in said[0]
    assert said[1].startswith(f"go{VERSION} ready in ")
    said.clear()
    assert toolchain.ensure_go(said.append) == go  # cached now: nothing fetched, nothing said
    assert said == []


# --- no Go: the build and the demo ----------------------------------------------------------


def test_the_build_stops_before_building_when_there_is_no_go(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOPROXY", "off")
    said: list[str] = []
    with pytest.raises(build.BuildError) as err:
        build.ensure_binaries(said.append, helm=False)
    assert "\n" not in str(err.value)
    assert "https://go.dev/dl" in str(err.value)
    assert not any(line.startswith("to build:") for line in said), said
    assert not list(toolchain.cache_root().glob("build-*.log"))


def _which(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is not installed"
    return found


def test_the_demo_says_how_to_get_go_in_one_line_before_any_build(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(_which("git"))
    cache = tmp_path / "cache"
    with refused_port() as port:
        env = dict(
            os.environ,
            PATH=str(bin_dir),
            RECONCILER_CACHE_DIR=str(cache),
            GOPROXY=f"http://127.0.0.1:{port}",
        )
        demo = subprocess.run(
            [
                sys.executable,
                *("-m", "reconciler", "demo"),
                *("--workdir", str(tmp_path / "w"), "--state-dir", str(tmp_path / "state")),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert demo.returncode == 1, demo.stdout + demo.stderr
    said = demo.stdout.splitlines()
    fetching = [line for line in said if "Go >= 1.26 is not on PATH: fetching" in line]
    assert len(fetching) == 1, said
    assert not any("to build:" in line for line in said), said
    errors = demo.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: "), demo.stderr
    assert "https://go.dev/dl" in errors[0]
    assert not list(cache.glob("build-*.log")) and not (cache / "bin").exists()


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a child with no Go and an empty binary cache (its own basetemp: CI's
    PYTEST_ADDOPTS names this session's, which a child would wipe)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(_which("git"))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env |= {
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{bin_dir}",
        "RECONCILER_CACHE_DIR": str(tmp_path / "cache"),
        "GOPROXY": "off",
    }
    env.pop("RECONCILER_TEST_KUBECONFIG", None)
    return subprocess.run(
        [
            sys.executable,
            *("-m", "pytest", "-p", "no:cacheprovider", "-q"),
            f"--basetemp={tmp_path / 'inner'}",
            *args,
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_test_session_builds_before_the_first_cluster_test_and_stops_if_it_cannot(
    tmp_path: Path,
) -> None:
    out = _pytest(tmp_path, "tests/cluster/test_helm_chart.py")
    assert out.returncode == 1, out.stdout[-3000:]
    assert "before the first test: the dev cluster is built from Go modules" in out.stdout
    assert "GOPROXY=off forbids fetching Go" in out.stdout
    assert not re.search(r"\d+ (passed|failed|error)", out.stdout), out.stdout[-3000:]


@pytest.mark.slow
def test_a_session_without_cluster_tests_builds_nothing(tmp_path: Path) -> None:
    out = _pytest(tmp_path, "tests/cluster/test_helm_chart.py", "-m", "not cluster")
    assert out.returncode == 5, out.stdout[-3000:]  # all deselected, nothing built
    assert "before the first test" not in out.stdout


def test_the_binaries_a_session_builds_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.cluster import binaries_to_build

    monkeypatch.setenv("RECONCILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RECONCILER_TEST_KUBECONFIG", raising=False)

    def item(cluster: bool, *fixtures: str) -> SimpleNamespace:
        marker = SimpleNamespace(name="cluster") if cluster else None
        return SimpleNamespace(get_closest_marker=lambda name: marker, fixturenames=fixtures)

    everything = set(build.cached_binaries().all())
    chart, browser, pure = item(True, "helm", "kube"), item(True, "kube"), item(False)
    assert binaries_to_build([pure]) == set()
    assert binaries_to_build([pure, browser]) == everything - {"helm"}
    assert binaries_to_build([browser, chart]) == everything
    for name, path in build.cached_binaries().all().items():
        if name != "helm":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    assert binaries_to_build([browser]) == set()
    assert binaries_to_build([chart]) == {"helm"}
    monkeypatch.setenv("RECONCILER_TEST_KUBECONFIG", str(tmp_path / "kubeconfig"))
    assert binaries_to_build([chart]) == set()
