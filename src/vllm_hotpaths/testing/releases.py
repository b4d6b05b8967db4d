"""vLLM releases and their CPU environments, derived from each release's own metadata.

A release's environment is `.venvs/vllm-X.Y.Z`: a virtual environment layered on the shared base
`.venvs/base` (CPU torch, Triton, the test tools, this package and the requirements of
BASE_RELEASE, not vLLM; made by `ci/install.sh`) through a `.pth` file, holding vLLM X.Y.Z installed without its dependencies and the requirements its
wheel's metadata lists, less the GPU-only ones (below). pip resolves them against what the base
already has, so an environment costs little more than vLLM's own wheel. An environment is trusted
only once its stamp is written; a failed install removes the folder and names the package.

Stdlib and `packaging` only: `ci/install.sh` runs `python -m vllm_hotpaths.testing.releases
requirements X.Y.Z` before anything else of this package is usable.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

FIRST_RELEASE = "0.16.0"  # the oldest release this suite checks
# ci/install.sh's default release: the base holds its requirements (not vLLM), so that a release's
# own layer holds little more than vLLM and the versions where its pins differ.
BASE_RELEASE = "0.22.0"

# Requirements left out of a CPU environment: torch's own packages (vLLM pins a CUDA torch; the
# base's CPU build serves every release) and packages that exist only for NVIDIA GPUs (CUDA
# kernels and libraries). Matched by normalized name; the prefixes cover families.
GPU_ONLY = frozenset({
    "torch", "torchaudio", "torchvision", "torchcodec", "triton", "xformers", "deep-gemm",
    "tilelang", "quack-kernels", "humming-kernels", "tokenspeed-mla", "fastsafetensors",
    "instanttensor", "nvtx", "pynvvideocodec",
})
GPU_ONLY_PREFIXES = ("nvidia-", "flashinfer-", "cupy-")
LAYOUT = 2  # how a release's folder is laid out: part of its stamp, so older folders are remade


class ReleaseError(Exception):
    """A release that cannot be gated here, or an environment that could not be made: the message
    is one line naming the problem."""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def gpu_only(name: str) -> bool:
    name = normalize(name)
    return name in GPU_ONLY or name.startswith(GPU_ONLY_PREFIXES)


def pip(python: str | Path, *args: str) -> list[str]:
    return [str(python), "-m", "pip", "--disable-pip-version-check", *args]


def index_releases(python: str | Path = sys.executable) -> list[str]:
    """vLLM's final releases on the package index, oldest first (`pip index versions vllm`)."""
    done = subprocess.run(pip(python, "index", "versions", "vllm"), capture_output=True, text=True)
    found = re.search(r"^Available versions: (.+)$", done.stdout, re.M)
    if done.returncode or not found:
        last = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise ReleaseError(f"the package index could not be asked for vLLM's releases ({last})")
    versions = [Version(v.strip()) for v in found.group(1).split(",")]
    return [str(v) for v in sorted(v for v in versions if not v.is_prerelease and not v.is_devrelease)]


def gateable(releases: list[str]) -> list[str]:
    return [v for v in releases if Version(v) >= Version(FIRST_RELEASE)]


def span(releases: list[str]) -> str:
    return f"{releases[0]} to {releases[-1]}, {len(releases)} releases" if releases else "none"


def check_release(version: str, releases: list[str] | None = None) -> str:
    """`version` as the index spells it, or ReleaseError naming the releases that can be gated."""
    try:
        wanted = Version(version)
    except InvalidVersion:
        raise ReleaseError(f"vLLM {version!r} is not a version number (releases: "
                           f"{span(gateable(releases or index_releases()))})") from None
    releases = index_releases() if releases is None else releases
    ok = gateable(releases)
    if wanted < Version(FIRST_RELEASE):
        raise ReleaseError(f"vLLM {version} is older than {FIRST_RELEASE}, the first release this suite "
                           f"checks (releases: {span(ok)})")
    for release in ok:
        if Version(release) == wanted:
            return release
    raise ReleaseError(f"vLLM {version} is not a release on the package index (releases: {span(ok)})")


