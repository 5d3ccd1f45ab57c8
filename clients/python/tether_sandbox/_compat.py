"""deepagents / deepagents-code base classes, or minimal stand-ins.

When ``deepagents`` is importable, TetherSandbox subclasses its
``BaseSandbox`` and returns its ``ExecuteResponse``, ``FileUploadResponse``
and ``FileDownloadResponse``; when ``deepagents_code`` (dcode) is importable,
TetherProvider subclasses its ``SandboxProvider`` and raises its
``SandboxNotFoundError``. Without them, the classes below stand in: the
response dataclasses have deepagents' names, fields and types, but the base
classes are minimal — they declare only what a backend or a provider
implements (``id``, ``execute``, ``upload_files``, ``download_files`` and
their async twins; ``get_or_create`` and ``delete``), not deepagents' file
tools (``ls``, ``read``, ``write``, ``edit``, ``grep``, ``glob``), which
exist only when deepagents is installed.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

__all__ = [
    "HAVE_DEEPAGENTS",
    "HAVE_DEEPAGENTS_CODE",
    "BaseSandbox",
    "ExecuteResponse",
    "FileUploadResponse",
    "FileDownloadResponse",
    "FileOperationError",
    "SandboxProvider",
    "SandboxProviderMetadata",
    "SandboxInstallHint",
    "SandboxError",
    "SandboxNotFoundError",
]

FileOperationError = Literal["file_not_found", "permission_denied", "is_directory", "invalid_path"]

try:
    from deepagents.backends.protocol import (  # type: ignore[import-not-found]
        ExecuteResponse,
        FileDownloadResponse,
        FileUploadResponse,
    )
    from deepagents.backends.sandbox import BaseSandbox  # type: ignore[import-not-found]

    HAVE_DEEPAGENTS = True
except ImportError:
    HAVE_DEEPAGENTS = False

    @dataclass
    class ExecuteResponse:  # type: ignore[no-redef]
        """A command's combined output, exit code and truncation flag."""

        output: str
        exit_code: Optional[int] = None
        truncated: bool = False

    @dataclass
    class FileUploadResponse:  # type: ignore[no-redef]
        """One upload's result: error is None, a FileOperationError literal,
        or a backend's own error string when no literal fits."""

        path: str
        error: Optional[Union[FileOperationError, str]] = None

    @dataclass
    class FileDownloadResponse:  # type: ignore[no-redef]
        """One download's result: content on success, else error (a literal
        or a backend's own error string)."""

        path: str
        content: Optional[bytes] = None
        error: Optional[Union[FileOperationError, str]] = None

    class BaseSandbox(ABC):  # type: ignore[no-redef]
        """A stand-in for deepagents' BaseSandbox with only the methods a
        backend implements (and their async twins, run in a thread); it has
        none of deepagents' file tools (ls, read, write, edit, grep, glob)."""

        @property
        @abstractmethod
        def id(self) -> str:
            """Unique identifier of the sandbox."""

        @abstractmethod
        def execute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:
            """Run a shell command."""

        async def aexecute(self, command: str, *, timeout: Optional[int] = None) -> ExecuteResponse:
            return await asyncio.to_thread(self.execute, command, timeout=timeout)

        @abstractmethod
        def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
            """Upload files; results in input order."""

        async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
            return await asyncio.to_thread(self.upload_files, files)

        @abstractmethod
        def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
            """Download files; results in input order."""

        async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
            return await asyncio.to_thread(self.download_files, paths)


_provider_module: Any = None
for _name in ("deepagents_code.integrations.sandbox_provider", "deepagents_cli.integrations.sandbox_provider"):
    try:
        _provider_module = __import__(_name, fromlist=["SandboxProvider"])
        break
    except ImportError:
        continue

HAVE_DEEPAGENTS_CODE = _provider_module is not None and hasattr(_provider_module, "SandboxProvider")

if HAVE_DEEPAGENTS_CODE:
    SandboxProvider = _provider_module.SandboxProvider
    SandboxError = _provider_module.SandboxError
    SandboxNotFoundError = _provider_module.SandboxNotFoundError
    SandboxProviderMetadata = getattr(_provider_module, "SandboxProviderMetadata", None)
    SandboxInstallHint = getattr(_provider_module, "SandboxInstallHint", None)
else:
    SandboxProviderMetadata = None
    SandboxInstallHint = None

    class SandboxError(Exception):  # type: ignore[no-redef]
        """Base error of sandbox provider operations."""

        @property
        def original_exc(self) -> Optional[BaseException]:
            return self.__cause__

    class SandboxNotFoundError(SandboxError):  # type: ignore[no-redef]
        """The requested sandbox cannot be found (or has ended)."""

    class SandboxProvider(ABC):  # type: ignore[no-redef]
        """A stand-in for dcode's SandboxProvider: get_or_create and delete,
        sync and async (the async ones run the sync ones in a thread)."""

        @property
        def metadata(self) -> Any:
            return None

        @abstractmethod
        def get_or_create(self, *, sandbox_id: Optional[str] = None, **kwargs: Any) -> Any:
            raise NotImplementedError

        @abstractmethod
        def delete(self, *, sandbox_id: str, **kwargs: Any) -> None:
            raise NotImplementedError

        async def aget_or_create(self, *, sandbox_id: Optional[str] = None, **kwargs: Any) -> Any:
            return await asyncio.to_thread(self.get_or_create, sandbox_id=sandbox_id, **kwargs)

        async def adelete(self, *, sandbox_id: str, **kwargs: Any) -> None:
            await asyncio.to_thread(self.delete, sandbox_id=sandbox_id, **kwargs)

if SandboxInstallHint is None:

    @dataclass(frozen=True)
    class SandboxInstallHint:  # type: ignore[no-redef]
        """How to install the package that provides a sandbox backend."""

        kind: Literal["extra", "package"]
        name: str

        def command(self, *, in_app: bool) -> str:
            prefix = "/install" if in_app else "dcode --install"
            suffix = " --package" if self.kind == "package" else ""
            return f"{prefix} {self.name}{suffix}"


if SandboxProviderMetadata is None:

    @dataclass(frozen=True)
    class SandboxProviderMetadata:  # type: ignore[no-redef]
        """Static description of a sandbox provider (dcode's registry reads it)."""

        name: str
        working_dir: str
        install: Optional[SandboxInstallHint] = None
        supports_sandbox_id: bool = True
        supports_snapshot_name: bool = False
        backend_module: Optional[str] = None
