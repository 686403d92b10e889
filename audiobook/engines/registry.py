"""Engine names → classes. Registering an engine is one line here."""

from __future__ import annotations

from importlib import import_module

from audiobook.engines.base import Engine
from audiobook.errors import ConfigError
from audiobook.settings import Settings

# Imported lazily: the edge engine pulls in aiohttp, the local one LiteRT.
ENGINES: dict[str, str] = {
    "local": "audiobook.engines.local.engine:LocalEngine",
    "edge": "audiobook.engines.edge:EdgeEngine",
}


def engine_class(name: str) -> type[Engine]:
    try:
        module, _, attr = ENGINES[name].partition(":")
    except KeyError:
        raise ConfigError(f"engine '{name}' is not one of: {', '.join(ENGINES)}") from None
    return getattr(import_module(module), attr)


def load_engine(settings: Settings) -> Engine:
    return engine_class(settings.engine).from_settings(settings)
