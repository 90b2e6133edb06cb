"""githash.log/gitdiff.log come from a checkout of this project only: an install from a wheel (site-packages,
perhaps a .venv inside some other clone) records "not a git checkout" rather than another repository's commit; run
from a checkout, they record its commit."""
from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import pretrain
from pretrain.provenance import _git, installed_versions, write_code_files


def test_git_provenance_only_from_a_checkout_of_this_project(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    site_packages = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    site_packages.mkdir(parents=True)
    assert _git(site_packages, "rev-parse", "--show-toplevel") == "not a git checkout\n"
    assert _git(tmp_path / "nosuchdir", "rev-parse", "HEAD") == "not a git checkout\n"
    (tmp_path / "pyproject.toml").write_text("[project]\n", encoding="utf-8")  # a checkout: what -e installs run from
    assert Path(_git(tmp_path, "rev-parse", "--show-toplevel").strip()) == tmp_path.resolve()


def test_the_code_files_record_the_commit_of_the_checkout_the_code_runs_from(tmp_path):
    checkout = Path(pretrain.__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout
    write_code_files(tmp_path)
    assert (tmp_path / "githash.log").read_text(encoding="utf-8") == head
    assert "pytest==" in (tmp_path / "pip_freeze.txt").read_text(encoding="utf-8")


def test_the_installed_versions_are_those_importlib_metadata_parses():
    parsed = {f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions()}
    assert installed_versions() == sorted(parsed, key=str.lower)
