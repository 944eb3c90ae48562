from pathlib import Path

import pytest

from kernel.config import ConfigError, find_root, load_config
from tests.conftest import run_cli


def test_defaults_without_a_config_file(tmp_path: Path):
    config = load_config(tmp_path, environ={})
    assert config.source_dirs == ["."]
    assert config.index_file == ".markdownvdb.index"
    assert config.chunk_max_tokens == 512 and config.chunk_overlap_tokens == 50
    assert config.search_default_limit == 10 and config.search_min_score == 0.0
    assert config.embedding_provider == "local" and config.embedding_dimensions == 256


def test_environment_beats_file_beats_default(tmp_path: Path):
    (tmp_path / ".markdownvdb").write_text(
        "# comment\nMDVDB_SEARCH_DEFAULT_LIMIT=7\nexport MDVDB_SOURCE_DIRS='docs, notes'\n"
        "MDVDB_CHUNK_MAX_TOKENS=300\n"
    )
    config = load_config(tmp_path, environ={"MDVDB_CHUNK_MAX_TOKENS": "200"})
    assert config.search_default_limit == 7
    assert config.source_dirs == ["docs", "notes"]
    assert config.chunk_max_tokens == 200
    assert config.origins["MDVDB_CHUNK_MAX_TOKENS"] == "the environment"
    assert config.origins["MDVDB_SEARCH_DEFAULT_LIMIT"].endswith(".markdownvdb")


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"MDVDB_CHUNK_MAX_TOKENS": "lots"}, "MDVDB_CHUNK_MAX_TOKENS (from the environment)"),
        ({"MDVDB_EMBEDDING_PROVIDER": "magic"}, "MDVDB_EMBEDDING_PROVIDER"),
        (
            {"MDVDB_CHUNK_MAX_TOKENS": "100", "MDVDB_CHUNK_OVERLAP_TOKENS": "100"},
            "MDVDB_CHUNK_OVERLAP_TOKENS",
        ),
        ({"MDVDB_WATCH": "maybe"}, "MDVDB_WATCH"),
        ({"MDVDB_CLUSTERING_REBALANCE_THRESHOLD": "-3"}, "MDVDB_CLUSTERING_REBALANCE_THRESHOLD"),
        ({"MDVDB_CLUSTERING_REBALANCE_SHARE": "1.5"}, "MDVDB_CLUSTERING_REBALANCE_SHARE"),
    ],
)
def test_bad_values_name_the_variable(tmp_path: Path, env: dict, needle: str):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_config(tmp_path, environ=env)


def test_bad_value_in_file_is_exit_2_naming_the_file(tmp_path: Path):
    (tmp_path / ".markdownvdb").write_text("MDVDB_SEARCH_DEFAULT_LIMIT=ten\n")
    result = run_cli("status", "--root", str(tmp_path))
    assert result.returncode == 2
    assert "MDVDB_SEARCH_DEFAULT_LIMIT" in result.stderr
    assert ".markdownvdb" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_root_is_found_upward(tmp_path: Path):
    (tmp_path / ".markdownvdb").write_text("")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_root(deep) == tmp_path.resolve()
    # Without a config file anywhere above, the starting folder is the root.
    lone = tmp_path.parent / (tmp_path.name + "-lone")
    lone.mkdir()
    assert find_root(lone) == lone.resolve()


def test_the_settings_table_is_generated_from_the_settings():
    """docs/configuration.md's table is kernel.config.SETTINGS, as the generator writes it:
    a setting added or a default changed without regenerating it fails."""
    import runpy

    generator = runpy.run_path(
        str(Path(__file__).resolve().parents[1] / "docs/generate_configuration.py")
    )
    page = generator["PAGE"].read_text(encoding="utf-8")
    assert generator["generated"](page) == page
    from kernel.config import SETTINGS

    for setting in SETTINGS:
        assert f"| `{setting.env}` |" in page