def metadata(version: str, python: str | Path = sys.executable) -> dict:
    """The core metadata of vLLM `version`'s wheel, as pip resolves it (only the metadata file is
    fetched where the index serves it apart from the wheel)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        done = subprocess.run(pip(python, "install", "--dry-run", "--no-deps", "--ignore-installed", "-q",
                                  "--only-binary=:all:", "--report", str(report), f"vllm=={version}"),
                              capture_output=True, text=True)
        if done.returncode or not report.exists():
            raise ReleaseError(f"vLLM {version}'s metadata could not be read: {failed_package(done.stderr)}")
        return json.loads(report.read_text())["install"][0]["metadata"]


def requirements(version: str, python: str | Path = sys.executable) -> tuple[list[str], list[str]]:
    """(kept, left out): vLLM `version`'s requirements for this machine (extras and markers that do
    not apply dropped), split into those a CPU environment installs and the GPU-only ones."""
    kept, left_out = [], []
    for line in metadata(version, python).get("requires_dist", []):
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        (left_out if gpu_only(req.name) else kept).append(str(req))
    return kept, left_out


def failed_package(pip_output: str) -> str:
    """The package pip's output says it could not install, with pip's own words."""
    patterns = (r"No matching distribution found for (\S+)",
                r"Could not find a version that satisfies the requirement (\S+)",
                r"Cannot install (.+?) because these package versions have conflicting dependencies",
                r"Failed building wheel for (\S+)",
                r"Could not build wheels for (\S+?),")
    for pattern in patterns:
        found = re.search(pattern, pip_output)
        if found:
            return f"{found.group(1)} (pip: {found.group(0)[:300]})"
    lines = [line.strip() for line in pip_output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["pip gave no reason"])[-1][:300]


def base_stamp(base: Path) -> str:
    stamps = sorted(base.glob(".installed-*"))
    if not stamps:
        raise ReleaseError(f"the base environment {base} is not made (ci/install.sh writes its stamp)")
    return stamps[-1].name


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python*/site-packages"))
    if not found:
        raise ReleaseError(f"{venv} has no site-packages folder")
    return found[0]


def make_base(root: Path, base: Path) -> None:
    """The shared base `.venvs/base` (BASE_RELEASE's requirements, no vLLM), made or reused by
    ci/install.sh."""
    env = dict(os.environ, VENV=str(base), VLLM_VERSION=BASE_RELEASE, WITH_VLLM="0")
    if subprocess.run(["bash", str(root / "ci" / "install.sh")], cwd=root, env=env).returncode:
        raise ReleaseError(f"the base environment {base} could not be made (ci/install.sh failed)")


def environment(version: str, root: Path, log=print, releases: list[str] | None = None,
                base: Path | None = None, extra: list[str] = ()) -> Path:
    """The python of `.venvs/vllm-<version>` under `root`, made or reused. Raises ReleaseError for
    a version that cannot be gated or an install that failed (the half-made folder is removed).
    `base`: an existing environment to layer on instead of `.venvs/base`; `extra`: requirements
    added to the release's own (the tests use both)."""
    version = check_release(version, releases)
    venvs = root.resolve() / ".venvs"  # the .pth below names the base by this path: never a relative one
    if base is None:
        base = venvs / "base"
        make_base(root, base)
    kept, left_out = requirements(version, base / "bin" / "python")
    kept += list(extra)
    venv = venvs / f"vllm-{version}"
    stamp = venv / (".installed-" + hashlib.sha256(
        json.dumps([LAYOUT, version, kept, base_stamp(base)]).encode()).hexdigest()[:16])
    if stamp.exists():
        log(f"gate: environment {venv} for vLLM {version} is up to date")
        return venv / "bin" / "python"
    if venv.exists():  # an old or half-made one: never trusted
        shutil.rmtree(venv)
    log(f"gate: making {venv} for vLLM {version}: {len(kept)} requirements from its metadata, "
        f"{len(left_out)} GPU-only left out ({', '.join(Requirement(r).name for r in left_out) or 'none'})")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                       capture_output=True, text=True)
        # The base (torch, Triton, the test tools, this package) comes after the release's own
        # folder on sys.path, its own .pth files processed (the editable install of this package);
        # pip sees it as installed and resolves against it.
        (site_packages(venv) / "_vllm_hotpaths_base.pth").write_text(
            f"import site; site.addsitedir({str(site_packages(base))!r})\n")
        python, base_python = venv / "bin" / "python", base / "bin" / "python"
        held = subprocess.run([str(base_python), "-m", "vllm_hotpaths.testing.releases", "pins"],
                              capture_output=True, text=True, check=True).stdout.split()
        with tempfile.TemporaryDirectory() as scratch:
            constraints = Path(scratch) / "constraints.txt"
            constraints.write_text("".join(f"{pin}\n" for pin in held))
            requirements_file = Path(scratch) / "requirements.txt"
            requirements_file.write_text("".join(f"{r}\n" for r in kept))
            for args in (["-r", str(requirements_file), "-c", str(constraints)],
                         ["--no-deps", f"vllm=={version}"]):
                # the base's pip installs into the release's folder (the folder has no pip)
                done = subprocess.run(pip(base_python, "--python", str(python), "install", "-q", *args),
                                      capture_output=True, text=True)
                if done.returncode:
                    raise ReleaseError(f"installing vLLM {version}'s requirements into {venv} failed on "
                                       f"{failed_package(done.stdout + done.stderr)}")
        stamp.touch()
    except BaseException as err:
        shutil.rmtree(venv, ignore_errors=True)
        if isinstance(err, subprocess.CalledProcessError):
            raise ReleaseError(f"making {venv} failed: {(err.stderr or '').strip()[-300:]}") from None
        raise
    log(f"gate: environment {venv} for vLLM {version} made")
    return venv / "bin" / "python"


