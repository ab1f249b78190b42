"""Request body content encodings: ``Content-Encoding: gzip`` bodies decompressed as they arrive.

The body limit holds for the decompressed size too: :class:`GzipDecoder` inflates each chunk with
``zlib``'s ``max_length`` set to what is left of the limit, so a small body that inflates to
gigabytes (a zip bomb) costs at most ``limit + 1`` bytes of output before it is refused (413).
A body that is not gzip, is damaged or ends early is a 422; an encoding other than ``gzip`` (or
``x-gzip``) and ``identity`` is a 415.
"""

from __future__ import annotations

import zlib

from service.errors import APIError

_GZIP = 16 + zlib.MAX_WBITS  # zlib's wbits for the gzip container (header and CRC checked)


class GzipDecoder:
    """Incremental gzip decompression under a size limit; several gzip members in a row are one
    body (as ``gzip.decompress`` reads them)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self._inflate = zlib.decompressobj(_GZIP)
        self._started = False  # bytes of the current member have been fed

    def feed(self, data: bytes) -> bytes:
        """The decompressed bytes of ``data``, the next chunk of the body. Raises :class:`APIError`:
        413 once the output passes the limit, 422 for a damaged stream."""
        out = []
        while data:
            if self._inflate.eof:  # the next member starts (or trailing bytes, which must be gzip too)
                self._inflate, self._started = zlib.decompressobj(_GZIP), False
            self._started = True
            try:
                piece = self._inflate.decompress(data, self.limit - self.size + 1)
            except zlib.error as err:
                raise _damaged(str(err)) from None
            self.size += len(piece)
            if self.size > self.limit:
                raise APIError(413, "too_large", f"the request body decompresses to more than the limit of "
                                                 f"{self.limit} bytes")
            out.append(piece)
            data = self._inflate.unconsumed_tail or self._inflate.unused_data
        return b"".join(out)

    def finish(self) -> None:
        """Check that the body ended with a complete gzip member (422 when it was cut short)."""
        if self._started and not self._inflate.eof:
            raise _damaged("the gzip stream ends early")


def _damaged(reason: str) -> APIError:
    return APIError(422, "invalid_request", f"the gzip request body cannot be decompressed: {reason}")


def body_decoder(content_encoding: bytes | None, limit: int) -> GzipDecoder | None:
    """The decoder for a ``Content-Encoding`` header value (``None`` for no encoding or identity);
    415 for any other encoding."""
    value = (content_encoding or b"").strip().lower()
    if value in (b"", b"identity"):
        return None
    if value in (b"gzip", b"x-gzip"):
        return GzipDecoder(limit)
    shown = value.decode("latin-1")[:40]
    raise APIError(415, "unsupported_encoding", f"Content-Encoding {shown!r} is not supported; send the body as "
                                                f"is or with Content-Encoding: gzip")
