"""The documentation says what the code does: the `--impl` contracts in docs/checking-your-patch.md
are the registry's, the README stays an entry point, and relative links resolve."""

import re

from vllm_hotpaths import registry
from vllm_hotpaths.cli import contracts_in


def test_contracts_page_shows_the_registry_contracts(pytestconfig):
    page = (pytestconfig.rootpath / "docs" / "checking-your-patch.md").read_text()
    start, end = contracts_in(page)
    assert page[start:end].rstrip("\n") == registry.contracts_text(), (
        "docs/checking-your-patch.md differs from the registry: run "
        "`vllm-hotpaths contracts --write docs/checking-your-patch.md`")


def test_readme_is_an_entry_point(pytestconfig):
    lines = (pytestconfig.rootpath / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: details belong in docs/"


def test_relative_links_resolve(pytestconfig):
    root = pytestconfig.rootpath
    broken = []
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(root)} -> {target}")
    assert not broken, broken
