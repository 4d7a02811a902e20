"""The tests lie by what they test, as the house does (docs/layout.md): tests/model the model package, tests/training
the training library (a folder of it by the subpackage it tests, `runs/` for `sinusoidal_encoder_training.runs`;
what spans the library at its top), tests/lab the studies of benchmarks/, tests/repository what the repository keeps
beside the code (docs, claims, packaging, scripts, the layout). Only tests/conftest.py lies loose at tests/. No folder
is a package, so pytest imports each file by its name: the names are unique."""

from __future__ import annotations

from collections import Counter

from conftest import ONE_WORKER_MODULES, REPO

TESTS = REPO / "tests"
# each group folder: the package (or subpackages' root) it mirrors; None for a group that is no package
GROUPS = {
    "model": REPO / "modeling" / "sinusoidal_encoder",
    "training": REPO / "training" / "sinusoidal_encoder_training",
    "lab": REPO / "benchmarks",
    "repository": None,
}


def folders(parent):
    return sorted(path for path in parent.iterdir() if path.is_dir() and not path.name.startswith((".", "__")))


def test_every_test_file_lies_in_a_group_folder():
    loose = sorted(path.name for path in TESTS.glob("*.py") if path.name != "conftest.py")
    assert not loose, f"tests/ holds {loose}: each test file goes into the folder of what it tests ({sorted(GROUPS)})"
    assert [folder.name for folder in folders(TESTS)] == sorted(GROUPS)
    for group, package in GROUPS.items():
        assert package is None or (package / "__init__.py").exists() or (package / "README.md").exists(), group
        assert any((TESTS / group).rglob("test_*.py")), f"tests/{group}/ holds no test file"


def test_a_folder_below_a_group_is_a_subpackage_of_its_package():
    for group, package in GROUPS.items():
        for folder in folders(TESTS / group):
            assert package is not None and (package / folder.name / "__init__.py").exists(), (
                f"tests/{group}/{folder.name}/ mirrors no subpackage of {package and package.relative_to(REPO)}"
            )
            assert not folders(folder), f"tests/{group}/{folder.name}/ holds folders: one level below a group"


def test_the_test_files_names_are_unique_and_no_folder_is_a_package():
    names = Counter(path.name for path in TESTS.rglob("*.py"))
    assert not [name for name, count in names.items() if count > 1]
    assert not list(TESTS.rglob("__init__.py"))


def test_the_modules_sent_to_one_worker_exist_and_share_a_module_fixture():
    """conftest.ONE_WORKER_MODULES: each a test module that makes a module-scoped fixture for its tests."""
    for module in ONE_WORKER_MODULES:
        assert (REPO / module).is_file(), f"conftest.ONE_WORKER_MODULES names {module}, which does not exist"
        assert '@pytest.fixture(scope="module")' in (REPO / module).read_text(), f"{module} has no module fixture"
