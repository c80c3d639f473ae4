"""Environment manifests: a devcontainer.json's declarative subset, canonical, addressed, signed.

Format (``docs/spec/manifest.md`` is the normative text)
    A declaration is read as strict JSONC (:mod:`fleet.env.jsonc`) and checked against an
    allowlist (:data:`ALLOWED`); everything else is refused by name
    (:mod:`fleet.env.manifest_errors`). The accepted properties, in their normal form (the
    feature shorthand ``"ref": "1.2"`` becomes ``"ref": {"version": "1.2"}``, nothing else
    changes), make the manifest document::

        {"devcontainer": {...normal form...}, "format": "fleet.manifest/1"}

    Its canonical bytes are its RFC 8785 (JCS) serialisation, and its address is
    ``b3:`` + base64url(BLAKE3(canonical bytes)), as every content address of the record.
    Key order, whitespace and comments of the source therefore do not change the address.

Signing
    The builder signs ``"fleet.manifest.sig/1" || BLAKE3(canonical bytes)[32]`` with
    Ed25519, using a C2SP note key (``fleet keygen NAME --out DIR`` writes ``NAME.key``).
    A manifest file holds the document beside its address and signature::

        {"address": "b3:...",
         "manifest": {"devcontainer": {...}, "format": "fleet.manifest/1"},
         "signature": {"key": "<name+keyid+base64 verifier key>", "sig": "<base64, 64 bytes>"}}

Verifying (:func:`read_manifest_file`)
    Strict JSON (no comments); exactly those keys; the declaration re-checked against the
    allowlist and equal to its own normal form; the address recomputed; the signature
    checked under the key the file names, and, when the caller gives verifier keys, that
    key must be one of them. Any failure is a named :class:`ManifestError`.

Example::

    m = manifest_of_text(b'{"image": "ghcr.io/x/y@sha256:' + b"0" * 64 + b'"}')
    m.address                          # 'b3:...'
    signed = sign(m, parse_signer_key(key_text))
    read_manifest_file(signed.file_text()).manifest == m   # True
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import rfc8785

from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.env import jsonc
from fleet_ledger.fleet.env.manifest_errors import (
    BadEnvironmentName,
    BadManifestSignature,
    LifecycleCommand,
    LoaderEnvironment,
    MalformedManifest,
    MalformedProperty,
    ManifestAddressMismatch,
    MissingImage,
    NotNormalised,
    ShellInFeatureOption,
    Substitution,
    UnknownProperty,
    UnpinnedFeature,
    UnpinnedImage,
    UntrustedManifestKey,
    Widening,
)
from fleet_ledger.fleet.errors import MalformedAddress
from fleet_ledger.fleet.log.log_errors import MalformedKey
from fleet_ledger.fleet.log.note import Signer, Verifier, b64decode_strict, parse_verifier_key

__all__ = [
    "ALLOWED",
    "FORMAT",
    "LIFECYCLE",
    "LOADER_NAMES",
    "LOADER_PREFIXES",
    "SIGNATURE_DOMAIN",
    "WIDENING",
    "Manifest",
    "SignedManifest",
    "canonical_bytes",
    "is_manifest_file",
    "manifest_of",
    "manifest_of_text",
    "normalise",
    "read_environment",
    "read_manifest_file",
    "sign",
    "signature_message",
]

FORMAT = "fleet.manifest/1"
SIGNATURE_DOMAIN = b"fleet.manifest.sig/1"

LIFECYCLE = frozenset({
    "initializeCommand", "onCreateCommand", "updateContentCommand", "postCreateCommand",
    "postStartCommand", "postAttachCommand", "waitFor",
})
WIDENING = frozenset({
    "privileged", "capAdd", "securityOpt", "runArgs", "mounts", "workspaceMount", "appPort",
    "init", "build", "dockerFile", "dockerfile", "context", "dockerComposeFile", "service",
    "runServices",
})
# Names that change which program runs or what it loads before its own code (compared in
# upper case, so a differently cased twin is refused too).
LOADER_NAMES = frozenset({
    "PATH", "CDPATH", "IFS", "ENV", "BASH_ENV", "BASHOPTS", "SHELLOPTS", "GLOBIGNORE",
    "PROMPT_COMMAND", "PS0", "PS1", "PS2", "PS3", "PS4", "ZDOTDIR", "HOSTALIASES",
    "GCONV_PATH", "LOCPATH", "NLSPATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
    "PYTHONINSPECT", "PYTHONUSERBASE", "PERL5LIB", "PERLLIB", "PERL5OPT", "RUBYLIB",
    "RUBYOPT", "NODE_OPTIONS", "NODE_PATH", "CLASSPATH", "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND",
    "GIT_ASKPASS", "SSH_ASKPASS",
})
LOADER_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_", "GIT_CONFIG")

_SHA256 = re.compile(r"@sha256:[0-9a-f]{64}\Z")
_DOMAIN = r"(?:[a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9])(?:\.(?:[a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9]))*"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_NAME = re.compile(rf"(?:{_DOMAIN}(?::[0-9]{{1,5}})?/)?{_PATH_PART}(?:/{_PATH_PART})*\Z")
_FEATURE_NAME = re.compile(rf"{_DOMAIN}(?::[0-9]{{1,5}})?(?:/{_PATH_PART})+\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}\Z")
_OPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
# Feature options reach a shell script as KEY="value" lines: no quote, $, backtick,
# backslash, newline or other character a shell would act on.
_SHELL_SAFE = re.compile(r"[A-Za-z0-9 ._,:/@+=~%-]{0,256}\Z")
_USER = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_.-]{0,31}|[0-9]{1,10})"
                   r"(?::(?:[A-Za-z_][A-Za-z0-9_.-]{0,31}|[0-9]{1,10}))?\Z")
_SIZE = re.compile(r"[0-9]{1,15}(?:[tgmk]b)?\Z")
_HOST_PORT = re.compile(rf"{_DOMAIN}:([0-9]{{1,5}})\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_TEXT = 4096
_MAX_ITEMS = 256


# -- values ---------------------------------------------------------------------------------


def _member(where: str, key: str) -> str:
    return f"{where}.{key}" if _OPTION_NAME.match(key) else f"{where}[{json.dumps(key)}]"


def _string(v: Any, where: str, what: str) -> str:
    """A text value: a string without a ``${`` substitution, control characters or excess."""
    if type(v) is not str:
        raise MalformedProperty(f"{what} must be a string", where=where)
    _no_substitution(v, where)
    if _CONTROL.search(v):
        raise MalformedProperty(f"{what} holds a control character", where=where)
    if len(v) > _MAX_TEXT:
        raise MalformedProperty(f"{what} is longer than {_MAX_TEXT} characters", where=where)
    return v


def _no_substitution(v: str, where: str) -> None:
    if "${" in v:
        raise Substitution(f"{v[:60]!r} holds a ${{...}} substitution: the value would come "
                           "from the machine, not the declaration", where=where)


def _object(v: Any, where: str, what: str) -> dict[str, Any]:
    if type(v) is not dict:
        raise MalformedProperty(f"{what} must be an object", where=where)
    if len(v) > _MAX_ITEMS:
        raise MalformedProperty(f"{what} has more than {_MAX_ITEMS} members", where=where)
    return v


def _integer(v: Any, where: str, what: str, low: int, high: int) -> int:
    if type(v) is not int or not low <= v <= high:
        raise MalformedProperty(f"{what} must be an integer from {low} to {high}", where=where)
    return v


def _pinned(ref: str, where: str, what: str, name_form: re.Pattern[str],
            unpinned: type[UnpinnedImage] | type[UnpinnedFeature]) -> str:
    match = _SHA256.search(ref)
    if match is None:
        raise unpinned(f"the {what} {ref[:80]!r} is not named by digest "
                       f"(name@sha256:<64 lowercase hex>): a tag is not content", where=where)
    name = ref[:match.start()]
    if ":" in name.rpartition("/")[2]:
        raise MalformedProperty(f"the {what} {ref[:80]!r} has a tag beside its digest: name "
                                "it by digest alone (engines ignore the tag)", where=where)
    if name_form.match(name) is None:
        raise MalformedProperty(f"{name[:80]!r} is not a {what} name (lowercase "
                                "registry/path components)", where=where)
    return ref


# -- the allowed properties -----------------------------------------------------------------


def _name(v: Any, where: str) -> str:
    return _string(v, where, "name")


def _image(v: Any, where: str) -> str:
    return _pinned(_string(v, where, "image"), where, "image", _IMAGE_NAME, UnpinnedImage)


def _env(nulls: bool) -> Callable[[Any, str], dict[str, str | None]]:
    def check(v: Any, where: str) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for key in sorted(_object(v, where, "an environment")):
            at = _member(where, key)
            _string(key, at, "a variable name")
            if _ENV_NAME.match(key) is None:
                raise BadEnvironmentName(f"{key[:60]!r} is not a plain variable name "
                                         "([A-Za-z_][A-Za-z0-9_]*)", where=at)
            upper = key.upper()
            if upper in LOADER_NAMES or upper.startswith(LOADER_PREFIXES):
                raise LoaderEnvironment(f"{key} changes how programs are found or loaded",
                                        where=at)
            value = v[key]
            out[key] = None if value is None and nulls else _string(value, at, "a value")
        return out
    return check


def _user(v: Any, where: str) -> str:
    user = _string(v, where, "a user")
    if _USER.match(user) is None:
        raise MalformedProperty(f"{user[:60]!r} is not a user name or uid[:gid]", where=where)
    return user


def _workspace_folder(v: Any, where: str) -> str:
    path = _string(v, where, "workspaceFolder")
    parts = path.split("/")
    if not path.startswith("/") or (path != "/" and any(p in ("", ".", "..")
                                                        for p in parts[1:])):
        raise MalformedProperty(f"{path[:80]!r} is not an absolute path without '.', '..' "
                                "or empty components", where=where)
    return path


def _forward_ports(v: Any, where: str) -> list[int | str]:
    if type(v) is not list or len(v) > _MAX_ITEMS:
        raise MalformedProperty(f"forwardPorts must be a list of at most {_MAX_ITEMS}",
                                where=where)
    out: list[int | str] = []
    for i, port in enumerate(v):
        at = f"{where}[{i}]"
        if type(port) is int:
            out.append(_integer(port, at, "a port", 1, 65535))
            continue
        match = _HOST_PORT.match(_string(port, at, "a port"))
        if match is None or not 1 <= int(match.group(1)) <= 65535:
            raise MalformedProperty(f"{port[:80]!r} is neither a port nor host:port", where=at)
        out.append(port)
    if len(set(out)) != len(out):
        raise MalformedProperty("forwardPorts names a port twice", where=where)
    return out


def _size(v: Any, where: str) -> str:
    size = _string(v, where, "a size")
    if _SIZE.match(size) is None:
        raise MalformedProperty(f"{size[:40]!r} is not a size (digits, then tb, gb, mb or kb)",
                                where=where)
    return size


def _gpu(v: Any, where: str) -> bool | str | dict[str, Any]:
    if type(v) is bool:
        return v
    if v == "optional":
        return "optional"
    if type(v) is dict:
        return _fields(v, where, {"cores": lambda c, at: _integer(c, at, "cores", 1, 1 << 20),
                                  "memory": _size})
    raise MalformedProperty("gpu must be true, false, \"optional\" or {cores, memory}",
                            where=where)


def _host_requirements(v: Any, where: str) -> dict[str, Any]:
    return _fields(_object(v, where, "hostRequirements"), where, {
        "cpus": lambda c, at: _integer(c, at, "cpus", 1, 1 << 20),
        "memory": _size, "storage": _size, "gpu": _gpu})


def _shutdown_action(v: Any, where: str) -> str:
    if v not in ("none", "stopContainer") or type(v) is not str:
        raise MalformedProperty('shutdownAction must be "none" or "stopContainer"', where=where)
    return v


def _features(v: Any, where: str) -> dict[str, dict[str, str | bool]]:
    out: dict[str, dict[str, str | bool]] = {}
    for ref in sorted(_object(v, where, "features")):
        at = _member(where, ref)
        _pinned(_string(ref, at, "a feature"), at, "feature", _FEATURE_NAME, UnpinnedFeature)
        options = v[ref]
        if type(options) is str:
            options = {"version": options}  # the spec's shorthand for the version option
        out[ref] = _feature_options(_object(options, at, "a feature's options"), at)
    return out


def _feature_options(options: dict[str, Any], where: str) -> dict[str, str | bool]:
    seen: set[str] = set()
    for key in sorted(options):
        at = _member(where, key)
        _string(key, at, "an option name")
        if _OPTION_NAME.match(key) is None:
            raise MalformedProperty(f"{key[:60]!r} is not an option name "
                                    "([A-Za-z_][A-Za-z0-9_]*)", where=at)
        if key.upper() in seen:  # install scripts see options as upper-cased variables
            raise MalformedProperty(f"{key} differs from another option only in case",
                                    where=at)
        seen.add(key.upper())
        value = options[key]
        if type(value) is bool:
            continue
        if type(value) is not str:
            raise MalformedProperty("an option value must be a string or a boolean", where=at)
        _no_substitution(value, at)
        if _SHELL_SAFE.match(value) is None:  # newlines and control characters included
            raise ShellInFeatureOption(
                f"{value[:60]!r} has a character an install script could run as shell, "
                "or more than 256 (allowed: letters, digits, space and . _ , : / @ + = ~ % -)",
                where=at)
    return dict(options)


def _fields(v: dict[str, Any], where: str,
            allowed: dict[str, Callable[[Any, str], Any]]) -> dict[str, Any]:
    """Check each member with its validator, in code point order; anything else is
    :class:`UnknownProperty`."""
    out = {}
    for key in sorted(v):
        at = _member(where, key)
        check = allowed.get(key)
        if check is None:
            raise UnknownProperty(f"{key[:60]!r} is not an allowed property here", where=at)
        out[key] = check(v[key], at)
    return out


ALLOWED: dict[str, Callable[[Any, str], Any]] = {
    "name": _name,
    "image": _image,
    "features": _features,
    "containerEnv": _env(nulls=False),
    "remoteEnv": _env(nulls=True),
    "containerUser": _user,
    "remoteUser": _user,
    "workspaceFolder": _workspace_folder,
    "forwardPorts": _forward_ports,
    "hostRequirements": _host_requirements,
    "shutdownAction": _shutdown_action,
}


def normalise(declaration: Any) -> dict[str, Any]:
    """The normal form of a parsed devcontainer declaration, or the first refusal met
    (properties in code point order of their names; see the spec for the order)."""
    decl = _object(declaration, "$", "a devcontainer declaration")
    for key in sorted(decl):
        at = _member("$", key)
        if key in LIFECYCLE:
            raise LifecycleCommand(f"{key} runs a command the manifest cannot pin", where=at)
        if key in WIDENING:
            raise Widening(f"{key} widens the container's reach beyond its image", where=at)
    out = _fields(decl, "$", ALLOWED)
    if "image" not in out:
        raise MissingImage("a declaration must name its image by digest", where="$")
    return out


# -- manifests ------------------------------------------------------------------------------


def canonical_bytes(document: dict[str, Any]) -> bytes:
    """RFC 8785 (JCS) bytes of a manifest document."""
    return rfc8785.dumps(document)


@dataclass(frozen=True)
class Manifest:
    """A manifest document with its canonical bytes and their BLAKE3 digest."""

    document: dict[str, Any]
    canonical: bytes
    digest: bytes

    @property
    def address(self) -> str:
        return format_address(self.digest)

    @property
    def devcontainer(self) -> dict[str, Any]:
        # manifest_of() puts normalise()'s dict here; the document is dict[str, Any].
        devcontainer: dict[str, Any] = self.document["devcontainer"]
        return devcontainer


def manifest_of(declaration: Any) -> Manifest:
    """The manifest of a parsed declaration (normalised; refused by name if it must be)."""
    document = {"devcontainer": normalise(declaration), "format": FORMAT}
    canonical = canonical_bytes(document)
    return Manifest(document, canonical, digest(canonical))


def manifest_of_text(data: bytes | str) -> Manifest:
    """The manifest of a devcontainer.json's text (strict JSONC)."""
    return manifest_of(jsonc.loads(data))


def signature_message(manifest_digest: bytes) -> bytes:
    """``"fleet.manifest.sig/1" || BLAKE3(canonical bytes)[32]``: what the builder signs."""
    return SIGNATURE_DOMAIN + manifest_digest


@dataclass(frozen=True)
class SignedManifest:
    """A manifest, the verifier key of the key that built it, and its signature."""

    manifest: Manifest
    signer: Verifier
    signature: bytes

    def file_json(self) -> dict[str, Any]:
        return {
            "address": self.manifest.address,
            "manifest": self.manifest.document,
            "signature": {"key": self.signer.text(),
                          "sig": base64.b64encode(self.signature).decode("ascii")},
        }

    def file_text(self) -> str:
        """The manifest file: the JSON above, keys sorted, two-space indented."""
        return json.dumps(self.file_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def sign(manifest: Manifest, signer: Signer) -> SignedManifest:
    """Sign ``manifest``'s digest with ``signer`` (a note key)."""
    return SignedManifest(manifest, signer.verifier(),
                          signer.sign(signature_message(manifest.digest)))


def _shape(value: Any, keys: set[str], what: str) -> dict[str, Any]:
    if type(value) is not dict or set(value) != keys:
        raise MalformedManifest(f"{what} must be an object with exactly the keys "
                                f"{', '.join(sorted(keys))}")
    return value


def _text_field(value: Any, what: str) -> str:
    if type(value) is not str:
        raise MalformedManifest(f"{what} must be a string")
    return value


def read_manifest_file(data: bytes | str,
                       trusted: Iterable[Verifier] | None = None) -> SignedManifest:
    """A manifest file verified as the module docstring says, or the named refusal."""
    top = _shape(jsonc.loads(data, comments=False), {"address", "manifest", "signature"},
                 "a manifest file")
    document = _shape(top["manifest"], {"devcontainer", "format"}, "manifest")
    if document["format"] != FORMAT:
        raise MalformedManifest(f"the manifest's format is not {FORMAT!r}")
    sig = _shape(top["signature"], {"key", "sig"}, "signature")
    stated = _text_field(top["address"], "address")
    try:
        parse_address(stated)
        signer = parse_verifier_key(_text_field(sig["key"], "signature key"))
    except (MalformedAddress, MalformedKey) as exc:
        raise MalformedManifest(str(exc)) from None
    signature = b64decode_strict(_text_field(sig["sig"], "signature"), "the signature",
                                 MalformedManifest)
    if len(signature) != 64:
        raise MalformedManifest("an Ed25519 signature is 64 bytes")
    manifest = manifest_of(document["devcontainer"])
    if manifest.canonical != canonical_bytes(document):
        raise NotNormalised("the declaration is not in the normal form a builder writes")
    if manifest.address != stated:
        raise ManifestAddressMismatch(
            f"the file says {stated}, its manifest hashes to {manifest.address}",
            stated=stated, computed=manifest.address)
    if not signer.verify(signature_message(manifest.digest), signature):
        raise BadManifestSignature(
            f"the signature does not verify under {signer.name}+{signer.key_id:08x}")
    if trusted is not None and signer not in set(trusted):
        raise UntrustedManifestKey(
            f"signed by {signer.text()}, which is not among the verifier keys given")
    return SignedManifest(manifest, signer, signature)


def is_manifest_file(value: Any) -> bool:
    """A parsed file is a manifest file when it is an object with a ``manifest`` member
    (no devcontainer declaration may have one: it is not on the allowlist)."""
    return type(value) is dict and "manifest" in value


def read_environment(data: bytes | str, trusted: Iterable[Verifier] | None = None
                     ) -> Manifest:
    """The manifest of an environment given as either a devcontainer.json's text or a
    manifest file's (verified, against ``trusted`` when given)."""
    value = jsonc.loads(data)
    if is_manifest_file(value):
        return read_manifest_file(data, trusted).manifest
    return manifest_of(value)
