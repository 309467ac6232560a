"""The admin's YAML: HiveD's config format (plus a `topogang:` section), loaded, checked, summarised.

`load_config(path)` gives a `LoadedConfig` whose `.spec` is the core's input, or raises `ConfigError`
listing every problem as `FILE: path.to.field: reason`. `validate(spec)` runs the same checks on a
spec built in code. The `cli_*` functions are the `topogang validate | generate | schema` commands.
"""

from config.cli import cli_generate, cli_schema, cli_validate
from config.generate import GenerateError, generate_spec, generate_yaml
from config.load import ConfigError, LoadedConfig, load_config, load_config_text
from config.problems import ConfigWarning, errors_of, is_warning, warnings_of
from config.summary import summarize, summary_data
from config.validate import Analysis, analyze, validate

__all__ = [
    "Analysis",
    "ConfigError",
    "ConfigWarning",
    "GenerateError",
    "LoadedConfig",
    "analyze",
    "cli_generate",
    "cli_schema",
    "cli_validate",
    "errors_of",
    "generate_spec",
    "generate_yaml",
    "is_warning",
    "load_config",
    "load_config_text",
    "summarize",
    "summary_data",
    "validate",
    "warnings_of",
]
