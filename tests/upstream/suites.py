"""The third-party suites the ``upstream`` nox session runs, at pinned versions.

Each suite's tests come from the project's sdist on PyPI (``pip download --no-binary
:all: --no-deps``); the package itself is installed from that same sdist. ``deps`` are
the test requirements the project declares (its requirements files or dependency
groups), less coverage, linters and type checkers. ``subset`` is the ``--subset`` mode:
the test files (or classes) that drive the loop hardest (connections, servers,
websockets, streaming, timeouts), with ``subset_args`` added. ``args`` are pytest options
the suite needs here (its own ``addopts`` run 8 xdist workers or select markers; the
marker selections are the project's CI defaults). ``patches`` are ``(file, old, new)``
replacements made in the unpacked tree (the run stops if ``old`` is not found): uvicorn's
protocol tests get rsloop's HTTP protocol as one more parameter.

websockets' sdists carry no loop tests (17.0 on prune ``tests/``; 16.0's keeps only
seven sans-I/O files, without the ``tests/utils.py`` they import), so its suite comes from
the tagged source Debian packages: the ``.orig.tar.gz`` of Debian's ``python-websockets``
source package, fetched from the Debian archive's pool by the ``upstream`` nox session and
checked against the SHA-256 Debian's ``Sources`` index gives for it (``debian`` below).
Debian carries 15.0.1 (trixie) and 17.1 (sid), not the 16.0 the other suites' environment
pins (tests/upstream/constraints.txt, for uvicorn's websocket tests); only trixie's file is
served by the archive mirror this was built against, so the suite is 15.0.1's, run from its
own source tree (``pythonpath``: ``src`` goes first on ``PYTHONPATH``, so the tests import
the 15.0.1 package they were written for, without its optional C speedups) while 16.0
stays installed for uvicorn. Its timing tests keep their release default (100 times the
developers' timings, for build farms): at 10 times, five of them failed on asyncio itself
at a load average of 9 here.
"""

from __future__ import annotations

