"""Named refusals of environment manifests: the JSONC text, the devcontainer declaration, the
manifest file, and a resume in an environment other than the one recorded at the park.

Kept apart from :mod:`fleet.errors` (the record's refusals, which the ledger stores and
counts); every class still subclasses :class:`~fleet.errors.FleetError`, and its name is the
rule name the CLI prints (``docs/spec/manifest.md`` lists them all). Each carries ``where``:
the JSON path of the value it concerns (``$`` for the whole document, ``$.features["ref"]``
for one member), or ``None`` when no one value is at fault.
"""

from __future__ import annotations

from fleet_ledger.fleet.errors import FleetError, ManifestMismatch

__all__ = [
    "BadEnvironmentName",
    "BadManifestSignature",
    "ByteOrderMark",
    "DevcontainerRefused",
    "DuplicateKey",
    "EnvironmentMismatch",
    "IntegerOutOfRange",
    "JsoncError",
    "JsoncSyntax",
    "LifecycleCommand",
    "LoaderEnvironment",
    "LoneSurrogate",
    "MalformedManifest",
    "MalformedProperty",
    "ManifestAddressMismatch",
    "ManifestError",
    "ManifestFileError",
    "MissingImage",
    "NonFiniteNumber",
    "NonIntegerNumber",
    "NotNormalised",
    "ShellInFeatureOption",
    "Substitution",
    "UnknownProperty",
    "UnpinnedFeature",
    "UnpinnedImage",
    "UntrustedManifestKey",
    "Widening",
]


class ManifestError(FleetError):
    """Base of every refusal concerning an environment manifest or its source text."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where


# -- the JSONC text (fleet.env.jsonc) -----------------------------------------------------------


class JsoncError(ManifestError):
    """Text that is not the strict JSONC a declaration is read from."""


class JsoncSyntax(JsoncError):
    """Not JSON with comments and trailing commas (or not UTF-8, too large, nested too deep)."""


class ByteOrderMark(JsoncError):
    """Text starting with a byte order mark (U+FEFF)."""


class DuplicateKey(JsoncError):
    """An object naming the same key twice, at any depth (which one counts is not agreed)."""


class NonFiniteNumber(JsoncError):
    """``NaN``, ``Infinity`` or ``-Infinity``: not JSON numbers."""


class NonIntegerNumber(JsoncError):
    """A number with a fraction or an exponent: a declaration holds integers only."""


class IntegerOutOfRange(JsoncError):
    """An integer beyond +-(2^53 - 1), which JSON readers disagree on."""


class LoneSurrogate(JsoncError):
    """A ``\\uD800``-``\\uDFFF`` escape that is not half of a surrogate pair."""


# -- the declaration (fleet.env.manifest) -------------------------------------------------------


class DevcontainerRefused(ManifestError):
    """A devcontainer declaration outside the declarative subset a manifest may pin."""


class LifecycleCommand(DevcontainerRefused):
    """A lifecycle command (``postCreateCommand``, ``waitFor``, ...): it runs code the
    manifest cannot pin."""


class Widening(DevcontainerRefused):
    """A property widening the container's reach (``privileged``, ``mounts``, ``runArgs``,
    ``build``, compose files, ...)."""


class UnknownProperty(DevcontainerRefused):
    """A property not on the allowlist, at any depth."""


class UnpinnedImage(DevcontainerRefused):
    """An image named by tag, or by anything but ``repository@sha256:<64 hex>``."""


class UnpinnedFeature(DevcontainerRefused):
    """A feature named by tag, path or URL rather than ``registry/path@sha256:<64 hex>``."""


class Substitution(DevcontainerRefused):
    """A ``${...}`` variable (``${localEnv:X}``, ``${containerEnv:X}``, ...): the value
    would come from the machine, not the declaration."""


class BadEnvironmentName(DevcontainerRefused):
    """An environment variable name that is not a plain ``[A-Za-z_][A-Za-z0-9_]*`` name."""


class LoaderEnvironment(DevcontainerRefused):
    """An environment variable that changes how programs are found or loaded
    (``LD_PRELOAD``, ``BASH_ENV``, ``PROMPT_COMMAND``, ``PATH``, ...)."""


class ShellInFeatureOption(DevcontainerRefused):
    """A feature option value with a character a feature's install script could run as
    shell (quotes, ``$``, backticks, ``;``, newlines, ...)."""


class MalformedProperty(DevcontainerRefused):
    """An allowed property whose value has the wrong type or form."""


class MissingImage(DevcontainerRefused):
    """A declaration without an ``image``: nothing pins the container's content."""


# -- the manifest file ----------------------------------------------------------------------


class ManifestFileError(ManifestError):
    """A manifest file that does not hold, or does not prove, what it claims."""


class MalformedManifest(ManifestFileError):
    """A file that is not shaped like a manifest file (keys, types, key texts)."""


class NotNormalised(ManifestFileError):
    """A manifest whose declaration is not in the normal form the builder writes."""


class ManifestAddressMismatch(ManifestFileError):
    """The stated address is not the BLAKE3 of the manifest's canonical bytes."""

    def __init__(self, message: str, *, stated: str, computed: str) -> None:
        super().__init__(message)
        self.stated = stated
        self.computed = computed


class BadManifestSignature(ManifestFileError):
    """A signature that does not verify under the key the file names."""


class UntrustedManifestKey(ManifestFileError):
    """A manifest signed by a key other than the verifier keys the caller trusts."""


# -- resumption precondition 2 (the host) ---------------------------------------------------


class EnvironmentMismatch(ManifestMismatch):
    """A host asked to resume a run in an environment whose manifest address is not the
    one recorded at the park. Raised before anything is sealed; the ledger names the same
    rule ``ManifestMismatch`` when a segment breaking it reaches the stream."""

    def __init__(self, message: str, *, recorded: str, offered: str,
                 segment: int | None = None) -> None:
        super().__init__(message, segment=segment)
        self.recorded = recorded
        self.offered = offered
