"""Environments: the C7 manifest (JSONC text, canonical bytes, signatures) and the exec guard's
policy, decisions and journal. Above :mod:`fleet.record` and :mod:`fleet.log`."""

__all__: list[str] = []