def held_pins() -> list[str]:
    """torch and Triton as this environment has them: a release's requirements must not replace them."""
    import importlib.metadata

    found = []
    for name in ("torch", "triton"):
        try:
            found.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def unvalidated(releases: list[str], validated: Path) -> list[str]:
    """The releases that the validated file (the plugin's `validated.json`) has no entry for."""
    recorded = json.loads(validated.read_text()) if validated.exists() else {}
    known = {version for versions in recorded.values() for version in versions}
    return [v for v in releases if v not in known]


def buildkite_steps(releases: list[str]) -> str:
    """A Buildkite pipeline with one GPU gate step per release (`buildkite-agent pipeline upload`)."""
    lines = ["steps:"]
    for version in releases:
        lines += [f'  - label: ":vllm: gate vLLM {version} (CUDA)"', "    command: bash ci/gpu/gate-ci.sh",
                  "    env:", f'      VLLM_VERSION: "{version}"', "      PROFILE: gate",
                  "      ARTIFACTS: artifacts", "    agents:", "      queue: gpu", "    timeout_in_minutes: 240",
                  "    artifact_paths:", '      - "artifacts/**/*"']
    return "\n".join(lines if releases else ["steps: []"])


def main(argv: list[str]) -> int:
    """`python -m vllm_hotpaths.testing.releases requirements X.Y.Z`: the release's CPU
    requirements, one a line (what ci/install.sh installs); `pins`: torch and Triton as installed
    here (ci/install.sh holds them while it installs); `releases [--json] [--unvalidated FILE]`:
    the gateable releases on the index (only those FILE has no entry for), one a line or as a JSON
    list (a GitHub Actions matrix); `buildkite [--unvalidated FILE]`: the same as Buildkite steps."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m vllm_hotpaths.testing.releases")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("requirements").add_argument("version")
    sub.add_parser("pins")
    for name in ("releases", "buildkite"):
        command = sub.add_parser(name)
        command.add_argument("--unvalidated", metavar="FILE", type=Path,
                             help="only the releases this validated file has no entry for")
        if name == "releases":
            command.add_argument("--json", action="store_true", help="a JSON list")
    args = parser.parse_args(argv)
    try:
        if args.command == "requirements":
            kept, left_out = requirements(args.version)
            print("\n".join(kept))
            print(f"# left out (GPU-only): {', '.join(left_out)}", file=sys.stderr)
        elif args.command == "pins":
            print("\n".join(held_pins()))
        else:
            found = gateable(index_releases())
            found = unvalidated(found, args.unvalidated) if args.unvalidated else found
            if args.command == "buildkite":
                print(buildkite_steps(found))
            else:
                print(json.dumps(found) if args.json else "\n".join(found))
    except ReleaseError as err:
        print(f"releases: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