SUITES: dict[str, dict] = {
    "aiohttp": {
        "version": "3.14.3",
        "deps": [
            # requirements/runtime-deps.in
            "aiodns>=3.3.0",
            "aiohappyeyeballs>=2.5.0",
            "aiosignal>=1.4.0",
            "attrs>=17.3.0",
            "backports.zstd",
            "Brotli>=1.2",
            "frozenlist>=1.1.1",
            "multidict>=4.5,<7.0",
            "propcache>=0.2.0",
            "yarl>=1.17.0,<2.0",
            # requirements/test-common-base.in and test-common.in (no coverage, mypy,
            # python-on-whales: the autobahn tests it drives are deselected by aiohttp's
            # own default marker expression)
            "freezegun",
            "pkgconfig",
            "proxy.py>=2.4.4rc5",
            "pytest-mock",
            "pytest-timeout",
            "blockbuster",
            "isal",
            "pytest-codspeed",
            "trustme",
            "zlib_ng",
            "gunicorn",
            "re-assert",
            "coverage",  # named by aiohttp's filterwarnings
        ],
        "args": [
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "-m",
            "not dev_mode and not autobahn and not internal",
            # These two start a fresh interpreter per aiohttp module (import cycles, import
            # time) and make no loop: minutes of CPU on 2 cores for nothing the loop does.
            "--ignore=tests/test_circular_imports.py",
            "--ignore=tests/test_imports.py",
        ],
        "subset": [
            "tests/test_web_functional.py",
            "tests/test_web_websocket_functional.py",
            "tests/test_client_ws_functional.py",
            "tests/test_helpers.py::test_when_timeout_smaller_second",
            "tests/test_helpers.py::test_when_timeout_smaller_second_with_low_threshold",
            "tests/test_helpers.py::test_timeout_handle",
            "tests/test_helpers.py::test_timer_context_not_cancelled",
        ],
    },
    "uvicorn": {
        "version": "0.51.0",
        "extras": ["standard"],
        "deps": [
            "pytest-mock",
            "trustme",
            "cryptography>=44.0.3",
            "httpx==0.28.1",
            "a2wsgi==1.10.10",
            "wsproto==1.3.2",
        ],
        "args": ["-p", "no:cacheprovider", "-o", "addopts=-rxXs --strict-markers"],
        "subset": [
            "tests/protocols/test_http.py",
            "tests/protocols/test_websocket.py",
            "tests/test_server.py",
            "tests/test_main.py",
        ],
        # the protocol tests once per fast protocol (httptools, rsloop's) rather than
        # once per HTTP parser
        "subset_args": ["-k", "not h11"],
        # uvicorn's protocol tests take the protocol class as a fixture parameter: rsloop's
        # own HTTP protocol (rsloop.http) is added beside httptools' and h11's, so every
        # test of tests/protocols/test_http.py runs on it too.
        "patches": [
            (
                "tests/conftest.py",
                '        pytest.param("uvicorn.protocols.http.h11_impl:H11Protocol", id="h11"),\n',
                '        pytest.param("uvicorn.protocols.http.h11_impl:H11Protocol", id="h11"),\n'
                '        pytest.param("rsloop.http:HttpProtocol", id="rsloop-http"),\n',
            ),
        ],
    },
    "httpx": {
        "version": "0.28.1",
        "extras": ["brotli", "cli", "http2", "socks", "zstd"],
        "deps": ["uvicorn", "trustme", "chardet", "pytest-mock", "trio"],
        # "network" tests need Internet; the trio parametrizations run no asyncio loop.
        "args": ["-p", "no:cacheprovider", "-m", "not network", "-k", "not trio"],
        "subset": [
            "tests/client/test_async_client.py",
            "tests/test_timeouts.py",
            "tests/client/test_proxies.py",
        ],
    },
    "anyio": {
        "version": "4.16.0",
        "deps": [
            "blockbuster>=1.5.29",
            "hypothesis>=4.18.2",
            "psutil>=5.9",
            "pytest>=9.0",
            "pytest-mock>=3.14",
            "pytest-timeout>=2.4.0",
            "trustme>=1.0.0",
            "truststore>=0.9.1",
        ],
        # The trio parametrizations (trio is installed for httpx) do not run an asyncio
        # loop; uvloop is not installed, so its parametrizations skip themselves.
        # This machine resolves "localhost" to 127.0.0.1 only (no ::1 line in /etc/hosts),
        # so the IPv6 parametrizations fail on every loop; "network" tests need Internet.
        "args": [
            "-p",
            "no:cacheprovider",
            "-k",
            "not trio and not uvloop and not ipv6",
            "-m",
            "not network",
        ],
        "subset": [
            "tests/test_sockets.py::TestTCPStream",
            "tests/test_sockets.py::TestTCPListener",
            "tests/test_sockets.py::TestUNIXStream",
            "tests/streams/test_tls.py",
            "tests/test_from_thread.py::TestBlockingPortalProvider",
            "tests/test_to_thread.py::TestBlockingPortalProvider",
        ],
    },
    "websockets": {
        "version": "15.0.1",
        "debian": {
            "package": "python-websockets",
            "file": "python-websockets_15.0.1.orig.tar.gz",
            # Debian trixie's Sources index, Checksums-Sha256
            "sha256": "8451495265af3e368f794c4dc15c99ce90c771d95560f542bff8c64b5455af3b",
        },
        "pythonpath": "src",
        # tox.ini's deps, less mitmproxy (the proxy tests skip themselves without it)
        "deps": ["werkzeug", "python-socks[asyncio]"],
        # websockets has no pytest configuration: its own pyproject.toml (no pytest table)
        # keeps pytest from taking a configuration from a directory above the tree
        "args": ["-p", "no:cacheprovider", "-c", "pyproject.toml"],
        "subset": [
            "tests/asyncio/test_client.py",
            "tests/asyncio/test_server.py",
            "tests/asyncio/test_connection.py",
            "tests/legacy/test_client_server.py",
        ],
    },
}
