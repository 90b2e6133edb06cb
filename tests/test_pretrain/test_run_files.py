"""githash.log/gitdiff.log come from a checkout of this project only: an install from a wheel (site-packages,
perhaps a .venv inside some other clone) records "not a git checkout" rather than another repository's commit."""
from __future__ import annotations

import subprocess
from pathlib import Path

from pretrain.run.run_files import _git


def test_git_provenance_only_from_a_checkout_of_this_project(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    site_packages = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages"
    site_packages.mkdir(parents=True)
    assert _git(site_packages, "rev-parse", "--show-toplevel") == "not a git checkout\n"
    assert _git(tmp_path / "nosuchdir", "rev-parse", "HEAD") == "not a git checkout\n"
    (tmp_path / "pyproject.toml").write_text("[project]\n", encoding="utf-8")  # a checkout: what -e installs run from
    assert Path(_git(tmp_path, "rev-parse", "--show-toplevel").strip()) == tmp_path.resolve()
